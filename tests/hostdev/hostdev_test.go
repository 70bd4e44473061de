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
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/daemon"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/internal/tools/res"
	"github.com/softrnic/softrnic/internal/tools/target"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(envDaemon); args != "" {
		os.Exit(daemon.Main(strings.Split(args, "\n")))
	}
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

func newRig(t *testing.T, steering string, extra ...string) *rig {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "hd0.sock")
	o, err := daemon.ParseArgs(append([]string{"-foreground", "-name", "hd0", "-sock", sock, "-rocev2", "127.0.0.1:0", "-target-mib", "0",
		"-steer", steering}, extra...), io.Discard)
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
	r.openExt(t, "127.0.0.2:0", nil)
	return r
}

// openExt opens the other device in-process at local (ip:port), run by in (a namespace,
// netnstest.In; nil: here), with its listener on extCMPort. It answers the children on
// the device's port (their source port is another in the relay mode).
func (r *rig) openExt(t *testing.T, local string, in func(func())) {
	t.Helper()
	if in == nil {
		in = func(f func()) { f() }
	}
	var err error
	in(func() { // the device's socket is made here
		r.ext, err = host.Open("ext", &host.Options{Socket: filepath.Join(t.TempDir(), "none.sock"), Local: local,
			RoCE: &rocev2.Config{PeerPort: r.dev.Port()}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.ext.Close() })
	if r.extLn, err = r.ext.Transport().Listen(fmt.Sprintf(":%d", extCMPort)); err != nil {
		t.Fatal(err)
	}
	r.extAddr = childAddr(r.ext.Addr(), extCMPort)
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
	c := r.prepare(t, i, procs, rounds, peers)
	c.run(t)
	return c
}

// prepare makes child i's command without starting it (run starts it).
func (r *rig) prepare(t *testing.T, i, procs, rounds int, peers bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	p := "0"
	if peers {
		p = "1"
	}
	cmd.Env = append(os.Environ(), envChild+"="+strconv.Itoa(i), envProcs+"="+strconv.Itoa(procs),
		envPort+"="+strconv.Itoa(int(r.dev.Port())), envExt+"="+r.extAddr, envRounds+"="+strconv.Itoa(rounds),
		envPeers+"="+p, "SOFTRNIC_SOCK="+r.sock)
	return &child{i: i, cmd: cmd, lines: make(chan string, 64), done: make(chan error, 1)}
}

// run starts the child and collects its output.
func (c *child) run(t *testing.T) {
	t.Helper()
	cmd := c.cmd
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

// TestDaemonRestart: the daemon (a process of its own) is killed with SIGKILL while a
// process is attached and another has finished; that process's device fails (its run ends
// with an error, no hang); a daemon started again on the same socket and address (over
// the dead one's socket files) takes new processes, whose traffic is verified.
func TestDaemonRestart(t *testing.T) {
	const rounds = 20
	sock := filepath.Join(t.TempDir(), "hd0.sock")
	l, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil) // a free port below 0xC000
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr()
	l.Close()
	startDaemon := func() *exec.Cmd { return startDaemonProcess(t, nil, sock, addr) }
	r := &rig{sock: sock, dev: addr}
	r.openExt(t, "127.0.0.2:0", nil)
	results := r.extReceivers(t, 2, rounds, nil)
	run := func(c *child) {
		t.Helper()
		c.waitLine(t, "listening")
		fmt.Fprintln(c.stdin, "go")
		if err := c.wait(t); err != nil || !strings.Contains(c.output(), "ok ext") {
			t.Fatalf("child %d: %v\n%s", c.i, err, c.output())
		}
		if res := <-results; res.err != nil || res.seed != 100+c.i {
			t.Fatalf("other device, child %d's connection: seed %d: %v", c.i, res.seed, res.err)
		}
	}

	d1 := startDaemon()
	run(r.start(t, 0, 1, rounds, false))
	attached := r.start(t, 1, 1, rounds, false)
	attached.waitLine(t, "listening")
	if err := d1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(attached.stdin, "go")
	if err := attached.wait(t); err == nil || !strings.Contains(attached.output(), "daemon") {
		t.Fatalf("a process attached to a killed daemon: %v\n%s", err, attached.output())
	}
	t.Logf("attached when the daemon was killed: %s", strings.TrimSpace(attached.output()))

	startDaemon()
	run(r.start(t, 2, 1, rounds, false))
}

// TestGroupPermission: with -group, an unprivileged process whose group it is attaches
// and runs verified traffic; one outside the group is refused (EACCES) and the daemon is
// not affected. Needs root (to run the children as nobody).
func TestGroupPermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): running children as an unprivileged user")
	}
	g, err := user.LookupGroupId("65534")
	if err != nil {
		t.Skipf("SKIP: no group 65534 on this machine: %v", err)
	}
	const rounds = 10
	r := newRig(t, "auto", "-group", g.Name)
	// the children run as uid 65534: they need to reach the socket's directory and a
	// copy of the test binary they may execute
	for d := filepath.Dir(r.sock); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(filepath.Dir(r.sock), "hostdev.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(attach.Path(r.sock)); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("attach socket: %v %v, want mode 0660", fi.Mode(), err)
	}
	results := r.extReceivers(t, 1, rounds, nil)
	as := func(c *child, gid uint32) *child {
		c.cmd.Path = bin
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: gid, Groups: []uint32{}}}
		return c
	}
	member := as(r.prepare(t, 0, 1, rounds, false), 65534)
	outsider := as(r.prepare(t, 1, 1, rounds, false), 65533)
	outsider.run(t)
	if err := outsider.wait(t); err == nil || !strings.Contains(outsider.output(), "not permitted") || !strings.Contains(outsider.output(), "permission denied") {
		t.Fatalf("a process outside group %s: %v\n%s", g.Name, err, outsider.output())
	}
	t.Logf("outside the group: %s", strings.TrimSpace(outsider.output()))
	member.run(t)
	member.waitLine(t, "listening")
	fmt.Fprintln(member.stdin, "go")
	if err := member.wait(t); err != nil || !strings.Contains(member.output(), "ok ext") {
		t.Fatalf("a process of group %s: %v\n%s", g.Name, err, member.output())
	}
	if res := <-results; res.err != nil {
		t.Fatalf("other device: %v", res.err)
	}
}

// TestTargetOnDevice: "softrnic target -d hd0 --roce" attaches to the daemon's device (a
// process of the device: here the test's own), a peer on another device connects to it
// at the device's address, WRITEs and READs back through the advertised region; the
// daemon lists the target's QP and its region under the target's pid.
func TestTargetOnDevice(t *testing.T) {
	r := newRig(t, "auto")
	t.Setenv("SOFTRNIC_SOCK", r.sock)
	up := make(chan rnic.RemoteBuffer, 1)
	var cmAddr string
	o := target.DefaultOptions()
	o.Device, o.RoCE, o.MiB, o.Port = "hd0", true, 1, 7400
	o.Listening = func(a net.Addr, adv rnic.RemoteBuffer) { cmAddr = a.String(); up <- adv }
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- target.Run(ctx, o, &out) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("target: %v", err)
		}
		t.Log(out.String())
	}()
	var adv rnic.RemoteBuffer
	select {
	case adv = <-up:
	case err := <-done:
		t.Fatalf("target ended: %v\n%s", err, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("target not listening")
	}
	if want := childAddr(r.dev, 7400); cmAddr != want {
		t.Fatalf("target listens on %s, want the device's address %s", cmAddr, want)
	}
	// the peer: the other device, on 127.0.0.2
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	e, err := newEndpoint(r.ext.RNIC())
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.ext.Transport().Dial(dctx, e.qp, cmAddr, cm.Param{ORD: 1})
	if err != nil {
		t.Fatalf("dial the target at %s: %v", cmAddr, err)
	}
	defer c.Close()
	if got, err := rnic.ParseRemoteBuffer(c.PrivateData()); err != nil || got != adv || adv.Len != 1<<20 {
		t.Fatalf("advertisement %+v (%v), printed %+v", got, err, adv)
	}
	pattern(e.buf[:xferLen/2], 7, 1)
	for i, op := range []rnic.Opcode{rnic.OpWrite, rnic.OpRead} {
		sge := e.mr.SGE(0, xferLen/2)
		if op == rnic.OpRead {
			sge = e.mr.SGE(xferLen/2, xferLen/2)
		}
		if err := e.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: op, Flags: rnic.Signaled, SGL: []rnic.SGE{sge},
			RemoteAddr: adv.Addr + 4096, RKey: adv.RKey}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.wait(dctx); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
	}
	if !bytes.Equal(e.buf[:xferLen/2], e.buf[xferLen/2:]) {
		t.Fatal("READ back differs from the WRITE")
	}
	me := os.Getpid()
	if qs := qpsByPID(t, r.sock)[me]; len(qs) != 1 || qs[0].State != "RTS" || !strings.Contains(qs[0].Peer, "127.0.0.2") {
		t.Fatalf("res show qp: the target's QPs %+v", qs)
	}
	if ms := resByPID(t, r.sock, "mr")[me]; len(ms) != 1 || ms[0]["mrlen"] != float64(1<<20) {
		t.Fatalf("res show mr: the target's regions %v", ms)
	}
}

// startDaemonProcess runs "softrnic daemon" (this test binary) as a process of its own,
// device hd0 at addr with control socket sock, its command prefixed by wrap (nsenter)
// and followed by extra flags, and waits until it serves the device.
func startDaemonProcess(t *testing.T, wrap []string, sock string, addr netip.AddrPort, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"-foreground", "-name", "hd0", "-sock", sock, "-rocev2", addr.String(), "-target-mib", "0"}, extra...)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if len(wrap) > 0 {
		cmd = exec.Command(wrap[0], append(wrap[1:], os.Args[0], "-test.run=^$")...)
	}
	cmd.Env = append(os.Environ(), envDaemon+"="+strings.Join(args, "\n"))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("daemon's log:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := uapi.GetStatus(context.Background(), sock)
		if err == nil && len(st.ListenRoCEv2) == 1 && st.ListenRoCEv2[0] == addr.String() {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not serving %s at %v: %v (%+v)\n%s", sock, addr, err, st, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestXDPDevice: "softrnic daemon -xdp" is a shared device too. The daemon, with its
// RoCEv2 address on an AF_XDP port of a veth, and two attached processes run in one
// network namespace (nsenter); the other device is in the namespace across the veth. The
// XDP program takes UDP 4791 from the kernel, so the daemon relays each process's packets
// from the port (steering "relay"); both processes' connections to the other device are
// verified byte for byte, and the daemon lists their QPs. Needs root, AF_XDP and nsenter.
func TestXDPDevice(t *testing.T) {
	netnstest.RequirePriv(t)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("SKIP: nsenter (util-linux) is not installed:", err)
	}
	const rounds = 20
	e := netnstest.New(t, 1500, 1)
	wrap := []string{nsenter, fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(e.NS[0]))}
	sock := filepath.Join(t.TempDir(), "hd0.sock")
	addr := netip.AddrPortFrom(e.Addr[0], 4791)
	startDaemonProcess(t, wrap, sock, addr, "-xdp", e.Dev[0])
	st, err := uapi.GetStatus(context.Background(), sock)
	if err != nil || st.Steering != "relay" || st.Netdev != e.Dev[0] {
		t.Fatalf("status: steering %q netdev %q (%v)", st.Steering, st.Netdev, err)
	}
	// iWARP listeners share the AF_XDP port's TCP stack, which has the port's one address
	ctx := context.Background()
	port := netip.AddrPortFrom(e.Addr[0], 7479).String()
	if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "listen_iwarp", Value: port}}}); err != nil {
		t.Fatalf("listen_iwarp=%s: %v", port, err)
	}
	var ue *uapi.Error
	if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "listen_iwarp", Value: "127.0.0.1:7479"}}}); !errors.As(err, &ue) ||
		!strings.Contains(ue.Error(), "serves one address") {
		t.Fatalf("listen_iwarp on another address than the AF_XDP port's: %v", err)
	}
	r := &rig{sock: sock, dev: addr}
	// the other device, across the veth
	r.openExt(t, netip.AddrPortFrom(e.Addr[1], 4791).String(), func(f func()) { netnstest.In(t, e.NS[1], f) })
	results := r.extReceivers(t, 2, rounds, nil)
	cs := make([]*child, 2)
	for i := range cs {
		c := r.prepare(t, i, 2, rounds, false)
		c.cmd.Path = nsenter
		c.cmd.Args = append(slices.Clone(wrap), c.cmd.Args...)
		c.run(t)
		c.waitLine(t, "listening")
		cs[i] = c
	}
	for _, c := range cs {
		fmt.Fprintln(c.stdin, "go")
	}
	for _, c := range cs {
		if err := c.wait(t); err != nil || !strings.Contains(c.output(), "ok ext") {
			t.Fatalf("child %d: %v\n%s", c.i, err, c.output())
		}
	}
	for range cs {
		if res := <-results; res.err != nil {
			t.Fatalf("other device, connection seed %d: %v", res.seed, res.err)
		}
	}
	st, err = uapi.GetStatus(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Daemon.Steered == 0 {
		t.Fatalf("nothing relayed: %+v", st.Daemon)
	}
	t.Logf("relayed %d packets from the AF_XDP port, %d dropped", st.Daemon.Steered, st.Daemon.RelayDropped)
}

// TestTwoDevices: one daemon serves two devices (-device hd1@127.0.0.3:0), each with its
// own address, sockets and processes; a process attached to hd0 connects to one attached
// to hd1 and runs verified rounds; "dev" on each control socket describes its own device.
func TestTwoDevices(t *testing.T) {
	const rounds = 20
	dir := t.TempDir()
	sock0, sock1 := filepath.Join(dir, "hd0.sock"), filepath.Join(dir, "hd1.sock")
	o, err := daemon.ParseArgs([]string{"-foreground", "-name", "hd0", "-sock", sock0, "-rocev2", "127.0.0.1:0", "-target-mib", "0",
		"-device", "hd1@127.0.0.3:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = io.Discard
	ds, err := daemon.StartAll(o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, d := range ds {
			d.Close()
		}
	}()
	if len(ds) != 2 {
		t.Fatalf("%d devices", len(ds))
	}
	var addrs [2]netip.AddrPort
	var devs [2]*host.Device
	for i, sock := range []string{sock0, sock1} {
		st, err := uapi.GetStatus(context.Background(), sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Device != fmt.Sprintf("hd%d", i) || len(st.ListenRoCEv2) != 1 {
			t.Fatalf("%s: device %q at %v", sock, st.Device, st.ListenRoCEv2)
		}
		addrs[i] = netip.MustParseAddrPort(st.ListenRoCEv2[0])
		if devs[i], err = host.Open(st.Device, &host.Options{Socket: sock}); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
		if devs[i].Addr() != addrs[i] || !devs[i].Attached() {
			t.Fatalf("attached to %s at %v (%v), want %v", st.Device, devs[i].Addr(), devs[i].Attached(), addrs[i])
		}
	}
	if addrs[0].Addr() == addrs[1].Addr() {
		t.Fatalf("both devices at %v", addrs[0].Addr())
	}
	ln, err := devs[1].Transport().Listen(fmt.Sprintf(":%d", extCMPort))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recvd := make(chan error, 1)
	go func() {
		e, _, seed, err := accept(ctx, devs[1].RNIC(), ln)
		if err == nil {
			err = e.receiver(ctx, seed, rounds, nil)
		}
		recvd <- err
	}()
	e, rb, err := dial(ctx, devs[0].RNIC(), devs[0].Transport(), childAddr(addrs[1], extCMPort), 42)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sender(ctx, rb, 42, rounds); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; err != nil {
		t.Fatal(err)
	}
	for i, sock := range []string{sock0, sock1} {
		var b bytes.Buffer
		if err := res.Dev(context.Background(), res.Options{Sock: sock, JSON: true}, nil, &b); err != nil {
			t.Fatal(err)
		}
		var d struct {
			Device    string   `json:"device"`
			RoCEv2    []string `json:"rocev2"`
			Processes []uapi.ProcStatus
		}
		if err := json.Unmarshal(b.Bytes(), &d); err != nil || d.Device != fmt.Sprintf("hd%d", i) ||
			len(d.RoCEv2) != 1 || d.RoCEv2[0] != addrs[i].String() || len(d.Processes) != 1 || d.Processes[0].PID != os.Getpid() {
			t.Fatalf("dev -j on %s: %v %s", sock, err, b.String())
		}
	}
}
