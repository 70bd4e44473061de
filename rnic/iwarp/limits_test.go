package iwarp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// syncbuf.Buffer is a goroutine-safe log sink.

// serveAll accepts every request on ln with a new QP of d until ctx ends.
func serveAll(ctx context.Context, t *testing.T, d *rnic.Device, ln *Listener) {
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(1024)
	go func() {
		for {
			r, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			qp, err := d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Error(err)
				return
			}
			// An initiator that closes at once can make Accept fail; the tests check
			// the listener's counters instead.
			_, _ = r.Accept(qp, ConnParam{})
		}
	}()
}

func dialNew(ctx context.Context, t *testing.T, d *rnic.Device, addr string, cfg *Config) (*Conn, error) {
	t.Helper()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	qp, err := d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	return Dial(ctx, qp, addr, cfg, ConnParam{})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for " + what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAcceptRecoversFromEMFILE: when accept fails because the process is out of file
// descriptors, the listener backs off, logs once, counts, and accepts again once
// descriptors are free (issue 10 defect 1: the accept loop used to exit for good).
func TestAcceptRecoversFromEMFILE(t *testing.T) {
	noLeak(t)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	srv, _ := rnic.Open(rnic.Config{})
	defer srv.Close()
	cli, _ := rnic.Open(rnic.Config{})
	defer cli.Close()
	var logs syncbuf.Buffer
	cfg := &Config{Timeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ln, err := Listen(srv, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveAll(ctx, t, srv, ln)

	// Use up the descriptors, then free one for the client's socket: the server's accept
	// finds none.
	ents, _ := os.ReadDir("/proc/self/fd")
	low := lim
	low.Cur = uint64(len(ents) + 32)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NOFILE:", err)
	}
	var dummies []*os.File
	release := func() {
		for _, f := range dummies {
			f.Close()
		}
		dummies = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		dummies = append(dummies, f)
	}
	dummies[len(dummies)-1].Close()
	dummies = dummies[:len(dummies)-1]
	dialed := make(chan error, 1)
	go func() {
		c, err := dialNew(ctx, t, cli, ln.Addr().String(), nil)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	waitFor(t, "a failed accept", func() bool { return ln.Stats().AcceptErrors >= 2 })
	release()
	if err := <-dialed; err != nil {
		t.Fatalf("dial after the descriptors came back: %v", err)
	}
	waitFor(t, "the connection counted", func() bool { return ln.Stats().Established == 1 })
	st := ln.Stats()
	out := logs.String()
	if strings.Count(out, "accept failed") != 1 || strings.Count(out, "accept recovered") != 1 || !strings.Contains(out, "too many open files") {
		t.Fatalf("log (want one failure and one recovery line):\n%s", out)
	}
	t.Logf("accept errors retried: %d", st.AcceptErrors)
}

// TestListenerCaps: MaxConns and MaxDeviceConns refuse connections over the cap by
// closing TCP before any MPA Reply, count them, and free the slot when a connection ends.
func TestListenerCaps(t *testing.T) {
	noLeak(t)
	srv, _ := rnic.Open(rnic.Config{})
	defer srv.Close()
	cli, _ := rnic.Open(rnic.Config{})
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln1, err := Listen(srv, "127.0.0.1:0", &Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	ln2, err := Listen(srv, "127.0.0.1:0", &Config{MaxDeviceConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	serveAll(ctx, t, srv, ln1)
	serveAll(ctx, t, srv, ln2)
	var conns []*Conn
	dial := func(ln *Listener) error {
		c, err := dialNew(ctx, t, cli, ln.Addr().String(), nil)
		if err == nil {
			conns = append(conns, c)
		}
		return err
	}
	for i := 0; i < 2; i++ {
		if err := dial(ln1); err != nil {
			t.Fatal(err)
		}
	}
	if err := dial(ln1); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection to a MaxConns=2 listener: %v (want a prompt refusal)", err)
	}
	if s := ln1.Stats(); s.RefusedListener != 1 || s.Active != 2 {
		t.Fatalf("listener 1 stats %+v", s)
	}
	// Listener 2's device cap counts listener 1's connections.
	if err := dial(ln2); err != nil {
		t.Fatal(err)
	}
	if err := dial(ln2); err == nil {
		t.Fatal("fourth connection on a MaxDeviceConns=3 device accepted")
	}
	if s := ln2.Stats(); s.RefusedDevice != 1 || s.Active != 1 {
		t.Fatalf("listener 2 stats %+v", s)
	}
	// A connection that ends gives its slot back.
	conns[0].Close()
	waitFor(t, "the slot of a closed connection", func() bool { return ln1.Stats().Active == 1 })
	if err := dial(ln1); err != nil {
		t.Fatalf("after a connection ended: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "all slots", func() bool { return ln1.Stats().Active == 0 && ln2.Stats().Active == 0 && devConns.count(srv) == 0 })
}

// TestBacklogAndUnanswered: a request that finds the backlog full is rejected (MPA Reply
// with R), and one nobody answers is dropped after Timeout; both are counted.
func TestBacklogAndUnanswered(t *testing.T) {
	noLeak(t)
	srv, _ := rnic.Open(rnic.Config{})
	defer srv.Close()
	cli, _ := rnic.Open(rnic.Config{})
	defer cli.Close()
	ln, err := Listen(srv, "127.0.0.1:0", &Config{Backlog: 1, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := dialNew(ctx, t, cli, ln.Addr().String(), &Config{Timeout: 5 * time.Second})
		first <- err
	}()
	waitFor(t, "the first request queued", func() bool { return len(ln.reqs) == 1 })
	_, err = dialNew(ctx, t, cli, ln.Addr().String(), nil)
	var rej *RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("request over the backlog: %v", err)
	}
	if err := <-first; err == nil {
		t.Fatal("unanswered request connected")
	}
	waitFor(t, "the slots of both", func() bool { return ln.Stats().Active == 0 })
	s := ln.Stats()
	if s.RefusedBacklog != 1 || s.Unanswered != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFirstFPDUTimeout: an initiator that completes MPA but never sends its first FPDU
// (the RTR) is dropped after FirstFPDUTimeout (issue 10 defect 2: it used to hold an RTS
// QP, goroutines and a socket forever).
func TestFirstFPDUTimeout(t *testing.T) {
	noLeak(t)
	for _, p2p := range []bool{true, false} {
		srv := newSide(t, &pairOpts{})
		ln, err := Listen(srv.dev, "127.0.0.1:0", &Config{FirstFPDUTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		mc := mpa.Config{Rev: 2, P2P: p2p, RTR: mpa.RTRWrite}
		req, _ := mpa.Request(mc, nil)
		_, _ = nc.Write(req.Append(nil))
		r, err := ln.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := r.Accept(srv.qp, ConnParam{})
		if err != nil {
			t.Fatal(err)
		}
		e := waitEvent(t, srv.dev, rnic.EventQPFatal)
		<-conn.Done()
		if !errors.Is(e.Err, ErrFirstFPDUTimeout) || !errors.Is(conn.Err(), ErrFirstFPDUTimeout) {
			t.Fatalf("p2p=%v: event %v, Conn.Err %v", p2p, e.Err, conn.Err())
		}
		if s := ln.Stats(); s.FirstFPDUTimeouts != 1 || s.Active != 0 {
			t.Fatalf("p2p=%v: stats %+v", p2p, s)
		}
		nc.Close()
		ln.Close()
		srv.dev.Close()
	}
}

// TestIdleInitiatorKeptAlive: a softrnic initiator in the client-server model that sends
// nothing is not dropped by a softrnic responder's first-FPDU timeout: it sends one nudge
// after a quarter of its own FirstFPDUTimeout.
func TestIdleInitiatorKeptAlive(t *testing.T) {
	noLeak(t)
	cfg := &Config{MPA: mpa.Config{Rev: 2}, FirstFPDUTimeout: 400 * time.Millisecond}
	cli, srv := newPair(t, &pairOpts{cli: cfg, srv: cfg})
	time.Sleep(time.Second)
	if s := srv.qp.State(); s != rnic.QPRTS {
		t.Fatalf("responder state %v (err %v) after an idle start", s, srv.qp.Err())
	}
	if cli.conn.Nudges() == 0 {
		t.Fatal("idle initiator sent no nudge")
	}
	exercise(t, cli, srv)
}
