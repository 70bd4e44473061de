package iwarp

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// siwModel is a responder with Linux siw's accept window (siw_accept, drivers/infiniband/
// sw/siw/siw_cm.c): after the MPA Reply, bytes that arrive before its receive handler is
// installed are left unread until bytes arrive after it; then everything queued is read.
// After that it answers Read Requests with zero-length Read Responses and echoes Sends.
type siwModel struct {
	ln      net.Listener
	window  time.Duration
	mc      mpa.Config
	held    chan int // bytes that arrived inside the window, once it has been left
	nudges  chan int // zero-length Writes to STag index 0 received, at close
	stalled chan struct{}
}

func newSiwModel(t *testing.T, window time.Duration, mc mpa.Config) *siwModel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &siwModel{ln: ln, window: window, mc: mc, held: make(chan int, 1), nudges: make(chan int, 1), stalled: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go m.serve(t)
	return m
}

func (m *siwModel) serve(t *testing.T) {
	nc, err := m.ln.Accept()
	if err != nil {
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, req, err := readFrame(nc, 512)
	if err != nil {
		t.Error("model: request:", err)
		return
	}
	rep, p, err := mpa.Respond(m.mc, &req, nil)
	if err != nil {
		t.Error("model: respond:", err)
		return
	}
	if _, err := nc.Write(rep.Append(nil)); err != nil {
		return
	}
	install := time.Now().Add(m.window)
	var held []byte
	buf := make([]byte, 64<<10)
	for {
		k, err := nc.Read(buf)
		if err != nil {
			close(m.stalled) // nothing new arrived: siw would wait forever
			return
		}
		held = append(held, buf[:k]...)
		if time.Now().After(install) {
			break
		}
	}
	// Bytes arrived after the handler was installed: everything queued is read.
	m.held <- len(held)
	rd := mpa.NewReader(io.MultiReader(bytes.NewReader(held), nc), p.RxFraming())
	wr := mpa.NewWriter(nc, p.TxFraming())
	nudges, sendMSN := 0, ddp.MSN(1)
	defer func() { m.nudges <- nudges }()
	for {
		n, err := rd.Next()
		if err != nil {
			return
		}
		u := make([]byte, n)
		if rd.ReadFull(u) != nil || rd.End() != nil {
			t.Error("model: bad FPDU")
			return
		}
		switch op := rdmap.ControlOpcode(u[1]); {
		case op == rdmap.OpWrite && n == ddp.TaggedLen && ddp.Tagged(u).STag() < 1<<8:
			nudges++
		case op == rdmap.OpReadRequest:
			rr := rdmap.ReadRequest(u[ddp.UntaggedLen:])
			h := make([]byte, ddp.TaggedLen)
			ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpReadResponse), rr.SinkSTag(), rr.SinkTO())
			if wr.WriteFPDU(h, [][]byte{make([]byte, rr.Size())}) != nil {
				return
			}
		case op == rdmap.OpSend:
			h := make([]byte, ddp.UntaggedLen)
			ddp.Untagged(h).Init(true, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, sendMSN, 0)
			sendMSN++
			if wr.WriteFPDU(h, [][]byte{u[ddp.UntaggedLen:]}) != nil {
				return
			}
		}
	}
}

// TestNudgeSiwWindow: an initiator whose first FPDUs land in siw's accept window is
// nudged out of it with zero-length Writes, in peer-to-peer mode with the Read RTR (the
// default) and the Write RTR, and in the client-server model (rev 2 and rev 1). Without
// nudges the model stalls (the Read or Send below never completes).
func TestNudgeSiwWindow(t *testing.T) {
	cases := []struct {
		name string
		mpa  mpa.Config // the initiator's; the model accepts Write and Read RTRs
	}{
		{"p2p-read-rtr", DefaultConfig().MPA},
		{"p2p-write-rtr", mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite}},
		{"client-server-rev2", mpa.Config{Rev: 2}},
		{"client-server-rev1", mpa.Config{Rev: 1, CRC: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			m := newSiwModel(t, 50*time.Millisecond, mpa.Config{Rev: 2, RTR: mpa.RTRWrite | mpa.RTRRead, IRD: 4, ORD: 4})
			cli := newSide(t, &pairOpts{})
			defer cli.dev.Close()
			cfg := &Config{MPA: tc.mpa, Timeout: 5 * time.Second}
			conn, err := Dial(context.Background(), cli.qp, m.ln.Addr().String(), cfg, ConnParam{IRD: 4, ORD: 4})
			if err != nil {
				t.Fatal(err)
			}
			// The first operation goes out at once, into the window.
			mr, buf := cli.reg(t, 64, allAccess)
			copy(buf, "ping")
			if err := cli.qp.PostRecv(&rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{mr.SGE(32, 32)}}); err != nil {
				t.Fatal(err)
			}
			if err := cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{mr.SGE(0, 4)}}); err != nil {
				t.Fatal(err)
			}
			select {
			case n := <-m.held:
				if n == 0 {
					t.Fatal("nothing arrived inside the window: the race was not exercised")
				}
			case <-m.stalled:
				t.Fatal("the responder model stalled: no bytes after its window")
			case <-time.After(5 * time.Second):
				t.Fatal("the responder model never left its window")
			}
			expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
			if c := wait(t, cli.rcq); c.WRID != 2 || c.Status != rnic.StatusSuccess || string(buf[32:36]) != "ping" {
				t.Fatalf("echo: %+v %q", c, buf[32:36])
			}
			if conn.Nudges() == 0 {
				t.Fatal("no nudge counted")
			}
			// The peer has spoken and (client-server) one FPDU followed: nudging is over.
			deadline := time.Now().Add(5 * time.Second)
			for !conn.ng.done.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !conn.ng.done.Load() {
				t.Fatal("still nudging after the peer answered")
			}
			_ = conn.Close()
			want := conn.Nudges()
			if conn.Params().RTR == mpa.RTRWrite {
				want++ // the Write RTR has the nudge's form
			}
			if got := <-m.nudges; uint64(got) != want {
				t.Fatalf("model received %d zero-length Writes to STag index 0, want %d", got, want)
			}
		})
	}
}

// TestNudgeNoneForCompliantResponder: a softrnic responder answers the default Read RTR
// at once, which settles the initiator before its first nudge would be due.
func TestNudgeNoneForCompliantResponder(t *testing.T) {
	noLeak(t)
	cfg := DefaultConfig()
	cli, srv := newPair(t, &pairOpts{cli: cfg})
	if got := cli.conn.Params().RTR; got != mpa.RTRRead {
		t.Fatalf("negotiated RTR %v, want the Read RTR", got)
	}
	// A zero-length Read completes after its Read Response, which follows the RTR's.
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpRead, Flags: rnic.Signaled}); err != nil {
		t.Fatal(err)
	}
	expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
	if !cli.conn.ng.done.Load() {
		t.Fatal("initiator still nudging after the responder's Read Response")
	}
	if srv.conn.Nudges() != 0 {
		t.Fatal("a responder nudged")
	}
}

// TestNudgeSilentPeerGivesUp: against a peer-to-peer responder that picks the Write RTR
// and never sends, the initiator nudges at doubling intervals and stops at Config.Timeout.
func TestNudgeSilentPeerGivesUp(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	cli := newSide(t, &pairOpts{})
	defer cli.dev.Close()
	ln, err := Listen(srv.dev, "127.0.0.1:0", &Config{MPA: mpa.Config{Rev: 2, RTR: mpa.RTRWrite}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if r, err := ln.Accept(context.Background()); err == nil {
			srv.conn, _ = r.Accept(srv.qp, ConnParam{})
		}
	}()
	cfg := &Config{MPA: mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, Timeout: 300 * time.Millisecond}
	conn, err := Dial(context.Background(), cli.qp, ln.Addr().String(), cfg, ConnParam{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !conn.ng.done.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	n := conn.Nudges()
	// 2, 4, 8, … ms after the RTR until 300 ms have passed: about log2(300/2)+1.
	if !conn.ng.done.Load() || n < 3 || n > 10 {
		t.Fatalf("nudges %d (done %v), want a handful ending at the timeout", n, conn.ng.done.Load())
	}
	time.Sleep(50 * time.Millisecond)
	if conn.Nudges() != n {
		t.Fatal("nudges after giving up")
	}
	if s := srv.qp.State(); s != rnic.QPRTS {
		t.Fatalf("responder state %v after the nudges", s)
	}
	_ = conn.Close()
}

// TestNudgeZeroLengthWriteIsNoop: the receiver takes zero-length Writes to any STag as
// RFC 5041 §5 requires (unchecked), and a nudge does not pair with a following Immediate
// Data (which completes as a plain receive with immediate data, not Write with Immediate).
func TestNudgeZeroLengthWriteIsNoop(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	p := rawConnect(t, mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, srv, &Config{Extensions: true, MPA: mpa.Config{RTR: mpa.RTRWrite}})
	_ = p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	write := func(stag uint32, to uint64) {
		h := make([]byte, ddp.TaggedLen)
		ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), stag, to)
		if err := p.wr.WriteFPDU(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	write(1, 0)                     // the RTR
	write(1, 0)                     // a nudge
	write(0xdeadbe01, ^uint64(0)-1) // a zero-length Write to a bogus STag and TO: unchecked
	write(1, 0)                     // a nudge again
	imm := make([]byte, ddp.UntaggedLen)
	ddp.Untagged(imm).Init(true, rdmap.Control(rdmap.OpImmediateData), 0, ddp.QNSend, 1, 0)
	if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 9}); err != nil {
		t.Fatal(err)
	}
	if err := p.wr.WriteFPDU(rdmap.AppendImmediate(imm, 42), nil); err != nil {
		t.Fatal(err)
	}
	c := wait(t, srv.rcq)
	if c.WRID != 9 || c.Status != rnic.StatusSuccess || c.Opcode != rnic.WCRecv || c.Flags&rnic.WCWithImm == 0 || c.Imm != 42 {
		t.Fatalf("immediate after a nudge: %+v", c)
	}
	if s := srv.qp.State(); s != rnic.QPRTS {
		t.Fatalf("state %v", s)
	}
	_ = srv.conn.Close()
}

// TestZeroLengthWriteImmPaired: a user's zero-length Write with Immediate names an STag of
// index 0; it still completes at the peer as Write with Immediate.
func TestZeroLengthWriteImmPaired(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, &pairOpts{cli: smallCfg(), srv: smallCfg()})
	if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 3}); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 4, Opcode: rnic.OpWriteImm, Flags: rnic.Signaled, RKey: 0, Imm: 7}); err != nil {
		t.Fatal(err)
	}
	expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
	if c := wait(t, srv.rcq); c.Opcode != rnic.WCRecvRDMAWithImm || c.Imm != 7 {
		t.Fatalf("zero-length Write with Immediate: %+v", c)
	}
}
