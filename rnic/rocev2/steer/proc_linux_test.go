//go:build linux

package steer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The test binary doubles as an attached process (STEER_CHILD=proc) and as
// an unprivileged daemon trying ModeAuto (STEER_CHILD=auto); fd 3 is its
// unix SOCK_SEQPACKET connection to the test.
func TestMain(m *testing.M) {
	switch os.Getenv("STEER_CHILD") {
	case "":
		os.Exit(m.Run())
	case "proc":
		childProc()
	case "auto":
		childAuto()
	}
	os.Exit(0)
}

func childConn() *net.UnixConn {
	f := os.NewFile(3, "ctl")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	return c.(*net.UnixConn)
}

// childProc takes its descriptors from the test, joins and reports each
// datagram as "tag from" until the test closes the connection.
func childProc() {
	c := childConn()
	msg := make([]byte, 16)
	_, files, err := RecvFiles(c, msg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	l, err := Join(files, nil)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		c.Write([]byte("error " + err.Error()))
		os.Exit(2)
	}
	c.Write([]byte(fmt.Sprintf("ready uid=%d %v", os.Geteuid(), l.LocalAddr())))
	ch := make(chan arrival, 64)
	go collect(l, "", ch)
	go func() {
		io.Copy(io.Discard, c) // the test closed the connection: exit
		os.Exit(0)
	}()
	for a := range ch {
		c.Write([]byte(fmt.Sprintf("%d %v", a.tag, a.from)))
	}
}

// childAuto reports which mode New picks here and why.
func childAuto() {
	c := childConn()
	s, err := New(Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		c.Write([]byte("error " + err.Error()))
		return
	}
	defer s.Close()
	c.Write([]byte(fmt.Sprintf("%v uid=%d eperm=%v %v", s.Mode(), os.Geteuid(), errors.Is(s.FallbackErr(), unix.EPERM), s.FallbackErr())))
}

// child is a helper process.
type child struct {
	cmd *exec.Cmd
	c   *net.UnixConn
}

// startChild runs the test binary as role. As root it runs it as nobody
// (uid 65534, no capabilities): an attached process need not share the
// daemon's uid, and an unprivileged daemon has no BPF.
func startChild(t *testing.T, role string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// a copy nobody can execute (the build directory is root's)
		dir, err := os.MkdirTemp("", "steer-child")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(dir, "steer.test")
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	pc, cc := unixPair(t, unix.SOCK_SEQPACKET)
	cf, err := cc.File()
	cc.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "STEER_CHILD="+role)
	cmd.ExtraFiles = []*os.File{cf}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, c: pc}
	t.Cleanup(func() {
		pc.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return ch
}

// read returns the child's next message.
func (c *child) read(t *testing.T) string {
	t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 256)
	n, err := c.c.Read(b)
	if err != nil {
		t.Fatalf("child %d: %v", c.cmd.Process.Pid, err)
	}
	return string(b[:n])
}

// TestSteerAcrossProcesses attaches two helper processes (as nobody when
// root), steers a QPN range to each, kills one with SIGKILL and checks that
// the other is unaffected and the killed one's QPNs stop reaching it.
func TestSteerAcrossProcesses(t *testing.T) {
	for _, m := range modes {
		if m.ip != "127.0.0.1" {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			s := newSteerer(t, m.ip, m.mode, Config{})
			daemon := make(chan arrival, 16)
			go collect(s.Link(), "daemon", daemon)
			var kids [2]*child
			var slots [2]Slot
			for i := range kids {
				kids[i] = startChild(t, "proc")
				slot, files, err := s.Add()
				if err != nil {
					t.Fatal(err)
				}
				slots[i] = slot
				err = SendFiles(kids[i].c, []byte("grant"), files...)
				for _, f := range files {
					f.Close()
				}
				if err != nil {
					t.Fatal(err)
				}
				ready := kids[i].read(t)
				if !strings.HasPrefix(ready, "ready ") {
					t.Fatalf("child: %s", ready)
				}
				t.Logf("child %d: %s", kids[i].cmd.Process.Pid, ready)
				if err := s.Map(slot, uint32(0x1000*(i+1)), 256); err != nil {
					t.Fatal(err)
				}
			}
			snd := newSender(t, m.ip)
			to, from := s.LocalAddr(), snd.addr()
			childGot := func(k *child, tag uint64) {
				t.Helper()
				if got, want := k.read(t), fmt.Sprintf("%d %v", tag, from); got != want {
					t.Fatalf("child reported %q, want %q", got, want)
				}
			}
			var tag uint64
			for round := 0; round < 3; round++ {
				for i, k := range kids {
					tag++
					snd.send(t, to, packet(uint32(0x1000*(i+1)+round*100), tag))
					childGot(k, tag)
				}
			}
			tag++
			snd.send(t, to, packet(1, tag))
			expect(t, daemon, "daemon", tag, from)

			kids[0].cmd.Process.Signal(syscall.SIGKILL)
			kids[0].cmd.Wait()
			tag++
			snd.send(t, to, packet(0x1000, tag))
			if m.mode == ModeBPF {
				expect(t, daemon, "daemon", tag, from) // its socket left the sockarray
				waitStats(t, s, func(st Stats) bool { return st.Fallback == 1 })
			} else {
				waitStats(t, s, func(st Stats) bool { return st.RelayDropped == 1 })
			}
			tag++
			snd.send(t, to, packet(0x2001, tag))
			childGot(kids[1], tag)
			if err := s.Remove(slots[0]); err != nil {
				t.Fatal(err)
			}
			tag++
			snd.send(t, to, packet(0x1000, tag))
			expect(t, daemon, "daemon", tag, from)
		})
	}
}

// TestAutoFallsBackWithoutPrivilege runs New(ModeAuto) in a process
// without capabilities: it must pick ModeRelay and say that BPF was not
// permitted.
func TestAutoFallsBackWithoutPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP (privileged): needs root to start an unprivileged helper process")
	}
	k := startChild(t, "auto")
	got := k.read(t)
	t.Log(got)
	if !strings.HasPrefix(got, "relay uid=65534 eperm=true ") {
		t.Fatalf("unprivileged New(ModeAuto): %q, want relay with an EPERM fallback", got)
	}
	// and with root's privileges it steers with BPF
	s, err := New(Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != ModeBPF || s.FallbackErr() != nil {
		t.Fatalf("root New(ModeAuto): %v, fallback %v", s.Mode(), s.FallbackErr())
	}
}

// TestRelayDaemonGone checks that a relay link ends with ErrDaemonGone
// (and rocev2.ErrLinkClosed) when the daemon closes.
func TestRelayDaemonGone(t *testing.T) {
	s := newSteerer(t, "127.0.0.1", ModeRelay, Config{})
	_, l := attach(t, s)
	done := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, rocev2.MaxPacket)}
		_, err := l.Recv(bufs, make([]int, 1), make([]netip.AddrPort, 1))
		done <- err
	}()
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrDaemonGone) || !errors.Is(err, rocev2.ErrLinkClosed) {
			t.Fatalf("Recv after the daemon closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("relay link did not notice the daemon closing")
	}
}
