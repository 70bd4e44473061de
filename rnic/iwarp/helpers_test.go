package iwarp

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// side is one end of a test connection.
type side struct {
	dev  *rnic.Device
	pd   *rnic.PD
	scq  *rnic.CQ
	rcq  *rnic.CQ
	qp   *rnic.QP
	conn *Conn
}

type pairOpts struct {
	cli, srv   *Config
	cliP, srvP ConnParam
	cap        rnic.QPCap
	srq        bool
	cqDepth    int // 0: 4096
	dev        rnic.Config
	sharedCQ   bool // one CQ for send and receive
}

func newSide(t testing.TB, o *pairOpts) *side {
	t.Helper()
	d, err := rnic.Open(o.dev)
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: d}
	s.pd, _ = d.AllocPD()
	depth := o.cqDepth
	if depth == 0 {
		depth = 4096
	}
	s.scq, _ = d.CreateCQ(depth)
	s.rcq = s.scq
	if !o.sharedCQ {
		s.rcq, _ = d.CreateCQ(depth)
	}
	attr := rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: o.cap}
	if o.srq {
		srq, err := d.CreateSRQ(s.pd, rnic.SRQAttr{MaxWR: 64, MaxSGE: 4})
		if err != nil {
			t.Fatal(err)
		}
		attr.SRQ = srq
	}
	s.qp, err = d.CreateQP(s.pd, attr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newPair connects a client and a server QP over loopback TCP.
func newPair(t testing.TB, o *pairOpts) (cli, srv *side) {
	t.Helper()
	if o == nil {
		o = &pairOpts{}
	}
	if o.cli == nil {
		o.cli = DefaultConfig()
	}
	cli, srv = newSide(t, o), newSide(t, o)
	ln, err := Listen(srv.dev, "127.0.0.1:0", o.srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			srv.conn, err = r.Accept(srv.qp, o.srvP)
		}
		errc <- err
	}()
	cli.conn, err = Dial(ctx, cli.qp, ln.Addr().String(), o.cli, o.cliP)
	if err != nil {
		t.Fatal("dial:", err)
	}
	if err := <-errc; err != nil {
		t.Fatal("accept:", err)
	}
	ln.Close()
	t.Cleanup(func() {
		cli.dev.Close()
		srv.dev.Close()
	})
	return cli, srv
}

func (s *side) reg(t testing.TB, n int, acc rnic.Access) (*rnic.MR, []byte) {
	t.Helper()
	b := make([]byte, n)
	mr, err := s.pd.RegMR(b, acc)
	if err != nil {
		t.Fatal(err)
	}
	return mr, b
}

const allAccess = rnic.AccessLocalWrite | rnic.AccessRemoteWrite | rnic.AccessRemoteRead | rnic.AccessRemoteAtomic | rnic.AccessMWBind

// wait polls one completion from cq.
func wait(t testing.TB, cq *rnic.CQ) rnic.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rnic.Completion
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("wait: n=%d err=%v", n, err)
	}
	return wc[0]
}

func expect(t testing.TB, c rnic.Completion, op rnic.WCOpcode, st rnic.Status) {
	t.Helper()
	if c.Opcode != op || c.Status != st {
		t.Fatalf("completion %+v: want %v %v", c, op, st)
	}
}

// noLeak checks that the goroutine count returns to its starting level.
func noLeak(t testing.TB) {
	n := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := runtime.NumGoroutine(); g > n {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutine leak: %d > %d\n%s", g, n, buf)
		}
	})
}

// waitEvent returns the next async event of one of the given types.
func waitEvent(t testing.TB, d *rnic.Device, types ...rnic.EventType) rnic.AsyncEvent {
	t.Helper()
	tm := time.After(10 * time.Second)
	for {
		select {
		case e := <-d.Events():
			for _, ty := range types {
				if e.Type == ty {
					return e
				}
			}
		case <-tm:
			t.Fatalf("no event %v", types)
		}
	}
}

// settle orders memory between the test goroutine and to's receiver: a zero-length Send
// from → to that to's receiver takes a posted receive for (a mutex edge with the test)
// after everything sent before it was placed. Use it before checking memory written by
// RDMA at to, and after filling memory at to that the peer will read.
func settle(t testing.TB, from, to *side) {
	t.Helper()
	if err := to.qp.PostRecv(&rnic.RecvWR{WRID: 0xfeed}); err != nil {
		t.Fatal(err)
	}
	if err := from.qp.PostSend(&rnic.SendWR{WRID: 0xfeed, Opcode: rnic.OpSend, Flags: rnic.Signaled}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, from.scq); c.WRID != 0xfeed || c.Status != rnic.StatusSuccess {
		t.Fatalf("settle send: %+v", c)
	}
	if c := wait(t, to.rcq); c.WRID != 0xfeed || c.Status != rnic.StatusSuccess {
		t.Fatalf("settle recv: %+v", c)
	}
}

// rtrWrite returns siw's Write RTR: the header of a zero-length RDMA Write to STag 1, TO 0.
func rtrWrite() []byte {
	h := make([]byte, ddp.TaggedLen)
	ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 1, 0)
	return h
}
