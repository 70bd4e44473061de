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
	// The transport takes a buffer at a message's first DDP segment and completes it at
	// the last; freeze that state by taking buffers through the engine as the
	// transport would for multi-segment Sends in flight: two at A, one at B.
	var inflight []*rnic.RecvWQE
	for _, q := range []*rnic.QP{epA.qp, epA.qp, epB.qp} {
		w, st := q.TakeRecv()
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
	check(epA, 2)
	check(epB, 1)
	if p, _ := srq.Query(SRQFieldAll); p.AvailableDTOCount != 1 || p.OutstandingDTOCount != 8 {
		t.Fatalf("%+v", p)
	}
	// one of A's messages completes
	epA.qp.CompleteRecv(inflight[0], rnic.RecvResult{Opcode: rnic.WCRecv, ByteLen: 4})
	waitFor(t, "fourth completion at A", func() bool { return evdA.count() == 4 })
	check(epA, 1)
	check(epB, 1)
	// dequeuing does not change the counts
	for i := 0; i < 4; i++ {
		if ev, err := evdA.Dequeue(); err != nil || ev.DTO.Op != DTOReceive || ev.DTO.EP != epA {
			t.Fatal(ev, err)
		}
	}
	check(epA, 1)
	// an abrupt disconnect flushes B's buffer and leaves A's count alone
	if err := epB.Disconnect(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "flush at B", func() bool { return evdB.count() == 2 })
	check(epB, 0)
	check(epA, 1)
	if err := epA.Disconnect(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "flush at A", func() bool { return evdA.count() == 1 })
	check(epA, 0)
	if _, _, err := (*EP)(nil).RecvQuery(); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatal(err)
	}
}
