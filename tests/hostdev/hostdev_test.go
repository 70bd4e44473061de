// Package hostdev tests the softrnic daemon as a host's RDMA device (issue 11): several
// processes attached to one device on one IP address run RoCEv2 RC traffic at once, to
// each other and to another device, and one of them killed with SIGKILL leaves the others
// unaffected and its resources released.
package hostdev

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/daemon"
	"github.com/softrnic/softrnic/internal/tools/res"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		if err := runChild(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rig is a daemon serving device hd0 on 127.0.0.1 and another device, in-process on
// 127.0.0.2, which every child connects to.
type rig struct {
	sock    string
	dev     netip.AddrPort // the daemon's device's RoCEv2 address
	ext     *host.Device
	extLn   *cm.Listener
	extAddr string
}

const extCMPort = 7300

func newRig(t *testing.T, steering string) *rig {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "hd0.sock")
	o, err := daemon.ParseArgs([]string{"-foreground", "-name", "hd0", "-sock", sock, "-rocev2", "127.0.0.1:0", "-target-mib", "0",
		"-steer", steering}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = io.Discard
	d, err := daemon.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	st, err := uapi.GetStatus(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{sock: sock, dev: netip.MustParseAddrPort(st.ListenRoCEv2[0])}
	t.Logf("device hd0 at %v, steering %s", r.dev, st.Steering)
	// the other device answers the children on the device's port (their source port is
	// another in the relay mode)
	r.ext, err = host.Open("ext", &host.Options{Socket: filepath.Join(t.TempDir(), "none.sock"), Local: "127.0.0.2:0",
		RoCE: &rocev2.Config{PeerPort: r.dev.Port()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ext.Close() })
	if r.extLn, err = r.ext.Transport().Listen(fmt.Sprintf(":%d", extCMPort)); err != nil {
		t.Fatal(err)
	}
	r.extAddr = childAddr(r.ext.Addr(), extCMPort)
	return r
}

// child is a running child process.
type child struct {
	i     int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
	done  chan error
}

func (r *rig) start(t *testing.T, i, procs, rounds int, peers bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	p := "0"
	if peers {
		p = "1"
	}
	cmd.Env = append(os.Environ(), envChild+"="+strconv.Itoa(i), envProcs+"="+strconv.Itoa(procs),
		envPort+"="+strconv.Itoa(int(r.dev.Port())), envExt+"="+r.extAddr, envRounds+"="+strconv.Itoa(rounds),
		envPeers+"="+p, "SOFTRNIC_SOCK="+r.sock)
	c := &child{i: i, cmd: cmd, lines: make(chan string, 64), done: make(chan error, 1)}
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitLine waits for the child to print want.
func (c *child) waitLine(t *testing.T, want string) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case l := <-c.lines:
			if l == want {
				return
			}
		case err := <-c.done:
			t.Fatalf("child %d ended (%v) before %q:\n%s", c.i, err, want, c.output())
		case <-timer.C:
			t.Fatalf("child %d did not print %q:\n%s", c.i, want, c.output())
		}
	}
}

func (c *child) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(3 * time.Minute):
		t.Fatalf("child %d did not end:\n%s", c.i, c.output())
		return nil
	}
}

// extReceivers accepts n connections on the other device and checks rounds on each;
// results come back by the seed each dialer named (100 + its index).
type extResult struct {
	seed int
	err  error
}

func (r *rig) extReceivers(t *testing.T, n, rounds int, progress func(seed, r int)) <-chan extResult {
	out := make(chan extResult, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	for range n {
		go func() {
			e, _, seed, err := accept(ctx, r.ext.RNIC(), r.extLn)
			if err != nil {
				out <- extResult{-1, err}
				return
			}
			err = e.receiver(ctx, seed, rounds, func(k int) {
				if progress != nil {
					progress(seed, k)
				}
			})
			out <- extResult{seed, err}
			<-ctx.Done() // keep the QP until the test ends (its state is checked)
			_ = e.qp
		}()
	}
	return out
}

// TestFourProcessesOneIP: four processes attached to device hd0 on 127.0.0.1 connect to
// each other (six connections through the daemon's CM routing, all on one UDP port) and
// each to a device on 127.0.0.2, and run rounds of 256 KiB WRITE + SEND on all ten at
// once; every byte is checked by the receiving side. With BPF steering (where permitted:
// else "auto" is the relay too) and with the relay.
func TestFourProcessesOneIP(t *testing.T) {
	for _, steering := range []string{"auto", "relay"} {
		t.Run(steering, func(t *testing.T) { testFourProcesses(t, steering) })
	}
}

func testFourProcesses(t *testing.T, steering string) {
	const procs, rounds = 4, 20
	r := newRig(t, steering)
	results := r.extReceivers(t, procs, rounds, nil)
	cs := make([]*child, procs)
	for i := range cs {
		cs[i] = r.start(t, i, procs, rounds, true)
	}
	for _, c := range cs {
		c.waitLine(t, "listening")
	}
	for _, c := range cs {
		fmt.Fprintln(c.stdin, "go")
	}
	for _, c := range cs {
		if err := c.wait(t); err != nil {
			t.Fatalf("child %d: %v\n%s", c.i, err, c.output())
		}
		if n := strings.Count("\n"+c.output(), "\nok "); n != procs {
			t.Fatalf("child %d verified %d connections, want %d:\n%s", c.i, n, procs, c.output())
		}
	}
	for range procs {
		res := <-results
		if res.err != nil {
			t.Fatalf("other device, connection seed %d: %v", res.seed, res.err)
		}
	}
}

// TestKillOneProcess: four processes attached to hd0 each run rounds with the device on
// 127.0.0.2; one is killed with SIGKILL mid-transfer. "res show qp -j" lists the four
// processes' QPs before, none of the killed one's after; the daemon disconnects the
// killed process's peer (a DREQ), and the three others complete every round.
func TestKillOneProcess(t *testing.T) {
	const procs, rounds, victim = 4, 150, 2
	r := newRig(t, "auto")
	var mu sync.Mutex
	progress := map[int]int{}
	results := r.extReceivers(t, procs, rounds, func(seed, k int) {
		mu.Lock()
		progress[seed] = k
		mu.Unlock()
	})
	cs := make([]*child, procs)
	for i := range cs {
		cs[i] = r.start(t, i, procs, rounds, false)
	}
	for _, c := range cs {
		c.waitLine(t, "listening")
	}
	for _, c := range cs {
		fmt.Fprintln(c.stdin, "go")
	}
	// every child is under way
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := 0
		for i := range procs {
			if progress[100+i] >= 3 {
				n++
			}
		}
		vp := progress[100+victim]
		mu.Unlock()
		if n == procs && vp < rounds {
			break
		}
		if vp >= rounds || time.Now().After(deadline) {
			t.Fatalf("children not all under way (victim at round %d of %d)", vp, rounds)
		}
		time.Sleep(2 * time.Millisecond)
	}
	before := qpsByPID(t, r.sock)
	for _, c := range cs {
		if qs := before[c.cmd.Process.Pid]; len(qs) != 1 || qs[0].State != "RTS" || !strings.Contains(qs[0].Peer, "127.0.0.2") {
			t.Fatalf("res show qp -j before the kill: child %d (pid %d) has %+v", c.i, c.cmd.Process.Pid, qs)
		}
	}
	// res show pd|cq|mr -j: each child's one PD (used by its QP and 3 MRs), its CQ and
	// its 3 MRs, under its pid
	pds, cqs, mrs := resByPID(t, r.sock, "pd"), resByPID(t, r.sock, "cq"), resByPID(t, r.sock, "mr")
	for _, c := range cs {
		pid := c.cmd.Process.Pid
		if p := pds[pid]; len(p) != 1 || p[0]["users"] != 4.0 {
			t.Fatalf("res show pd -j: child %d (pid %d) has %v", c.i, pid, p)
		}
		if q := cqs[pid]; len(q) != 1 || q[0]["cqe"] != 64.0 {
			t.Fatalf("res show cq -j: child %d (pid %d) has %v", c.i, pid, q)
		}
		m := mrs[pid]
		if len(m) != 3 || m[0]["mrlen"] != float64(xferLen) || m[0]["pdn"] != pds[pid][0]["pdn"] {
			t.Fatalf("res show mr -j: child %d (pid %d) has %v", c.i, pid, m)
		}
	}
	vpid := cs[victim].cmd.Process.Pid
	if err := cs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cs[victim].wait(t); err == nil {
		t.Fatal("victim exited cleanly")
	}
	// its QPs and its attachment are gone from the device
	deadline = time.Now().Add(10 * time.Second)
	for {
		after := qpsByPID(t, r.sock)
		st, err := uapi.GetStatus(context.Background(), r.sock)
		if err != nil {
			t.Fatal(err)
		}
		attached := false
		for _, p := range st.Processes {
			attached = attached || p.PID == vpid
		}
		if len(after[vpid]) == 0 && !attached && st.Daemon.DREQsSent >= 1 {
			for _, kind := range uapi.ResKinds {
				if rs := resByPID(t, r.sock, kind)[vpid]; len(rs) != 0 {
					t.Fatalf("res show %s -j after SIGKILL lists the victim's %v", kind, rs)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGKILL: victim's QPs %+v, attached %v, DREQs sent %d", after[vpid], attached, st.Daemon.DREQsSent)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, c := range cs {
		if i == victim {
			continue
		}
		if err := c.wait(t); err != nil || !strings.Contains(c.output(), "ok ext") {
			t.Fatalf("child %d after the kill: %v\n%s", i, err, c.output())
		}
	}
	for range procs {
		res := <-results
		switch {
		case res.seed == 100+victim:
			if res.err == nil {
				t.Fatal("the killed process's connection completed every round")
			}
			t.Logf("killed process's peer: %v", res.err)
		case res.err != nil:
			t.Fatalf("other device, connection seed %d: %v", res.seed, res.err)
		}
	}
}

// qpsByPID reads "softrnic res show qp -j" and groups the QPs by process.
func qpsByPID(t *testing.T, sock string) map[int][]uapi.QPStatus {
	t.Helper()
	var b bytes.Buffer
	if err := res.Res(context.Background(), res.Options{Sock: sock, JSON: true}, []string{"show", "qp"}, &b); err != nil {
		t.Fatal(err)
	}
	var qs []uapi.QPStatus
	if err := json.Unmarshal(b.Bytes(), &qs); err != nil {
		t.Fatalf("res show qp -j: %v\n%s", err, b.String())
	}
	out := map[int][]uapi.QPStatus{}
	for _, q := range qs {
		out[q.PID] = append(out[q.PID], q)
	}
	return out
}

// resByPID reads "softrnic res show KIND -j" and groups the objects by process.
func resByPID(t *testing.T, sock, kind string) map[int][]map[string]any {
	t.Helper()
	var b bytes.Buffer
	if err := res.Res(context.Background(), res.Options{Sock: sock, JSON: true}, []string{"show", kind}, &b); err != nil {
		t.Fatal(err)
	}
	var rs []map[string]any
	if err := json.Unmarshal(b.Bytes(), &rs); err != nil {
		t.Fatalf("res show %s -j: %v\n%s", kind, err, b.String())
	}
	out := map[int][]map[string]any{}
	for _, r := range rs {
		pid, _ := r["pid"].(float64)
		out[int(pid)] = append(out[int(pid)], r)
	}
	return out
}
