package rnic

import "testing"

// TestCQSoleQP: a CQ knows the one QP that uses it (whose receive a Wait may drive) until
// a second one does; then it stays mixed until none does, and lets go of a destroyed QP.
func TestCQSoleQP(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	other, _ := d.CreateCQ(16)
	state := func() (*QP, bool, int) {
		cq.mu.Lock()
		defer cq.mu.Unlock()
		return cq.soleQP, cq.mixed, cq.qpRefs
	}
	newQP := func(send, recv *CQ) *QP {
		q, err := d.CreateQP(pd, QPAttr{SendCQ: send, RecvCQ: recv})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a := newQP(cq, cq) // send and receive CQ: bound twice, still the sole QP
	if q, mixed, refs := state(); q != a || mixed || refs != 2 {
		t.Fatalf("one QP: sole %p (want %p), mixed %v, refs %d", q, a, mixed, refs)
	}
	b := newQP(other, cq)
	if _, mixed, _ := state(); !mixed {
		t.Fatal("two QPs on the CQ and not mixed")
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if q, mixed, refs := state(); q != nil || !mixed || refs != 1 {
		t.Fatalf("after the first QP's Destroy: sole %p (want none kept), mixed %v, refs %d", q, mixed, refs)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	c := newQP(cq, other)
	if q, mixed, refs := state(); q != c || mixed || refs != 1 {
		t.Fatalf("a new QP on the emptied CQ: sole %p (want %p), mixed %v, refs %d", q, c, mixed, refs)
	}
}
