package rnic

import "testing"

// TestSendRingGrows: the send ring starts small and grows while WQEs are in flight and
// lent to the transport; every WQE keeps its place in post order, the depth is still
// MaxSendWR, and a WQE completed after it retired (its memory back in the pool, perhaps
// posted again) is ignored.
func TestSendRingGrows(t *testing.T) {
	d, pd, _ := setup(t)
	const depth = 37
	cq, _ := d.CreateCQ(2 * depth)
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: depth}})
	tq, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 4)})
	_ = tq.Established()
	defer tq.TransportDone(nil)
	var lent []*SendWQE
	for i := 0; i < depth; i++ {
		if err := qp.PostSend(&SendWR{WRID: uint64(i), Opcode: OpSend, Flags: Signaled}); err != nil {
			t.Fatal(i, err)
		}
		if i%3 == 0 { // take some while the ring grows under them
			lent = append(lent, tq.NextSend())
		}
	}
	if qp.PostSend(&SendWR{Opcode: OpSend}) != ErrQueueFull {
		t.Fatal("posted beyond MaxSendWR")
	}
	for w := tq.NextSend(); w != nil; w = tq.NextSend() {
		lent = append(lent, w)
	}
	if len(lent) != depth {
		t.Fatal("lent", len(lent))
	}
	for i, w := range lent {
		if w.WRID != uint64(i) {
			t.Fatalf("WQE %d has WRID %d", i, w.WRID)
		}
	}
	for i := len(lent) - 1; i >= 0; i-- { // completed in reverse: reported in post order
		tq.CompleteSend(lent[i], StatusSuccess)
	}
	wc := make([]Completion, 2*depth)
	n, _ := cq.Poll(wc)
	if n != depth {
		t.Fatal("completions", n)
	}
	for i, c := range wc[:n] {
		if c.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	stale := lent[0]
	if err := qp.PostSend(&SendWR{WRID: 100, Opcode: OpSend, Flags: Signaled}); err != nil {
		t.Fatal(err)
	}
	w := tq.NextSend()
	tq.CompleteSend(stale, StatusSuccess) // retired before: ignored (even if stale == w)
	if stale != w {
		if n, _ := cq.Poll(wc); n != 0 {
			t.Fatal("a retired WQE completed again", wc[0])
		}
	}
	tq.CompleteSend(w, StatusSuccess)
	if n, _ := cq.Poll(wc); n != 1 || wc[0].WRID != 100 {
		t.Fatal("after reuse", n, wc[0])
	}
}
