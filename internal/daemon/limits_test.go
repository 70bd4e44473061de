package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

func setPair(ctx context.Context, sock, k, v string) error {
	_, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: k, Value: v}}})
	return err
}

func errno(err error) int {
	var e *uapi.Error
	if errors.As(err, &e) {
		return e.Errno
	}
	return -1
}

// TestDaemonListenerLimits: set listen_iwarp takes IP literals only (a name is EINVAL,
// before any lookup) and stops at -max-listeners (EBUSY, counted in listen_refused).
func TestDaemonListenerLimits(t *testing.T) {
	sock := testSock(t)
	o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-target-mib", "0", "-max-listeners", "3"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"localhost:0", "example.invalid:7174", "softrnic0:1", "[localhost]:1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1"} {
		if err := setPair(ctx, sock, "listen_iwarp", name); errno(err) != uapi.EINVAL {
			t.Errorf("listen_iwarp=%s: %v, want EINVAL", name, err)
		}
	}
	for _, ok := range []string{"127.0.0.1:0", "[::1]:0"} {
		if err := setPair(ctx, sock, "listen_iwarp", ok); err != nil {
			if strings.Contains(ok, "::1") && errno(err) == uapi.EIO {
				t.Logf("no IPv6 loopback: %v", err)
				if err := setPair(ctx, sock, "listen_iwarp", "127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Fatalf("listen_iwarp=%s: %v", ok, err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := setPair(ctx, sock, "listen_iwarp", "127.0.0.1:0"); errno(err) != uapi.EBUSY {
			t.Fatalf("listener %d over the cap of 3: %v, want EBUSY", 4+i, err)
		}
	}
	s, err := uapi.GetStatus(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ListenIWARP) != 3 || s.Daemon.ListenRefused != 2 {
		t.Fatalf("listeners %v, refused %d", s.ListenIWARP, s.Daemon.ListenRefused)
	}
	for _, bad := range [][]string{{"-iwarp", "localhost:1"}, {"-iwarp", "1.2.3.4:1", "-iwarp", "1.2.3.4:2", "-max-listeners", "1"},
		{"-iwarp", "1.2.3.4:1", "-ctl-max-clients", "0"}, {"-iwarp", "1.2.3.4:1", "-ctl-idle-timeout", "0s"}} {
		if _, err := ParseArgs(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestDaemonControlLimits: the daemon's control socket serves at most -ctl-max-clients
// at once (EBUSY beyond) and closes a client idle for -ctl-idle-timeout; both are counted
// in the status.
func TestDaemonControlLimits(t *testing.T) {
	sock := testSock(t)
	o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-target-mib", "0",
		"-ctl-max-clients", "2", "-ctl-idle-timeout", "300ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var idle []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	for deadline := time.Now().Add(10 * time.Second); d.srv.Stats().Clients != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", d.srv.Stats())
		}
	}
	if _, err := uapi.GetStatus(ctx, sock); errno(err) != uapi.EBUSY {
		t.Fatalf("third client: %v, want EBUSY", err)
	}
	// The idle clients are closed by the server.
	for i, c := range idle {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("idle client %d: %d %v", i, n, err)
		}
	}
	var s uapi.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s, err = uapi.GetStatus(ctx, sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if s.Daemon.CtlRefused != 1 || s.Daemon.CtlIdleClosed != 2 || s.Daemon.CtlClients != 1 {
		t.Fatalf("daemon counters %+v", s.Daemon)
	}
}

// TestDaemonTargetLimit: the memory target accepts at most -target-max-conns connections
// at once; a request past them is rejected and counted in target_refused, and a
// connection that ends frees its place.
func TestDaemonTargetLimit(t *testing.T) {
	d, sock := startDaemon(t, "-iwarp", "127.0.0.1:0", "-target-max-conns", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := d.iwLns[0].Addr().String()
	dial := func() (*dClient, error) {
		c := newDClient(t, 64, "")
		t.Cleanup(c.close)
		_, err := iwarp.Dial(ctx, c.qp, addr, nil, iwarp.ConnParam{})
		return c, err
	}
	first, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	var rej *iwarp.RejectError
	if _, err := dial(); !errors.As(err, &rej) {
		t.Fatalf("a second connection with -target-max-conns 1: %v, want a reject", err)
	}
	s, err := uapi.GetStatus(ctx, sock)
	if err != nil || s.Daemon.TargetRefused != 1 || len(s.QPs) != 1 {
		t.Fatalf("refused %d, QPs %+v: %v", s.Daemon.TargetRefused, s.QPs, err)
	}
	first.qp.Disconnect()
	awaitStatus(t, sock, func(s *uapi.Status) error {
		if len(s.QPs) != 0 {
			return fmt.Errorf("QPs after the disconnect: %+v", s.QPs)
		}
		return nil
	})
	if _, err := dial(); err != nil {
		t.Fatalf("after a disconnect: %v", err)
	}
	if _, err := ParseArgs([]string{"-iwarp", "127.0.0.1:1", "-target-max-conns", "0"}, &bytes.Buffer{}); err == nil {
		t.Error("-target-max-conns 0 accepted")
	}
}
