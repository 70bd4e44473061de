package rnic

import (
	"errors"
	"slices"
	"testing"
)

// TestQPNumbersSequential: with Config.StartQPN, QP numbers are sequential from it, stay
// unique, and wrap within 24 bits back to FirstQPN (QP0/QP1 are the SMI and GSI),
// skipping live QPs.
func TestQPNumbersSequential(t *testing.T) {
	d, err := Open(Config{StartQPN: FirstQPN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
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
	d.nextQP = 1 << 24 // past the top: wraps to FirstQPN
	d.qpMu.Unlock()
	if q := mk(); q.Num() != FirstQPN {
		t.Fatalf("reused %d, want %d", q.Num(), FirstQPN)
	}
	if d2, _ := Open(Config{StartQPN: 0x11}); d2 != nil {
		defer d2.Close()
		pd2, _ := d2.AllocPD()
		cq2, _ := d2.CreateCQ(4)
		if q, err := d2.CreateQP(pd2, QPAttr{SendCQ: cq2, RecvCQ: cq2}); err != nil || q.Num() != 0x11 {
			t.Fatalf("StartQPN 0x11: %v %v", q, err)
		}
	}
}

// TestQPNumbersRandom: by default every device starts at its own random QP number and
// allocates sparsely, so a new process does not reuse a recent one's numbers (a peer's
// CM would reject them as stale connections). Destroying and re-creating never reuses a
// number soon.
func TestQPNumbersRandom(t *testing.T) {
	const devs, perDev = 8, 200
	seen := make(map[uint32]int)
	firsts := make(map[uint32]bool)
	for i := range devs {
		d, err := Open(Config{})
		if err != nil {
			t.Fatal(err)
		}
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(16)
		var prev uint32
		for k := range perDev {
			q, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			n := q.Num()
			if n < FirstQPN || n > MaxQPN {
				t.Fatalf("QPN %#x out of range", n)
			}
			if k == 0 {
				firsts[n] = true
			} else if d := qpnStep(prev, n); d == 0 || d > QPNStride {
				t.Fatalf("stride %d from %#x to %#x", d, prev, n)
			}
			prev = n
			seen[n]++
			// Destroying at once must not make the next QP reuse the number.
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
			_ = i
		}
		d.Close()
	}
	// Two devices' starting numbers collide with probability 2^-24 per pair. Their
	// ranges (≈ 3,300 numbers each) overlap with probability ≈ 1% over the 28 pairs, and
	// then a dozen numbers coincide; sequential numbering would repeat ≈ 200 of them.
	if len(firsts) != devs {
		t.Fatalf("devices started at the same QP number: %v", firsts)
	}
	dups := 0
	for _, c := range seen {
		if c > 1 {
			dups++
		}
	}
	if dups > perDev/8 {
		t.Fatalf("%d QP numbers reused across %d devices × %d QPs", dups, devs, perDev)
	}
}

// qpnStep is how far allocation moved from a to b, across the wrap from MaxQPN to FirstQPN.
func qpnStep(a, b uint32) uint32 {
	if b >= a {
		return b - a
	}
	return MaxQPN - a + 1 + b - FirstQPN
}

// fakeQPNs is a QPNAllocator handing out numbers from a list and recording frees.
type fakeQPNs struct {
	next  []uint32
	err   error
	freed []uint32
}

func (f *fakeQPNs) AllocQPN() (uint32, error) {
	if f.err != nil {
		return 0, f.err
	}
	n := f.next[0]
	f.next = f.next[1:]
	return n, nil
}
func (f *fakeQPNs) FreeQPN(n uint32) { f.freed = append(f.freed, n) }

// TestQPNumbersExternal: with Config.QPNumbers the device numbers its QPs from the
// allocator, gives a number back on Destroy, refuses a number it cannot use (reserved,
// out of range, already live) by giving it back and failing CreateQP, and wraps the
// allocator's error.
func TestQPNumbersExternal(t *testing.T) {
	errNone := errors.New("no numbers left")
	a := &fakeQPNs{next: []uint32{777, 1, 777, MaxQPN + 1, 900}}
	d, err := Open(Config{QPNumbers: a, StartQPN: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	attr := QPAttr{SendCQ: cq, RecvCQ: cq}
	q, err := d.CreateQP(pd, attr)
	if err != nil || q.Num() != 777 || d.QPByNum(777) != q {
		t.Fatalf("first QP: %v, err %v; want number 777", q, err)
	}
	for _, bad := range []uint32{1, 777, MaxQPN + 1} {
		if _, err := d.CreateQP(pd, attr); !errors.Is(err, ErrInvalidArg) {
			t.Fatalf("allocator gave %d: err %v, want ErrInvalidArg", bad, err)
		}
	}
	if want := []uint32{1, 777, MaxQPN + 1}; !slices.Equal(a.freed, want) {
		t.Fatalf("given back %v, want %v", a.freed, want)
	}
	q2, err := d.CreateQP(pd, attr)
	if err != nil || q2.Num() != 900 {
		t.Fatalf("QP after refusals: %v, %v", q2, err)
	}
	a.freed = nil
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.freed, []uint32{777}) || d.QPByNum(777) != nil {
		t.Fatalf("Destroy gave back %v", a.freed)
	}
	a.err = errNone
	if _, err := d.CreateQP(pd, attr); !errors.Is(err, errNone) {
		t.Fatalf("allocator error: got %v", err)
	}
}
