package rnic

import "testing"

// TestRecvOutstanding: two QPs sharing an SRQ each count only the WQEs they took; completing
// and flushing end the count.
func TestRecvOutstanding(t *testing.T) {
	d, pd, cq := setup(t)
	srq, _ := d.CreateSRQ(pd, SRQAttr{MaxWR: 8, MaxSGE: 1})
	a, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	b, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	ta, _ := AttachTransport(a, &fakeT{disconnect: make(chan bool, 1)})
	tb, _ := AttachTransport(b, &fakeT{disconnect: make(chan bool, 1)})
	_, _ = ta.Established(), tb.Established()
	for i := 0; i < 6; i++ {
		if err := srq.PostRecv(&RecvWR{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var wa []*RecvWQE
	for i := 0; i < 3; i++ {
		w, _ := ta.TakeRecv()
		wa = append(wa, w)
	}
	wb, _ := tb.TakeRecv()
	if a.RecvOutstanding() != 3 || b.RecvOutstanding() != 1 || srq.Len() != 2 {
		t.Fatal(a.RecvOutstanding(), b.RecvOutstanding(), srq.Len())
	}
	ta.CompleteRecv(wa[1], RecvResult{Opcode: WCRecv})
	ta.CompleteRecv(wa[1], RecvResult{Opcode: WCRecv}) // twice: ignored
	if a.RecvOutstanding() != 2 || b.RecvOutstanding() != 1 {
		t.Fatal(a.RecvOutstanding(), b.RecvOutstanding())
	}
	tb.CompleteRecv(wb, RecvResult{Opcode: WCRecv})
	if b.RecvOutstanding() != 0 {
		t.Fatal(b.RecvOutstanding())
	}
	ta.Fatal(EventQPFatal, nil)
	ta.TransportDone(nil)
	if a.RecvOutstanding() != 0 {
		t.Fatal("flushed WQEs still counted", a.RecvOutstanding())
	}
	var wc [8]Completion
	if n, _ := cq.Poll(wc[:]); n != 4 {
		t.Fatal("completions", n)
	}
	w, _ := tb.TakeRecv()
	if allocs := testing.AllocsPerRun(100, func() { _ = b.RecvOutstanding() }); allocs != 0 || b.RecvOutstanding() != 1 || w == nil {
		t.Fatal(allocs)
	}
	tb.TransportDone(nil)
	if b.RecvOutstanding() != 0 {
		t.Fatal("flushed on TransportDone", b.RecvOutstanding())
	}
}

// BenchmarkSRQRecvPath: SRQ post, take, RecvOutstanding, complete and poll (0 allocs/op).
func BenchmarkSRQRecvPath(b *testing.B) {
	d, err := Open(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	srq, _ := d.CreateSRQ(pd, SRQAttr{MaxWR: 8, MaxSGE: 1})
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	tqp, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
	_ = tqp.Established()
	defer tqp.TransportDone(nil)
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, AccessLocalWrite)
	rwr := &RecvWR{SGL: []SGE{mr.SGE(0, 64)}}
	var wc [4]Completion
	b.ReportAllocs()
	for b.Loop() {
		_ = srq.PostRecv(rwr)
		w, _ := tqp.TakeRecv()
		if qp.RecvOutstanding() != 1 {
			b.Fatal("count")
		}
		tqp.CompleteRecv(w, RecvResult{Opcode: WCRecv, ByteLen: 64})
		if n, _ := cq.Poll(wc[:]); n != 1 {
			b.Fatal("poll", n)
		}
	}
}
