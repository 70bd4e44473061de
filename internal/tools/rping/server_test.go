package rping

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// idleClient connects to an rping server and then sends nothing, as a client that hangs
// (or an attacker) would.
type idleClient struct {
	dev  *rnic.Device
	qp   *rnic.QP
	conn *iwarp.Conn
}

func dialIdle(t *testing.T, ctx context.Context, addr string) (*idleClient, error) {
	t.Helper()
	dev, err := rnic.Open(rnic.Config{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8)
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	c := &idleClient{dev: dev, qp: qp}
	t.Cleanup(c.close)
	c.conn, err = iwarp.Dial(ctx, qp, addr, nil, iwarp.ConnParam{IRD: 1, ORD: 1})
	return c, err
}

func (c *idleClient) close() {
	if c.conn != nil {
		c.conn.Close()
	}
	c.qp.Destroy()
	c.dev.Close()
}

// pingClient runs an rping client of count validated pings against port.
func pingClient(ctx context.Context, port, count int) error {
	var out syncbuf.Buffer
	o := Options{Addr: "127.0.0.1", Port: port, Size: 64, Count: count, Validate: true, Verbose: true, Timeout: 20 * time.Second}
	if err := Run(ctx, o, &out, &out); err != nil {
		return err
	}
	if n := strings.Count(out.String(), "ping data: "); n != count {
		return fmt.Errorf("%d pings printed, want %d:\n%s", n, count, out.String())
	}
	return nil
}

func startPersistent(t *testing.T, o Options) (*Server, int, context.CancelFunc, chan error) {
	t.Helper()
	o.Server, o.Persistent, o.Addr, o.Port, o.Size = true, true, "127.0.0.1", 0, 64
	var out syncbuf.Buffer
	srv, err := Listen(o, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
		srv.Close()
	})
	return srv, srv.Addr().(*net.TCPAddr).Port, cancel, done
}

// TestRpingPersistentServer: with -P the server serves clients concurrently, as rping -s
// -P does: an idle connected client does not block the others, clients run at the same
// time, and one client after another is served with no gap in which a client is refused.
func TestRpingPersistentServer(t *testing.T) {
	srv, port, _, _ := startPersistent(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := dialIdle(t, ctx, "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		t.Fatal(err)
	}
	// Concurrent clients while the idle one stays connected.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pingClient(ctx, port, 20)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d next to an idle one: %v", i, err)
		}
	}
	// Back to back, with no retry: the listener never goes away between sessions.
	for i := 0; i < 8; i++ {
		if err := pingClient(ctx, port, 2); err != nil {
			t.Fatalf("sequential client %d: %v", i, err)
		}
	}
	if s := srv.Stats(); s.Served != 1+4+8 || s.Refused != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRpingPersistentLimits: a persistent server rejects clients beyond --max-sessions and
// ends a session whose client is idle for --idle; both are counted, and the server keeps
// serving.
func TestRpingPersistentLimits(t *testing.T) {
	var mu sync.Mutex
	var ended []error
	srv, port, _, _ := startPersistent(t, Options{MaxSessions: 2, IdleTimeout: 300 * time.Millisecond,
		SessionEnd: func(_ string, err error) { mu.Lock(); ended = append(ended, err); mu.Unlock() }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var idle []*idleClient
	for i := 0; i < 2; i++ {
		c, err := dialIdle(t, ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	var rej *iwarp.RejectError
	if _, err := dialIdle(t, ctx, addr); !errors.As(err, &rej) {
		t.Fatalf("third client with 2 sessions running: %v, want a reject", err)
	}
	if s := srv.Stats(); s.Refused != 1 || s.Sessions != 2 {
		t.Fatalf("stats %+v", s)
	}
	// The idle sessions end after the timeout; their clients see the disconnect.
	for i, c := range idle {
		select {
		case <-c.qp.Done():
		case <-ctx.Done():
			t.Fatalf("idle client %d still connected", i)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); srv.Stats().Sessions != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", srv.Stats())
		}
	}
	if s := srv.Stats(); s.IdleClosed != 2 {
		t.Fatalf("stats %+v", s)
	}
	mu.Lock()
	for _, err := range ended {
		if !errors.Is(err, errIdle) {
			t.Errorf("idle session ended with %v", err)
		}
	}
	mu.Unlock()
	// A client that pings more often than the timeout is not idle, however long it stays.
	if err := slowClient(ctx, port, 6, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if s := srv.Stats(); s.IdleClosed != 2 {
		t.Fatalf("a pinging client was closed as idle: %+v", s)
	}
}

// slowClient is an rping client that waits gap before each of its pings.
func slowClient(ctx context.Context, port, pings int, gap time.Duration) error {
	o := Options{Addr: "127.0.0.1", Port: port, Size: 64}
	dev, tr, err := open(&o, netip.Addr{})
	if dev != nil {
		defer dev.Close()
	}
	if err != nil {
		return err
	}
	defer tr.Close()
	s, err := newSession(dev, &o, output{stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}})
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.postRecv(); err != nil {
		return err
	}
	if s.conn, err = dial(ctx, tr, s.qp, &o); err != nil {
		return err
	}
	for ping := range pings {
		time.Sleep(gap)
		fillSource(s.start, ping, 'A')
		if err := s.postSource(); err != nil {
			return err
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return fmt.Errorf("ping %d: %w", ping, err)
		}
		if err := s.postSink(); err != nil {
			return err
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return fmt.Errorf("ping %d: %w", ping, err)
		}
		if string(s.rdma) != string(s.start) {
			return fmt.Errorf("ping %d: data differs", ping)
		}
	}
	s.disconnect(10 * time.Second)
	return nil
}
