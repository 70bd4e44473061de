package iwarp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// termEvent waits for the QP error event on d and returns its Terminate.
func termEvent(t *testing.T, d *rnic.Device, sent bool) (rnic.EventType, rdmap.TerminateError) {
	t.Helper()
	e := waitEvent(t, d, rnic.EventQPFatal, rnic.EventQPAccessErr, rnic.EventQPReqErr)
	var te *TermError
	if !errors.As(e.Err, &te) || te.Sent != sent {
		t.Fatalf("event %v: not a Terminate (sent=%v)", e, sent)
	}
	return e.Type, te.TerminateError
}

// checkFlushed posts a send on s and expects it to complete flushed.
func checkFlushed(t *testing.T, s *side) {
	t.Helper()
	<-s.qp.Done()
	if st := s.qp.State(); st != rnic.QPError {
		t.Fatalf("state %v", st)
	}
	if err := s.qp.PostSend(&rnic.SendWR{WRID: 999, Opcode: rnic.OpSend}); err != nil {
		t.Fatal(err)
	}
	for {
		c := wait(t, s.scq)
		if c.WRID == 999 {
			expect(t, c, rnic.WCSend, rnic.StatusWRFlushErr)
			return
		}
	}
}

func TestRemoteErrors(t *testing.T) {
	type tc struct {
		name   string
		run    func(t *testing.T, cli, srv *side, cmr *rnic.MR)
		want   rdmap.TerminateError
		ev     rnic.EventType
		status rnic.Status // the client WR's status when it is a Read (else 0: Write/Send complete OK)
	}
	post := func(t *testing.T, s *side, wr rnic.SendWR) {
		t.Helper()
		if err := s.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	cases := []tc{
		{"write-bad-stag", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: 0, RKey: 0x12345601})
		}, rdmap.FromDDP(ddp.ErrInvalidSTag), rnic.EventQPAccessErr, 0},
		{"write-stag-zero", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: 0, RKey: 0})
		}, rdmap.FromDDP(ddp.ErrInvalidSTag), rnic.EventQPAccessErr, 0},
		{"write-wrong-pd", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			pd2, _ := srv.dev.AllocPD()
			mr, _ := pd2.RegMR(make([]byte, 64), allAccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
		}, rdmap.FromDDP(ddp.ErrSTagNotAssociated), rnic.EventQPAccessErr, 0},
		{"write-no-right", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), rnic.AccessLocalWrite|rnic.AccessRemoteRead)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
		}, rdmap.FromDDP(ddp.ErrInvalidSTag), rnic.EventQPAccessErr, 0},
		{"write-out-of-bounds", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), allAccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: mr.Addr() + 60, RKey: mr.RKey()})
		}, rdmap.FromDDP(ddp.ErrBaseBounds), rnic.EventQPAccessErr, 0},
		{"write-invalidated", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), allAccess)
			post(t, srv, rnic.SendWR{Opcode: rnic.OpLocalInv, Flags: rnic.Signaled, InvalidateSTag: mr.RKey()})
			expect(t, wait(t, srv.scq), rnic.WCLocalInv, rnic.StatusSuccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
		}, rdmap.FromDDP(ddp.ErrInvalidSTag), rnic.EventQPAccessErr, 0},
		{"read-bad-stag", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			post(t, cli, rnic.SendWR{Opcode: rnic.OpRead, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: 0, RKey: 0x777701})
		}, rdmap.TermInvalidSTag, rnic.EventQPAccessErr, rnic.StatusRemAccessErr},
		{"read-no-right", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), rnic.AccessLocalWrite|rnic.AccessRemoteWrite)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpRead, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
		}, rdmap.TermAccessRights, rnic.EventQPAccessErr, rnic.StatusRemAccessErr},
		{"read-out-of-bounds", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), allAccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpRead, SGL: []rnic.SGE{cmr.SGE(0, 65)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
		}, rdmap.TermBaseBounds, rnic.EventQPAccessErr, rnic.StatusRemAccessErr},
		{"send-no-receive", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			post(t, cli, rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, 8)}})
		}, rdmap.FromDDP(ddp.ErrMSNNoBuffer), rnic.EventQPFatal, 0},
		{"send-receive-too-small", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMR(make([]byte, 64), allAccess)
			_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 77, SGL: []rnic.SGE{mr.SGE(0, 4)}})
			post(t, cli, rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, 8)}})
			c := wait(t, srv.rcq)
			if c.WRID != 77 || c.Status != rnic.StatusLocLenErr {
				t.Fatalf("receiver completion %+v", c)
			}
		}, rdmap.FromDDP(ddp.ErrMessageTooLong), rnic.EventQPReqErr, 0},
		{"send-inv-bad-stag", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 78})
			post(t, cli, rnic.SendWR{Opcode: rnic.OpSendInv, InvalidateSTag: 0x99901})
		}, rdmap.TermProtCannotInvalidate, rnic.EventQPAccessErr, 0},
		{"zero-length-unchecked", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			// RFC 5041 §5.2 / RFC 5040 §5.2.1: zero-length Writes and Reads do not check the
			// STag, so these succeed; the bad-STag Write after them fails.
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, RKey: 0xbad00001})
			post(t, cli, rnic.SendWR{WRID: 5, Opcode: rnic.OpRead, Flags: rnic.Signaled, RKey: 0xbad00001})
			expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 1)}, RKey: 0xbad00001})
		}, rdmap.FromDDP(ddp.ErrInvalidSTag), rnic.EventQPAccessErr, 0},
		{"atomic-misaligned", func(t *testing.T, cli, srv *side, cmr *rnic.MR) {
			mr, _ := srv.pd.RegMRAt(make([]byte, 64), 0, allAccess)
			post(t, cli, rnic.SendWR{Opcode: rnic.OpAtomicFetchAdd, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: 4, RKey: mr.RKey()})
		}, rdmap.TermCatastrophicStream, rnic.EventQPFatal, rnic.StatusRemOpErr},
		{"ird-exceeded", nil, rdmap.TermCatastrophicStream, rnic.EventQPFatal, rnic.StatusRemOpErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noLeak(t)
			o := &pairOpts{cli: smallCfg(), srv: smallCfg()}
			if c.run == nil { // IRD: the client ignores the negotiated ORD of 1
				o.srvP.IRD = 1
				o.cli.testORD = 8
			}
			cli, srv := newPair(t, o)
			cmr, _ := cli.reg(t, 1<<20, allAccess)
			if c.run == nil {
				smr, _ := srv.reg(t, 1<<20, allAccess)
				for i := 0; i < 8; i++ {
					_ = cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
						SGL: []rnic.SGE{cmr.SGE(0, 1<<20)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()})
				}
			} else {
				c.run(t, cli, srv, cmr)
			}
			recv555 := c.name != "send-no-receive"
			if recv555 {
				_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 555})
			}
			evS, teS := termEvent(t, srv.dev, true)
			evC, teC := termEvent(t, cli.dev, false)
			if teS != c.want || teC != c.want || evS != c.ev || evC != c.ev {
				t.Fatalf("server %v %v, client %v %v; want %v %v", evS, teS, evC, teC, c.ev, c.want)
			}
			if c.status != 0 {
				// the first failing Read carries the status; any other unfinished WR flushes
				found := false
				for !found {
					w := wait(t, cli.scq)
					switch w.Status {
					case c.status:
						found = true
					case rnic.StatusSuccess, rnic.StatusWRFlushErr:
					default:
						t.Fatalf("read completion %+v, want %v", w, c.status)
					}
				}
			}
			checkFlushed(t, cli)
			checkFlushed(t, srv)
			if s := srv.qp.Counters().Snapshot(); s.TermSent != 1 {
				t.Fatalf("server counters %+v", s)
			}
			if s := cli.qp.Counters().Snapshot(); s.TermRecv != 1 {
				t.Fatalf("client counters %+v", s)
			}
			// the server's posted receive flushed
			for recv555 {
				w := wait(t, srv.rcq)
				if w.WRID == 555 {
					expect(t, w, rnic.WCRecv, rnic.StatusWRFlushErr)
					break
				}
			}
		})
	}
}

func TestNotConnected(t *testing.T) {
	d, _ := rnic.Open(rnic.Config{})
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(8)
	qp, _ := d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	if err := qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend}); !errors.Is(err, rnic.ErrQPState) {
		t.Fatalf("post send on idle QP: %v", err)
	}
	if err := qp.PostRecv(&rnic.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	_ = qp.Destroy()
	var wc [4]rnic.Completion
	if n, _ := cq.Poll(wc[:]); n != 1 || wc[0].Status != rnic.StatusWRFlushErr {
		t.Fatalf("destroy flush: %d %+v", n, wc[0])
	}
}

func TestPeerClosed(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		name := "abort"
		if graceful {
			name = "graceful"
		}
		t.Run(name, func(t *testing.T) {
			noLeak(t)
			cli, srv := newPair(t, nil)
			_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 1})
			_ = cli.qp.PostRecv(&rnic.RecvWR{WRID: 2})
			if graceful {
				cli.qp.Disconnect()
			} else {
				_ = cli.conn.Close()
			}
			var e rnic.AsyncEvent
			if graceful {
				e = waitEvent(t, srv.dev, rnic.EventDisconnected)
				waitEvent(t, cli.dev, rnic.EventDisconnected)
			} else {
				e = waitEvent(t, srv.dev, rnic.EventQPFatal)
				if !errors.Is(e.Err, rdmap.TermMPATCPClosed) {
					t.Fatalf("server event %v", e)
				}
			}
			expect(t, wait(t, srv.rcq), rnic.WCRecv, rnic.StatusWRFlushErr)
			expect(t, wait(t, cli.rcq), rnic.WCRecv, rnic.StatusWRFlushErr)
			checkFlushed(t, srv)
			checkFlushed(t, cli)
		})
	}
}

func TestRejectAndCancel(t *testing.T) {
	noLeak(t)
	o := &pairOpts{}
	cli, srv := newSide(t, o), newSide(t, o)
	defer cli.dev.Close()
	defer srv.dev.Close()
	ln, err := Listen(srv.dev, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		r, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		if string(r.PrivateData()) != "please" || r.ORD() != 3 || r.IRD() != 5 {
			_ = r.Reject([]byte("bad request"))
			return
		}
		_ = r.Reject([]byte("go away"))
	}()
	_, err = Dial(context.Background(), cli.qp, ln.Addr().String(), nil, ConnParam{PrivateData: []byte("please"), IRD: 5, ORD: 3})
	var re *RejectError
	if !errors.As(err, &re) || string(re.PrivateData) != "go away" {
		t.Fatalf("dial: %v", err)
	}
	if cli.qp.State() != rnic.QPIdle {
		t.Fatalf("state after reject: %v", cli.qp.State())
	}

	// A peer that accepts TCP but never answers MPA: the context ends the connect.
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	defer tl.Close()
	go func() {
		c, err := tl.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = Dial(ctx, cli.qp, tl.Addr().String(), nil, ConnParam{})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
		t.Fatalf("dial with deadline: %v after %v", err, time.Since(t0))
	}
	// Private data over the siw cap is refused locally.
	_, err = Dial(context.Background(), cli.qp, ln.Addr().String(), nil, ConnParam{PrivateData: make([]byte, 300)})
	if err == nil {
		t.Fatal("300 bytes of private data accepted")
	}
}

func TestDisconnectWithOutstandingWork(t *testing.T) {
	t.Run("graceful-drains-sends", func(t *testing.T) {
		noLeak(t)
		cli, srv := newPair(t, nil)
		cmr, _ := cli.reg(t, 8<<20, allAccess)
		smr, _ := srv.reg(t, 8<<20, allAccess)
		_ = cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 8<<20)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()})
		cli.qp.Disconnect()
		expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
		waitEvent(t, srv.dev, rnic.EventDisconnected)
		waitEvent(t, cli.dev, rnic.EventDisconnected)
		<-cli.qp.Done()
		<-srv.qp.Done()
		if s := srv.qp.Counters().Snapshot(); s.RxBytes != 8<<20 {
			t.Fatalf("server received %d bytes before the close", s.RxBytes)
		}
	})
	t.Run("abort-during-read", func(t *testing.T) {
		noLeak(t)
		cli, srv := newPair(t, nil)
		cmr, _ := cli.reg(t, 64<<20, allAccess)
		smr, _ := srv.reg(t, 64<<20, allAccess)
		for i := 0; i < 4; i++ {
			_ = cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 64<<20)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()})
		}
		_ = srv.conn.Close() // abortive: RST
		e := waitEvent(t, cli.dev, rnic.EventQPFatal)
		if !errors.Is(e.Err, rdmap.TermMPATCPClosed) {
			t.Fatalf("client event %v", e)
		}
		flushed := 0
		for i := 0; i < 4; i++ {
			c := wait(t, cli.scq)
			if c.Status == rnic.StatusWRFlushErr {
				flushed++
			} else if c.Status != rnic.StatusSuccess {
				t.Fatalf("read %+v", c)
			}
		}
		if flushed == 0 {
			t.Fatal("no read was flushed by the abort")
		}
	})
}

// TestCQOverflow: a send CQ that overflows moves the QP writing to it to Error with
// EventQPFatal (rnic.ErrCQOverflow) and the CQ gets EventCQErr; the connection is
// aborted, so the peer's QP leaves RTS too.
func TestCQOverflow(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, &pairOpts{cqDepth: 2})
	smr, _ := srv.reg(t, 64, allAccess)
	cmr, _ := cli.reg(t, 64, allAccess)
	for i := range 3 {
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for fatal, cqErr := false, false; !fatal || !cqErr; {
		e := waitEvent(t, cli.dev, rnic.EventQPFatal, rnic.EventCQErr)
		switch {
		case e.Type == rnic.EventCQErr && e.CQ == cli.scq:
			cqErr = true
		case e.Type == rnic.EventQPFatal && e.QP == cli.qp && errors.Is(e.Err, rnic.ErrCQOverflow):
			fatal = true
		default:
			t.Fatalf("event %v", e)
		}
	}
	<-cli.qp.Done()
	<-srv.qp.Done()
	var wc [4]rnic.Completion
	if n, err := cli.scq.Poll(wc[:]); n != 2 || !errors.Is(err, rnic.ErrCQOverflow) {
		t.Fatalf("poll: %d %v", n, err)
	}
}
