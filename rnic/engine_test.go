package rnic

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func setup(t *testing.T) (*Device, *PD, *CQ) {
	t.Helper()
	return setupCfg(t, Config{})
}

// setupCfg opens a device with cfg (closed at the test's end), a PD and a 16-entry CQ.
func setupCfg(t *testing.T, cfg Config) (*Device, *PD, *CQ) {
	t.Helper()
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	return d, pd, cq
}

func TestSTagTable(t *testing.T) {
	d, pd, _ := setup(t)
	buf := make([]byte, 100)
	mr, err := pd.RegMRAt(buf, 0x1000, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.STag()>>8 == 0 {
		t.Fatal("index 0 used")
	}
	if _, err := pd.RegMR(buf, AccessRemoteWrite); !errors.Is(err, ErrInvalidArg) {
		t.Fatal("remote write without local write accepted")
	}
	pd2, _ := d.AllocPD()
	cases := []struct {
		pd    *PD
		stag  uint32
		to, n uint64
		right Access
		want  error
	}{
		{pd, mr.STag(), 0x1000, 100, AccessRemoteWrite, nil},
		{pd, mr.STag(), 0x1000 + 100, 0, AccessRemoteWrite, nil},
		{pd, 0, 0, 0, AccessRemoteWrite, AccessErrInvalidSTag},
		{pd, 1, 0, 0, AccessRemoteWrite, AccessErrInvalidSTag},
		{pd, mr.STag() ^ 0x80, 0x1000, 1, AccessRemoteWrite, AccessErrInvalidSTag},
		{pd2, mr.STag(), 0x1000, 1, AccessRemoteWrite, AccessErrNotAssociated},
		{pd, mr.STag(), 0x1000, 1, AccessRemoteRead, AccessErrRights},
		{pd, mr.STag(), 0xfff, 1, AccessRemoteWrite, AccessErrBounds},
		{pd, mr.STag(), 0x1000, 101, AccessRemoteWrite, AccessErrBounds},
		{pd, mr.STag(), ^uint64(0), 2, AccessRemoteWrite, AccessErrTOWrap},
	}
	for i, c := range cases {
		b, err := c.pd.resolveRemote(nil, c.stag, c.to, c.n, c.right)
		if err != c.want || (err == nil && uint64(len(b)) != c.n) {
			t.Errorf("case %d: %v (len %d), want %v", i, err, len(b), c.want)
		}
	}
	b, _ := pd.resolveRemote(nil, mr.STag(), 0x1010, 4, AccessRemoteWrite)
	b[0] = 7
	if buf[16] != 7 {
		t.Fatal("resolved slice does not alias the region")
	}
	if allocs := testing.AllocsPerRun(100, func() {
		_, _ = pd.resolveRemote(nil, mr.STag(), 0x1000, 10, AccessRemoteWrite)
		_, _ = pd.resolveRemote(nil, 5, 0x1000, 10, AccessRemoteWrite)
	}); allocs != 0 {
		t.Fatalf("ResolveRemote allocates %v", allocs)
	}
	// invalidate, then deregister: the index is reused with a new key
	if err := pd.invalidate(nil, mr.STag()); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.resolveRemote(nil, mr.STag(), 0x1000, 1, AccessRemoteWrite); err != AccessErrInvalidSTag {
		t.Fatal("invalidated STag resolves")
	}
	old := mr.STag()
	_ = mr.Dereg()
	mr2, _ := pd.RegMR(buf, AccessLocalWrite)
	if mr2.STag() == old {
		t.Fatal("STag reused with the same key")
	}
}

func TestMemoryWindows(t *testing.T) {
	_, pd, _ := setup(t)
	buf := make([]byte, 256)
	mr, _ := pd.RegMRAt(buf, 0, AccessLocalWrite|AccessMWBind)
	plain, _ := pd.RegMRAt(buf, 0, AccessLocalWrite)
	w1, _ := pd.AllocMW(1)
	w2, _ := pd.AllocMW(2)
	if st := pd.bindMW(nil, &BindInfo{MW: w1, MR: plain, Addr: 0, Length: 16, Access: AccessRemoteRead}); st != StatusMWBindErr {
		t.Fatal("bind into a region without MW-bind right")
	}
	if st := pd.bindMW(nil, &BindInfo{MW: w1, MR: mr, Addr: 250, Length: 16, Access: AccessRemoteRead}); st != StatusMWBindErr {
		t.Fatal("bind beyond the region")
	}
	if st := pd.bindMW(nil, &BindInfo{MW: w1, MR: mr, Addr: 16, Length: 16, Access: AccessRemoteRead}); st != StatusSuccess {
		t.Fatal(st)
	}
	if mr.Dereg() != ErrInUse {
		t.Fatal("deregistered a region with a bound window")
	}
	if _, err := pd.resolveRemote(nil, w1.STag(), 16, 16, AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.resolveRemote(nil, w1.STag(), 16, 17, AccessRemoteRead); err != AccessErrBounds {
		t.Fatal("window bounds")
	}
	if pd.invalidate(nil, w1.STag()) == nil {
		t.Fatal("type 1 window invalidated")
	}
	if st := pd.bindMW(nil, &BindInfo{MW: w2, MR: mr, Addr: 0, Length: 8, Access: AccessRemoteWrite, Key: 5}); st != StatusSuccess {
		t.Fatal(st)
	}
	if st := pd.bindMW(nil, &BindInfo{MW: w2, MR: mr, Addr: 0, Length: 8, Access: AccessRemoteWrite, Key: 6}); st != StatusMWBindErr {
		t.Fatal("rebound a valid type 2 window")
	}
	if err := pd.invalidate(nil, w2.STag()); err != nil {
		t.Fatal(err)
	}
	_ = w1.Dealloc()
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// fakeT is an in-memory transport recording engine calls.
type fakeT struct {
	kicks      int
	disconnect chan bool
}

func (f *fakeT) SendQueued()              { f.kicks++ }
func (f *fakeT) Disconnect(graceful bool) { f.disconnect <- graceful }

func TestQPStateAndOrdering(t *testing.T) {
	d, pd, cq := setup(t)
	qp, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&SendWR{Opcode: OpSend}); err != ErrQPState {
		t.Fatal("post send in Idle")
	}
	f := &fakeT{disconnect: make(chan bool, 4)}
	tq, err := AttachTransport(qp, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AttachTransport(qp, f); err != ErrAttached {
		t.Fatal("double attach")
	}
	if err := tq.Established(); err != nil || qp.State() != QPRTS {
		t.Fatal(err, qp.State())
	}
	for i := 0; i < 4; i++ {
		if err := qp.PostSend(&SendWR{WRID: uint64(i), Opcode: OpSend, Flags: Signaled}); err != nil {
			t.Fatal(err)
		}
	}
	if qp.PostSend(&SendWR{Opcode: OpSend}) != ErrQueueFull {
		t.Fatal("overfull SQ")
	}
	w0, w1 := tq.NextSend(), tq.NextSend()
	tq.CompleteSend(w1, StatusSuccess) // out of order: held back
	var wc [8]Completion
	if n, _ := cq.Poll(wc[:]); n != 0 {
		t.Fatal("completion out of order")
	}
	tq.CompleteSend(w0, StatusSuccess)
	if n, _ := cq.Poll(wc[:]); n != 2 || wc[0].WRID != 0 || wc[1].WRID != 1 {
		t.Fatalf("in-order completions: %d %+v", n, wc[:2])
	}
	_ = qp.PostRecv(&RecvWR{WRID: 50})
	tq.Fatal(EventQPFatal, errors.New("boom"))
	if g := <-f.disconnect; g {
		t.Fatal("Fatal asked for a graceful disconnect")
	}
	if qp.State() != QPError || tq.NextSend() != nil {
		t.Fatal("state after Fatal")
	}
	if n, _ := cq.Poll(wc[:]); n != 0 {
		t.Fatal("flushed before TransportDone")
	}
	tq.TransportDone(nil)
	n, _ := cq.Poll(wc[:])
	if n != 3 || wc[0].WRID != 2 || wc[0].Status != StatusWRFlushErr || wc[2].WRID != 50 || wc[2].Opcode != WCRecv {
		t.Fatalf("flush: %d %+v", n, wc[:n])
	}
	// posting in Error completes at once with a flush status
	_ = qp.PostSend(&SendWR{WRID: 9, Opcode: OpWrite})
	if n, _ := cq.Poll(wc[:]); n != 1 || wc[0].Status != StatusWRFlushErr || wc[0].Opcode != WCWrite {
		t.Fatalf("post in Error: %+v", wc[0])
	}
	ev := <-d.Events()
	if ev.Type != EventCommEstablished {
		t.Fatal(ev)
	}
	if ev = <-d.Events(); ev.Type != EventQPFatal || ev.Err == nil || ev.QP != qp {
		t.Fatal(ev)
	}
	_ = qp.Destroy()
	if d.QPByNum(qp.Num()) != nil {
		t.Fatal("destroyed QP still in the table")
	}
}

func TestCQOverflowAndArm(t *testing.T) {
	d, pd, _ := setup(t)
	cq, _ := d.CreateCQ(2)
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxRecvWR: 4}})
	fired := 0
	cq.SetHandler(func(*CQ) { fired++ })
	cq.Arm(false)
	for i := 0; i < 3; i++ {
		_ = qp.PostRecv(&RecvWR{WRID: uint64(i)})
	}
	_ = qp.Destroy() // flushes 3 receives into a CQ of 2
	if fired != 1 {
		t.Fatalf("handler fired %d times", fired)
	}
	select {
	case <-cq.C():
	default:
		t.Fatal("channel not signalled")
	}
	var wc [4]Completion
	n, err := cq.Poll(wc[:])
	if n != 2 || !errors.Is(err, ErrCQOverflow) {
		t.Fatalf("poll after overflow: %d %v", n, err)
	}
	tm := time.After(5 * time.Second)
	for {
		select {
		case e := <-d.Events():
			if e.Type == EventCQErr && e.CQ == cq {
				return
			}
		case <-tm:
			t.Fatal("no CQ error event")
		}
	}
}

func TestSRQLimit(t *testing.T) {
	d, pd, cq := setup(t)
	srq, _ := d.CreateSRQ(pd, SRQAttr{MaxWR: 4, MaxSGE: 1, Limit: 2})
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq})
	if qp.PostRecv(&RecvWR{}) != ErrInvalidArg {
		t.Fatal("post recv to a QP with an SRQ")
	}
	for i := 0; i < 3; i++ {
		_ = srq.PostRecv(&RecvWR{WRID: uint64(i)})
	}
	tq := &TransportQP{q: qp} // no transport: the SPI calls alone
	w, st := tq.TakeRecv()
	if w == nil || st != StatusSuccess || w.WRID != 0 {
		t.Fatal("take")
	}
	select {
	case e := <-d.Events():
		t.Fatalf("early event %v", e)
	case <-time.After(20 * time.Millisecond):
	}
	tq.TakeRecv()
	if e := <-d.Events(); e.Type != EventSRQLimitReached || e.SRQ != srq {
		t.Fatal(e)
	}
	tq.CompleteRecv(w, RecvResult{ByteLen: 3, Opcode: WCRecv})
	var wc [2]Completion
	if n, _ := cq.Poll(wc[:]); n != 1 || !wc[0].SRQ || wc[0].ByteLen != 3 {
		t.Fatalf("%+v", wc[0])
	}
}

func TestStrings(t *testing.T) {
	if StatusRemAccessErr.String() != "RemAccessErr" || QPRTS.String() != "RTS" || OpRead.String() != "Read" ||
		WCRecvRDMAWithImm.String() != "RecvRDMAWithImm" || EventCQErr.String() != "CQErr" || Status(200).String() == "" {
		t.Fatal("names")
	}
}

// TestDataPathNoAlloc: posting, taking, completing and polling do not allocate.
func TestDataPathNoAlloc(t *testing.T) {
	d, pd, cq := setup(t)
	qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	tq, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
	_ = tq.Established()
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, AccessLocalWrite)
	wr := &SendWR{Opcode: OpSend, Flags: Signaled, SGL: []SGE{mr.SGE(0, 64)}}
	rwr := &RecvWR{SGL: []SGE{mr.SGE(0, 64)}}
	var wc [4]Completion
	allocs := testing.AllocsPerRun(200, func() {
		_ = qp.PostSend(wr)
		w := tq.NextSend()
		tq.CompleteSend(w, StatusSuccess)
		_ = qp.PostRecv(rwr)
		r, _ := tq.TakeRecv()
		tq.CompleteRecv(r, RecvResult{Opcode: WCRecv, ByteLen: 64})
		if n, _ := cq.Poll(wc[:]); n != 2 {
			t.Fatal("poll", n)
		}
	})
	tq.TransportDone(nil)
	if allocs != 0 {
		t.Fatalf("data path allocates %v per op", allocs)
	}
}

// TestCQOverflowMovesQPsToError: the QP whose completion overflows a CQ, and each QP that
// later has a completion for that CQ, go to Error with EventQPFatal (ErrCQOverflow); a QP
// with nothing more to complete keeps its state. The CQ gets one EventCQErr.
func TestCQOverflowMovesQPsToError(t *testing.T) {
	d, pd, _ := setup(t)
	cq, _ := d.CreateCQ(1)
	other, _ := d.CreateCQ(8)
	mk := func() (*TransportQP, *fakeT) {
		qp, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: other, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeT{disconnect: make(chan bool, 4)}
		tq, _ := AttachTransport(qp, f)
		_ = tq.Established()
		return tq, f
	}
	a, fa := mk()
	b, fb := mk()
	c, _ := mk()
	send := func(qp *TransportQP) {
		t.Helper()
		if err := qp.q.PostSend(&SendWR{Opcode: OpSend, Flags: Signaled}); err != nil {
			t.Fatal(err)
		}
		qp.CompleteSend(qp.NextSend(), StatusSuccess)
	}
	send(a) // fills the CQ
	if a.q.State() != QPRTS {
		t.Fatal("QP left RTS before the overflow")
	}
	send(a) // overflows it
	if a.q.State() != QPError {
		t.Fatalf("overflowing QP in %v", a.q.State())
	}
	if graceful := <-fa.disconnect; graceful {
		t.Fatal("graceful disconnect after an overflow")
	}
	if b.q.State() != QPRTS || c.q.State() != QPRTS {
		t.Fatal("QPs without completions changed state")
	}
	var wc [4]Completion
	if n, err := cq.Poll(wc[:]); n != 1 || !errors.Is(err, ErrCQOverflow) {
		t.Fatalf("poll: %d %v", n, err)
	}
	send(b) // room again, but the CQ stays in error
	if b.q.State() != QPError {
		t.Fatalf("QP completing into a CQ in error is in %v", b.q.State())
	}
	<-fb.disconnect
	if c.q.State() != QPRTS {
		t.Fatal("idle QP changed state")
	}
	var cqErr, fatal int
	tm := time.After(5 * time.Second)
	for cqErr != 1 || fatal != 2 {
		select {
		case e := <-d.Events():
			switch {
			case e.Type == EventCQErr && e.CQ == cq:
				cqErr++
			case e.Type == EventQPFatal && errors.Is(e.Err, ErrCQOverflow):
				if e.QP != a.q && e.QP != b.q {
					t.Fatalf("fatal event for QP %d", e.QP.Num())
				}
				fatal++
			}
		case <-tm:
			t.Fatalf("events: %d CQ errors, %d QP fatal", cqErr, fatal)
		}
	}
	for _, qp := range []*TransportQP{a, b, c} {
		qp.TransportDone(nil)
	}
}

// TestDoneAfterCompletionsDelivered: when Done is closed, the CQ handler has already been
// handed every flushed completion (consumers such as dat post DISCONNECTED on Done and
// must find the flushes ahead of it).
func TestDoneAfterCompletionsDelivered(t *testing.T) {
	for i := 0; i < 200; i++ {
		d, pd, _ := setup(t)
		cq, _ := d.CreateCQ(64)
		var mu sync.Mutex
		seen := 0
		cq.SetHandler(func(cq *CQ) {
			var wc [8]Completion
			for {
				n, _ := cq.Poll(wc[:])
				mu.Lock()
				seen += n
				mu.Unlock()
				if n < len(wc) {
					return
				}
			}
		})
		qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
		for j := 0; j < 10; j++ {
			_ = qp.PostRecv(&RecvWR{WRID: uint64(j)})
		}
		tq, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
		go tq.TransportDone(nil)
		<-qp.Done()
		mu.Lock()
		got := seen
		mu.Unlock()
		if got != 10 {
			t.Fatalf("run %d: Done closed with %d of 10 flushed completions delivered", i, got)
		}
	}
}

// TestEventsBounded: with nobody reading Events, a device keeps at most MaxEvents events
// (and so at most that many destroyed QPs alive through them); the rest are counted.
func TestEventsBounded(t *testing.T) {
	d, err := Open(Config{MaxEvents: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	for i := 0; i < 20; i++ {
		qp, _ := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
		tq, _ := AttachTransport(qp, &fakeT{disconnect: make(chan bool, 1)})
		_ = tq.Established()  // CommEstablished
		tq.TransportDone(nil) // Disconnected
		_ = qp.Destroy()
	}
	// the event goroutine holds one event while it waits for a reader
	d.evMu.Lock()
	queued := len(d.evQ)
	d.evMu.Unlock()
	if queued > 8 || d.EventsDropped() < 40-8-1 {
		t.Fatalf("%d events queued, %d dropped", queued, d.EventsDropped())
	}
	// the newest survive, in order: every event posted (40) and not dropped — the queued
	// ones and the one the event goroutine may already hold
	var last AsyncEvent
	want := 40 - int(d.EventsDropped())
	for i := 0; i < want; i++ {
		select {
		case last = <-d.Events():
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d events delivered", i, want)
		}
	}
	select {
	case e := <-d.Events():
		t.Fatalf("an event beyond the %d kept: %v", want, e)
	default:
	}
	if last.Type != EventDisconnected {
		t.Fatalf("last event %v", last)
	}
}
