package rnic

import "testing"

// TestQPNumbers: QP numbers start at FirstQPN (QP0/QP1 are the SMI and GSI),
// stay unique, and wrap within 24 bits back to FirstQPN, skipping live QPs.
func TestQPNumbers(t *testing.T) {
	d, pd, cq := setup(t)
	mk := func() *QP {
		t.Helper()
		q, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	first, second := mk(), mk()
	if first.Num() != FirstQPN || second.Num() != FirstQPN+1 || FirstQPN < 2 {
		t.Fatalf("first QPs numbered %d, %d; want %d, %d (≥ 2)", first.Num(), second.Num(), FirstQPN, FirstQPN+1)
	}
	if d.QPByNum(first.Num()) != first || d.QPByNum(1) != nil || d.QPByNum(0) != nil {
		t.Fatal("QPByNum")
	}
	// Near the top of the 24-bit space: MaxQPN, then the wrap skips 0, 1 and
	// the live FirstQPN and FirstQPN+1.
	d.qpMu.Lock()
	d.nextQP = MaxQPN
	d.qpMu.Unlock()
	top, wrapped := mk(), mk()
	if top.Num() != MaxQPN || wrapped.Num() != FirstQPN+2 {
		t.Fatalf("after the top: %#x, %d; want %#x, %d", top.Num(), wrapped.Num(), MaxQPN, FirstQPN+2)
	}
	// A freed low number is reused once the counter comes round again.
	if err := first.Destroy(); err != nil {
		t.Fatal(err)
	}
	d.qpMu.Lock()
	d.nextQP = 1 << 24 // out of range: wraps to FirstQPN
	d.qpMu.Unlock()
	if q := mk(); q.Num() != FirstQPN {
		t.Fatalf("reused %d, want %d", q.Num(), FirstQPN)
	}
}
