package rnic

import (
	"testing"
	"time"
)

// TestSRQResize: growing keeps posted receives in FIFO order and admits more; shrinking
// below the occupied slots (posted or taken) fails and changes nothing; WQEs lent to a
// transport survive a grow; the low-watermark event still fires after a resize.
func TestSRQResize(t *testing.T) {
	d, pd, cq := setup(t)
	srq, _ := d.CreateSRQ(pd, SRQAttr{MaxWR: 3, MaxSGE: 1})
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	tqp, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
	_ = tqp.Established()
	defer tqp.TransportDone(nil)
	for _, n := range []int{0, -1, d.Config().MaxQPWR + 1} {
		if srq.Resize(n) != ErrInvalidArg {
			t.Fatal("bad depth accepted", n)
		}
	}
	for i := 0; i < 3; i++ {
		if err := srq.PostRecv(&RecvWR{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if srq.PostRecv(&RecvWR{WRID: 9}) != ErrQueueFull {
		t.Fatal("posted beyond depth")
	}
	lent, _ := tqp.TakeRecv() // WRID 0: moves the FIFO head; its slot stays occupied
	if srq.PostRecv(&RecvWR{WRID: 9}) != ErrQueueFull {
		t.Fatal("a lent WQE's slot reused")
	}
	if err := srq.Resize(2); err != ErrInvalidArg || srq.MaxWR() != 3 {
		t.Fatal("shrunk below the occupied slots", err, srq.MaxWR())
	}
	if err := srq.Resize(6); err != nil || srq.MaxWR() != 6 {
		t.Fatal(err, srq.MaxWR())
	}
	for i := 3; i < 6; i++ {
		if err := srq.PostRecv(&RecvWR{WRID: uint64(i)}); err != nil {
			t.Fatal("grown SRQ full", i, err)
		}
	}
	if srq.PostRecv(&RecvWR{WRID: 9}) != ErrQueueFull || srq.Len() != 5 {
		t.Fatal("depth after grow", srq.Len())
	}
	tqp.CompleteRecv(lent, RecvResult{Opcode: WCRecv, ByteLen: 1}) // a WQE lent before the grow
	var wc [8]Completion
	if n, _ := cq.Poll(wc[:]); n != 1 || wc[0].WRID != 0 {
		t.Fatalf("%d %+v", n, wc[0])
	}
	for want := uint64(1); want < 4; want++ { // FIFO order kept across the grow
		w, _ := tqp.TakeRecv()
		if w == nil || w.WRID != want {
			t.Fatal("order", want, w)
		}
		tqp.CompleteRecv(w, RecvResult{Opcode: WCRecv})
	}
	cq.Poll(wc[:])
	// 2 posted (4, 5): shrink to 2 works, to 1 does not
	if err := srq.Resize(2); err != nil || srq.MaxWR() != 2 {
		t.Fatal(err)
	}
	if srq.Resize(1) != ErrInvalidArg || srq.PostRecv(&RecvWR{WRID: 9}) != ErrQueueFull {
		t.Fatal("depth after shrink")
	}
	// low watermark after the resizes: fires when fewer than 2 remain
	srq.SetLimit(2)
	w, _ := tqp.TakeRecv()
	for got := false; !got; {
		select {
		case e := <-d.Events():
			got = e.Type == EventSRQLimitReached && e.SRQ == srq
		case <-time.After(5 * time.Second):
			t.Fatal("no limit event after resize")
		}
	}
	tqp.CompleteRecv(w, RecvResult{Opcode: WCRecv})
	// grow again within the kept slots, then beyond them
	if srq.Resize(4) != nil || srq.Resize(12) != nil {
		t.Fatal("regrow")
	}
	for i := 0; i < 11; i++ {
		if err := srq.PostRecv(&RecvWR{WRID: uint64(100 + i)}); err != nil {
			t.Fatal(i, err)
		}
	}
	if srq.PostRecv(&RecvWR{}) != ErrQueueFull || srq.Len() != 12 {
		t.Fatal("depth 12", srq.Len())
	}
	if w, _ := tqp.TakeRecv(); w == nil || w.WRID != 5 {
		t.Fatal("order after regrow", w)
	}
}
