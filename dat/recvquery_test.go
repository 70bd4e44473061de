package dat

import (
	"errors"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// waitFor polls cond until it holds or the test deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitT); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// dat_ep_recv_query (man page) with two EPs sharing one SRQ over iWARP:
// each EP counts exactly the SRQ buffers it took and has not completed,
// whether or not the completions were dequeued.
func TestRecvQuerySharedSRQ(t *testing.T) {
	srv := newSide(t, "server")
	cliA, cliB := newSide(t, "clientA"), newSide(t, "clientB")
	srq, err := srv.ia.CreateSRQ(srv.pz, SRQAttr{MaxRecvDTOs: 8, MaxRecvIOV: 1})
	if err != nil {
		t.Fatal(err)
	}
	attr := DefaultEPAttr()
	evdA := mustEVD(t, srv.ia, 16, nil, EVDDTO)
	evdB := mustEVD(t, srv.ia, 16, nil, EVDDTO)
	epA, err := srv.ia.CreateEPWithSRQ(srv.pz, evdA, srv.dto, srv.conn, srq, &attr)
	if err != nil {
		t.Fatal(err)
	}
	epB, err := srv.ia.CreateEPWithSRQ(srv.pz, evdB, srv.dto, srv.conn, srq, &attr)
	if err != nil {
		t.Fatal(err)
	}
	srv.ep = epA
	connectPair(t, srv, cliA, nil)
	srv.ep = epB
	connectPair(t, srv, cliB, nil)
	for i := 0; i < 8; i++ {
		if err := srq.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(i*8, 8)}, uint64(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	send := func(c *side, n int) {
		for i := 0; i < n; i++ {
			if err := c.ep.PostSend([]LMRTriplet{c.sendLMR.Triplet(0, 4)}, 0, CompletionSuppress); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(cliA, 3)
	send(cliB, 1)
	// completions generated (queued on the recv EVDs), none dequeued
	waitFor(t, "completions", func() bool { return evdA.count() == 3 && evdB.count() == 1 })
	for _, ep := range []*EP{epA, epB} {
		if n, s, err := ep.RecvQuery(); err != nil || n != 0 || s != 0 {
			t.Fatalf("completed buffers counted: %d %d %v", n, s, err)
		}
	}
	// A transport takes a buffer at a message's first segment and completes it at the
	// last. To freeze that state, two more EPs on the SRQ (C and D) get a stand-in
	// transport through the engine's SPI, which takes buffers as a transport would for
	// multi-segment Sends in flight: two at C, one at D.
	epC, err := srv.ia.CreateEPWithSRQ(srv.pz, evdA, srv.dto, srv.conn, srq, &attr)
	if err != nil {
		t.Fatal(err)
	}
	epD, err := srv.ia.CreateEPWithSRQ(srv.pz, evdB, srv.dto, srv.conn, srq, &attr)
	if err != nil {
		t.Fatal(err)
	}
	tC, tD := attachStandIn(t, epC.qp), attachStandIn(t, epD.qp)
	var inflight []*rnic.RecvWQE
	for _, tq := range []*rnic.TransportQP{tC, tC, tD} {
		w, st := tq.TakeRecv()
		if w == nil || st != rnic.StatusSuccess {
			t.Fatal("take", st)
		}
		inflight = append(inflight, w)
	}
	check := func(ep *EP, want int) {
		t.Helper()
		if n, s, err := ep.RecvQuery(); err != nil || n != want || s != want {
			t.Fatalf("recv_query: %d %d %v, want %d", n, s, err, want)
		}
	}
	check(epC, 2)
	check(epD, 1)
	check(epA, 0)
	if p, _ := srq.Query(SRQFieldAll); p.AvailableDTOCount != 1 || p.OutstandingDTOCount != 8 {
		t.Fatalf("%+v", p)
	}
	// one of C's messages completes
	tC.CompleteRecv(inflight[0], rnic.RecvResult{Opcode: rnic.WCRecv, ByteLen: 4})
	waitFor(t, "fourth completion at A's EVD", func() bool { return evdA.count() == 4 })
	check(epC, 1)
	check(epD, 1)
	// dequeuing does not change the counts
	for i := 0; i < 4; i++ {
		if ev, err := evdA.Dequeue(); err != nil || ev.DTO.Op != DTOReceive || (ev.DTO.EP != epA && ev.DTO.EP != epC) {
			t.Fatal(ev, err)
		}
	}
	check(epC, 1)
	// the end of D's connection flushes D's buffer and leaves C's count alone
	tD.TransportDone(nil)
	waitFor(t, "flush at D", func() bool { return evdB.count() == 2 })
	check(epD, 0)
	check(epC, 1)
	tC.TransportDone(nil)
	waitFor(t, "flush at C", func() bool { return evdA.count() == 1 })
	check(epC, 0)
	if _, _, err := (*EP)(nil).RecvQuery(); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatal(err)
	}
}

// standIn is a transport that carries nothing: tests attach it to take and complete
// work through the engine's SPI the way a wire transport would.
type standIn struct{ tq *rnic.TransportQP }

func (s *standIn) SendQueued()              {}
func (s *standIn) Disconnect(graceful bool) { go s.tq.TransportDone(nil) }

func attachStandIn(t *testing.T, qp *rnic.QP) *rnic.TransportQP {
	t.Helper()
	s := &standIn{}
	tq, err := rnic.AttachTransport(qp, s)
	if err != nil {
		t.Fatal(err)
	}
	s.tq = tq
	return tq
}
