package rnic

import (
	"bytes"
	"sync"
	"testing"
)

func TestSegs(t *testing.T) {
	a, b, c := make([]byte, 3), make([]byte, 0), make([]byte, 5)
	s := Segs{a, b, c}
	if s.Len() != 8 {
		t.Fatal(s.Len())
	}
	msg := []byte("01234567")
	if n := s.WriteAt(msg[2:7], 2); n != 5 {
		t.Fatal("write", n)
	}
	if !bytes.Equal(a, []byte{0, 0, '2'}) || !bytes.Equal(c, []byte("3456\x00")) {
		t.Fatalf("placed %q %q", a, c)
	}
	got := make([]byte, 4)
	if n := s.ReadAt(got, 2); n != 4 || string(got) != "2345" {
		t.Fatalf("read %d %q", n, got)
	}
	if n := s.ReadAt(make([]byte, 4), 6); n != 2 {
		t.Fatal("read past the end", n)
	}
	if n := s.WriteAt([]byte("xyz"), 7); n != 1 || c[4] != 'x' {
		t.Fatal("write past the end", n)
	}
	v := s.Slices(make([][]byte, 0, 4), 1, 5)
	if len(v) != 2 || string(v[0]) != "\x002" || string(v[1]) != "345" {
		t.Fatalf("slices %q", v)
	}
	dst := make([][]byte, 0, 4)
	buf := make([]byte, 8)
	if allocs := testing.AllocsPerRun(100, func() {
		dst = s.Slices(dst, 0, 8)
		s.ReadAt(buf, 0)
		s.WriteAt(buf, 0)
	}); allocs != 0 {
		t.Fatal("allocs", allocs)
	}
}

// TestAtomicSerializedAcrossQPs: atomics through different QPs (as an iWARP and a RoCEv2
// transport would run them) on one word lose no update.
func TestAtomicSerializedAcrossQPs(t *testing.T) {
	d, pd, cq := setup(t)
	word := make([]byte, 8)
	mr, _ := pd.RegMR(word, AccessLocalWrite|AccessRemoteAtomic)
	var tqs []*TransportQP
	for i := 0; i < 2; i++ {
		qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
		tq, err := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer tq.TransportDone(nil)
		tqs = append(tqs, tq)
	}
	const n = 2000
	var wg sync.WaitGroup
	for _, tq := range tqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				dst, err := tq.ResolveRemote(mr.RKey(), mr.Addr(), 8, AccessRemoteAtomic)
				if err != nil {
					t.Error(err)
					return
				}
				tq.Atomic(dst, func(v uint64) uint64 { return v + 1 })
			}
		}()
	}
	wg.Wait()
	if got := nativeEndian.Uint64(word); got != 2*n {
		t.Fatalf("%d increments, want %d", got, 2*n)
	}
}
