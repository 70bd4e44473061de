package rnic

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// QPCap are the capabilities of a queue pair.
type QPCap struct {
	MaxSendWR  int // send queue depth (default 128)
	MaxRecvWR  int // receive queue depth (default 128; ignored with an SRQ)
	MaxSendSGE int // SGEs per send WR (default 4)
	MaxRecvSGE int // SGEs per receive WR (default 4)
	MaxInline  int // inline bytes per send WR (default 64)
}

// QPAttr configures a reliable-connected queue pair.
type QPAttr struct {
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ // receives come from the SRQ instead of the QP's own RQ
	Cap            QPCap
	SignalAll      bool // every send WR completes, as if Signaled were set
	Context        any  // caller data, returned by QP.Context
}

// QPTransport is what the engine calls on the transport bound to a QP (see the package
// documentation for the whole SPI). Both methods must return promptly and may be called
// from any goroutine, concurrently with the transport's own goroutines.
type QPTransport interface {
	// SendQueued reports that new work is on the send queue ([TransportQP.NextSend] will return it).
	SendQueued()
	// Disconnect closes the connection: gracefully (finish queued sends, then close the
	// LLP) or abortively. The transport must eventually call TransportQP.TransportDone, after its
	// goroutines stopped touching work-request memory.
	Disconnect(graceful bool)
}

// A QPTransport may also name its network with a method Network() string ("iwarp",
// "rocev2"), which QP.Transport reports.

// SendWQE is a posted send work request as the engine lends it to the transport between
// [TransportQP.NextSend] and [TransportQP.CompleteSend]. SGL, Segs and Inline data stay valid until then.
type SendWQE struct {
	SendWR
	Segs    Segs   // SGL resolved to memory (or the inline copy) by NextSend
	Len     uint64 // total payload length
	Scratch [4]uint64

	sgl    []SGE
	inline []byte
	done   bool
	status Status
	seq    uint64 // post sequence number
	qp     *QP    // the QP it is posted on (WQEs are pooled across QPs)
}

// sendWQEs pools send WQEs across the QPs of the process: a WQE is taken at post time
// and given back when it retires, so a QP's send queue costs memory for the work in
// flight only, whatever its depth (MaxSendWR bounds the work, not the memory).
var sendWQEs = sync.Pool{New: func() any { return new(SendWQE) }}

// getSendWQE takes a WQE from the pool.
func getSendWQE() *SendWQE { return sendWQEs.Get().(*SendWQE) }

// putSendWQE gives a retired WQE back, dropping its references to the application's
// memory and objects; its slices keep their capacity for the next post.
func putSendWQE(w *SendWQE) {
	clear(w.Segs)
	sgl, segs, inl := w.sgl[:0], w.Segs[:0], w.inline[:0]
	*w = SendWQE{sgl: sgl, inline: inl}
	w.Segs = segs
	sendWQEs.Put(w)
}

// QP is a reliable-connected queue pair.
type QP struct {
	dev  *Device
	pd   *PD
	num  uint32
	attr QPAttr

	mu        sync.Mutex
	state     qpState // written under mu; TransportQP.InError reads it without
	t         QPTransport
	tDone     bool
	destroyed bool
	doneCh    chan struct{}
	lastErr   error

	sq                   []*SendWQE // ring of the posted WQEs sqHead..sqTl, indexed seq % len
	sqHead, sqNext, sqTl uint64

	rq    recvQueue
	taken []*RecvWQE

	counters Counters
	drive    *qpDrive // DriveReceive's state, made at its first call
}

// CreateQP creates an RC queue pair in the Idle state.
func (d *Device) CreateQP(pd *PD, attr QPAttr) (*QP, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if pd == nil || pd.dev != d || attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, ErrInvalidArg
	}
	c := &attr.Cap
	def := func(v *int, dv, max int) error {
		if *v == 0 {
			*v = dv
		}
		if *v < 0 || *v > max {
			return ErrInvalidArg
		}
		return nil
	}
	for _, e := range []error{def(&c.MaxSendWR, 128, d.cfg.MaxQPWR), def(&c.MaxRecvWR, 128, d.cfg.MaxQPWR),
		def(&c.MaxSendSGE, 4, d.cfg.MaxSGE), def(&c.MaxRecvSGE, 4, d.cfg.MaxSGE), def(&c.MaxInline, 64, d.cfg.MaxInline)} {
		if e != nil {
			return nil, e
		}
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 1
	}
	q := &QP{dev: d, pd: pd, attr: attr, doneCh: make(chan struct{})}
	if attr.SRQ == nil {
		if c.MaxRecvWR == 0 {
			c.MaxRecvWR = 1
		}
		q.rq = newRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	if a := d.cfg.QPNumbers; a != nil {
		if err := d.externalQPN(q, a); err != nil {
			return nil, err
		}
		q.created()
		return q, nil
	}
	d.qpMu.Lock()
	if len(d.qps) >= d.cfg.MaxQP {
		d.qpMu.Unlock()
		return nil, ErrResource
	}
	for {
		if d.nextQP > MaxQPN { // wrap within the 24-bit space
			d.nextQP -= MaxQPN - FirstQPN + 1
		}
		if d.nextQP < FirstQPN {
			d.nextQP = FirstQPN
		}
		if d.qps[d.nextQP] == nil {
			break
		}
		d.nextQP++
	}
	q.num = d.nextQP
	if d.qpRand != nil {
		d.nextQP += 1 + d.qpRand.Uint32N(QPNStride)
	} else {
		d.nextQP++
	}
	d.qps[q.num] = q
	d.qpMu.Unlock()
	q.created()
	return q, nil
}

// created counts a new QP on its PD and CQs.
func (q *QP) created() {
	q.pd.n.Add(1)
	q.attr.SendCQ.bindQP(q)
	q.attr.RecvCQ.bindQP(q)
}

// QP numbers are 24 bits (the BTH DestQP field, IBTA Vol.1 §9.2). QP0 is
// the SMI and QP1 the GSI QP (management datagrams, among them the CM's;
// IBTA Vol.1 chapter 13), so data QPs are numbered FirstQPN..MaxQPN.
//
// Numbers are allocated from a random start in strides of 1..QPNStride unless
// Config.StartQPN asks for sequential numbering; a number is reused only after the
// allocation has gone round the whole space.
const (
	FirstQPN  = 2
	MaxQPN    = 1<<24 - 1
	QPNStride = 32
)

// Num returns the QP number, in FirstQPN..MaxQPN.
func (q *QP) Num() uint32 { return q.num }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// Device returns the owning device.
func (q *QP) Device() *Device { return q.dev }

// Attr returns the attributes the QP was created with (defaults applied).
func (q *QP) Attr() QPAttr { return q.attr }

// Context returns QPAttr.Context.
func (q *QP) Context() any { return q.attr.Context }

// State returns the current state.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state.get()
}

// qpState is a QP's state: written under the QP's lock and read under it, or without it
// where a transport asks per packet (TransportQP.InError).
type qpState struct{ v atomic.Uint32 }

func (s *qpState) get() QPState  { return QPState(s.v.Load()) }
func (s *qpState) set(v QPState) { s.v.Store(uint32(v)) }

// Transport names the wire protocol the QP is attached to: "iwarp", "rocev2", or ""
// before a transport attached (or for one that does not say, see QPTransport).
func (q *QP) Transport() string {
	q.mu.Lock()
	t := q.t
	q.mu.Unlock()
	if n, ok := t.(interface{ Network() string }); ok {
		return n.Network()
	}
	return ""
}

// Err returns the error that moved the QP to Error, if any (e.g. a Terminate error).
func (q *QP) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lastErr
}

// Counters returns the QP's traffic counters.
func (q *QP) Counters() *Counters { return &q.counters }

// Done is closed once the QP is in Error and its work has been flushed: every completion of
// the QP has been pushed to its CQs and handed to their handlers ([CQ.SetHandler]) first.
func (q *QP) Done() <-chan struct{} { return q.doneCh }

// PostSend posts a send work request. It fails with ErrQPState unless the QP is in RTS
// (or Terminate/Error, where the WR completes with StatusWRFlushErr).
func (q *QP) PostSend(wr *SendWR) error {
	c := &q.attr.Cap
	if len(wr.SGL) > c.MaxSendSGE {
		return ErrTooManySGE
	}
	q.mu.Lock()
	switch q.state.get() {
	case QPRTS, QPTerminate, QPError:
	default:
		q.mu.Unlock()
		return ErrQPState
	}
	used := q.sqTl - q.sqHead
	if used == uint64(c.MaxSendWR) {
		q.mu.Unlock()
		return ErrQueueFull
	}
	if used == uint64(len(q.sq)) {
		q.growSQ()
	}
	w := getSendWQE()
	sgl, inl := w.sgl, w.inline
	w.SendWR = *wr
	w.sgl = append(sgl[:0], wr.SGL...)
	w.SGL = w.sgl
	w.inline = inl[:0]
	w.seq = q.sqTl
	w.qp = q
	if q.attr.SignalAll {
		w.Flags |= Signaled
	}
	if wr.Flags&Inline != 0 {
		var n uint64
		for _, s := range wr.SGL {
			n += uint64(s.Length)
		}
		if n > uint64(c.MaxInline) {
			q.mu.Unlock()
			putSendWQE(w)
			return ErrInlineTooLong
		}
		for _, s := range wr.SGL {
			b, err := q.pd.resolveLocal(s, false)
			if err != nil {
				q.mu.Unlock()
				putSendWQE(w)
				return err
			}
			w.inline = append(w.inline, b...)
		}
	}
	q.sq[q.sqTl%uint64(len(q.sq))] = w
	q.sqTl++
	st, t := q.state.get(), q.t
	flushNow := st == QPError && q.tDone
	var fs, fr bool
	if flushNow || (st == QPError && t == nil) {
		fs, fr = q.flushLocked()
	}
	q.mu.Unlock()
	q.fireCQs(fs, fr)
	if st == QPRTS && t != nil {
		t.SendQueued()
	}
	return nil
}

// growSQ doubles the send ring (from 4, up to MaxSendWR), keeping every posted WQE at
// its sequence number. The caller holds mu.
func (q *QP) growSQ() {
	n := uint64(min(max(2*len(q.sq), 4), q.attr.Cap.MaxSendWR))
	sq := make([]*SendWQE, n)
	for s := q.sqHead; s != q.sqTl; s++ {
		sq[s%n] = q.sq[s%uint64(len(q.sq))]
	}
	q.sq = sq
}

// PostRecv posts a receive buffer on the QP's own receive queue (ErrInvalidArg with an SRQ).
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.attr.SRQ != nil {
		return ErrInvalidArg
	}
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return ErrQPState
	}
	err := q.rq.post(wr)
	var fs, fr bool
	if err == nil && q.state.get() == QPError && (q.tDone || q.t == nil) {
		fs, fr = q.flushLocked()
	}
	q.mu.Unlock()
	q.fireCQs(fs, fr)
	return err
}

// Disconnect starts a graceful disconnect (RTS → Closing): queued sends are finished,
// then the connection is closed and the QP moves to Error, flushing receives. An Idle QP
// moves straight to Error.
func (q *QP) Disconnect() {
	q.mu.Lock()
	switch q.state.get() {
	case QPRTS:
		q.state.set(QPClosing)
		t := q.t
		q.mu.Unlock()
		t.Disconnect(true)
		return
	case QPIdle:
		q.mu.Unlock()
		q.fatal(EventDisconnected, nil)
		return
	}
	q.mu.Unlock()
}

// Destroy aborts the connection if any, flushes all work, waits until the transport let go
// of the QP, and removes it from the device.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		<-q.doneCh
		return nil
	}
	q.destroyed = true
	if q.drive != nil {
		q.drive.kick.stop() // a long-lived context must not keep the transport
	}
	q.mu.Unlock()
	q.abort(EventQPFatal, nil, false)
	<-q.doneCh
	q.dev.qpMu.Lock()
	delete(q.dev.qps, q.num)
	q.dev.qpMu.Unlock()
	if a := q.dev.cfg.QPNumbers; a != nil {
		a.FreeQPN(q.num)
	}
	q.pd.n.Add(-1)
	q.attr.SendCQ.unbindQP(q)
	q.attr.RecvCQ.unbindQP(q)
	return nil
}

// externalQPN numbers q from a (Config.QPNumbers) and registers it.
func (d *Device) externalQPN(q *QP, a QPNAllocator) error {
	d.qpMu.Lock()
	full := len(d.qps) >= d.cfg.MaxQP
	d.qpMu.Unlock()
	if full {
		return ErrResource
	}
	n, err := a.AllocQPN()
	if err != nil {
		return fmt.Errorf("rnic: QP number: %w", err)
	}
	d.qpMu.Lock()
	if n < FirstQPN || n > MaxQPN || d.qps[n] != nil {
		d.qpMu.Unlock()
		a.FreeQPN(n)
		return fmt.Errorf("rnic: QP number %d from the allocator: %w", n, ErrInvalidArg)
	}
	q.num = n
	d.qps[n] = q
	d.qpMu.Unlock()
	return nil
}

// ---- the engine side of the transport SPI (spi.go exports it on TransportQP) ----

// attach binds a transport to an Idle QP.
func (q *QP) attach(t QPTransport) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.t != nil {
		return ErrAttached
	}
	if q.state.get() != QPIdle || q.destroyed {
		return ErrQPState
	}
	q.t = t
	return nil
}

// established moves an attached Idle QP to RTS and posts EventCommEstablished.
func (q *QP) established() error {
	q.mu.Lock()
	if q.state.get() != QPIdle || q.t == nil {
		q.mu.Unlock()
		return ErrQPState
	}
	q.state.set(QPRTS)
	t, pending := q.t, q.sqTl != q.sqNext
	q.mu.Unlock()
	q.dev.postEvent(AsyncEvent{Type: EventCommEstablished, QP: q})
	if pending {
		t.SendQueued()
	}
	return nil
}

// enterTerminate moves the QP to Terminate (RFC 5040 §5): the transport found a protocol
// error and is sending a Terminate message. It is followed by Fatal.
func (q *QP) enterTerminate() {
	q.mu.Lock()
	if st := q.state.get(); st == QPRTS || st == QPClosing {
		q.state.set(QPTerminate)
	}
	q.mu.Unlock()
}

// fatal moves the QP to Error because of err (posting an async event of type ev unless
// the QP was already in Error) and asks the transport to abort. Work is flushed when the
// transport calls TransportDone (at once if no transport is attached).
func (q *QP) fatal(ev EventType, err error) { q.abort(ev, err, true) }

func (q *QP) abort(ev EventType, err error, post bool) {
	q.mu.Lock()
	was := q.state.get()
	if was != QPError {
		q.state.set(QPError)
		if q.lastErr == nil {
			q.lastErr = err
		}
	}
	t, done := q.t, q.tDone
	finish := t == nil && !done
	if finish {
		q.tDone = true
		q.flushLocked()
	}
	q.mu.Unlock()
	if finish {
		q.deliverAndClose()
	}
	if was != QPError && post {
		q.dev.postEvent(AsyncEvent{Type: ev, QP: q, Err: err})
		if q.attr.SRQ != nil {
			q.dev.postEvent(AsyncEvent{Type: EventQPLastWQEReached, QP: q})
		}
	}
	if t != nil && !done {
		t.Disconnect(false)
	}
}

// transportDone is called by the transport once its goroutines have stopped and it no
// longer touches work-request memory. The QP moves to Error and all unfinished work is
// flushed with StatusWRFlushErr. err (may be nil) is the reason; if the QP was not already
// in Error, EventDisconnected is posted with it.
func (q *QP) transportDone(err error) {
	q.mu.Lock()
	if q.tDone {
		q.mu.Unlock()
		return
	}
	was := q.state.get()
	q.state.set(QPError)
	if q.lastErr == nil {
		q.lastErr = err
	}
	q.tDone = true
	q.flushLocked()
	q.mu.Unlock()
	q.deliverAndClose()
	if was != QPError {
		q.dev.postEvent(AsyncEvent{Type: EventDisconnected, QP: q, Err: err})
	}
}

// deliverAndClose runs the QP's CQ handlers, then closes Done. The handlers poll what the
// flush pushed and anything a transport goroutine pushed just before (a handler that is
// already draining finishes first: consumers serialize their drains), so by the time Done
// is closed and EventDisconnected is posted every completion of the QP has been handed to
// its consumer: successful and flushed completions precede the disconnect (uDAPL 2.0
// §6.6.17, which requires it for successful completions sharing an EVD with the
// connection events).
func (q *QP) deliverAndClose() {
	q.fireCQs(true, true)
	close(q.doneCh)
}

// nextSend returns the next send WQE in post order with its SGL resolved, or nil when none
// is waiting or the QP is not in RTS/Closing. A WQE whose SGL fails the local checks is
// completed with StatusLocProtErr (or StatusLocLenErr) here, the QP is moved to Error, and
// nil is returned.
func (q *QP) nextSend() *SendWQE {
	q.mu.Lock()
	if st := q.state.get(); (st != QPRTS && st != QPClosing) || q.sqNext == q.sqTl {
		q.mu.Unlock()
		return nil
	}
	w := q.sq[q.sqNext%uint64(len(q.sq))]
	q.sqNext++
	q.mu.Unlock()
	if st := q.resolveSend(w); st != StatusSuccess {
		q.completeSend(w, st)
		q.fatal(EventQPFatal, AccessErrInvalidSTag)
		return nil
	}
	return w
}

// sendPending reports whether NextSend has work waiting.
func (q *QP) sendPending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sqNext != q.sqTl
}

func (q *QP) resolveSend(w *SendWQE) Status {
	w.Segs = w.Segs[:0]
	w.Len = 0
	switch w.Opcode {
	case OpLocalInv, OpRegMR, OpBindMW:
		return StatusSuccess
	}
	if w.Flags&Inline != 0 && w.Opcode != OpRead {
		w.Segs = append(w.Segs, w.inline)
		w.Len = uint64(len(w.inline))
		return StatusSuccess
	}
	write := w.Opcode == OpRead || w.Opcode == OpAtomicCmpSwap || w.Opcode == OpAtomicFetchAdd
	for _, s := range w.SGL {
		b, err := q.pd.resolveLocal(s, write)
		if err != nil {
			return StatusLocProtErr
		}
		w.Segs = append(w.Segs, b)
		w.Len += uint64(len(b))
	}
	if (w.Opcode == OpAtomicCmpSwap || w.Opcode == OpAtomicFetchAdd) && (len(w.Segs) != 1 || w.Len != 8) {
		return StatusLocLenErr
	}
	return StatusSuccess
}

// isOldest reports whether w is the oldest unfinished send WQE (every WQE posted before it
// has completed): the condition for a LocalFence.
func (q *QP) isOldest(w *SendWQE) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sqHead != q.sqTl && q.sq[q.sqHead%uint64(len(q.sq))] == w
}

// completeSend finishes a send WQE taken with NextSend. Completions are generated in post
// order, for signaled WRs and for every error. It does not change the QP state: on an
// error the transport also calls Fatal. Completing a WQE twice, or after it was flushed,
// is ignored.
func (q *QP) completeSend(w *SendWQE, st Status) {
	q.mu.Lock()
	if w.qp != q || w.done || w.seq < q.sqHead || w.seq >= q.sqNext {
		q.mu.Unlock() // already completed or flushed: ignore
		return
	}
	w.done = true
	w.status = st
	fs, lost := q.retireLocked(false)
	q.mu.Unlock()
	q.fireCQs(fs, false)
	if lost {
		q.fatal(EventQPFatal, ErrCQOverflow)
	}
}

// retireLocked completes finished send WQEs in post order (all of them, flushed, when
// flush); lost reports a completion the send CQ dropped because it is in error.
func (q *QP) retireLocked(flush bool) (fire, lost bool) {
	n := uint64(len(q.sq))
	for q.sqHead != q.sqTl {
		i := q.sqHead % n
		w := q.sq[i]
		if !w.done {
			if !flush {
				break
			}
			w.status = StatusWRFlushErr
		}
		if w.status != StatusSuccess || w.Flags&Signaled != 0 {
			c := Completion{WRID: w.WRID, Status: w.status, Opcode: w.Opcode.WCOpcode(), QPNum: q.num}
			if w.status == StatusSuccess {
				c.ByteLen = uint32(w.Len)
			}
			f, l := q.attr.SendCQ.push(&c)
			fire, lost = fire || f, lost || l
		}
		q.sq[i] = nil
		putSendWQE(w)
		q.sqHead++
	}
	if flush {
		q.sqNext = q.sqTl
	}
	return fire, lost
}

// flushLocked flushes all unfinished work (the QP is in Error, so completions a CQ in
// error drops need no further action).
func (q *QP) flushLocked() (fs, fr bool) {
	fs, _ = q.retireLocked(true)
	for _, w := range q.taken {
		c := Completion{WRID: w.WRID, Status: StatusWRFlushErr, Opcode: WCRecv, QPNum: q.num, SRQ: w.srq != nil}
		if f, _ := q.attr.RecvCQ.push(&c); f {
			fr = true
		}
		q.releaseRecv(w)
	}
	q.taken = q.taken[:0]
	if q.attr.SRQ == nil {
		for w := q.rq.take(); w != nil; w = q.rq.take() {
			c := Completion{WRID: w.WRID, Status: StatusWRFlushErr, Opcode: WCRecv, QPNum: q.num}
			if f, _ := q.attr.RecvCQ.push(&c); f {
				fr = true
			}
			q.rq.release(w)
		}
	}
	return
}

func (q *QP) fireCQs(fs, fr bool) {
	if fs {
		q.attr.SendCQ.fire()
	}
	if fr && (!fs || q.attr.RecvCQ != q.attr.SendCQ) {
		q.attr.RecvCQ.fire()
	}
}

func (q *QP) releaseRecv(w *RecvWQE) {
	if w.srq != nil {
		w.srq.release(w)
		w.srq = nil
		return
	}
	q.rq.release(w)
}

// takeRecv consumes the next receive WQE from the QP's RQ or its SRQ and resolves its SGL
// for writing. It returns nil, StatusSuccess when no receive is posted (for iWARP a
// Terminate, RFC 5041 §7.2 "no buffer"; for RoCE an RNR NAK), and the WQE with
// StatusLocProtErr if its SGL is invalid (the transport completes it with that status).
func (q *QP) takeRecv() (*RecvWQE, Status) {
	q.mu.Lock()
	if q.state.get() == QPError || q.destroyed {
		q.mu.Unlock()
		return nil, StatusWRFlushErr
	}
	var w *RecvWQE
	if q.attr.SRQ != nil {
		w = q.attr.SRQ.take()
	} else {
		w = q.rq.take()
	}
	if w == nil {
		q.mu.Unlock()
		return nil, StatusSuccess
	}
	q.taken = append(q.taken, w)
	q.mu.Unlock()
	w.Segs = w.Segs[:0]
	w.Len = 0
	for _, s := range w.SGL {
		b, err := q.pd.resolveLocal(s, true)
		if err != nil {
			return w, StatusLocProtErr
		}
		w.Segs = append(w.Segs, b)
		w.Len += uint64(len(b))
	}
	return w, StatusSuccess
}

// RecvResult describes how a receive WQE finished.
type RecvResult struct {
	Status          Status
	Opcode          WCOpcode // WCRecv or WCRecvRDMAWithImm
	Flags           WCFlags
	ByteLen         uint32
	Imm             uint32
	InvalidatedSTag uint32
}

// completeRecv completes a receive WQE taken with TakeRecv and returns it to its queue.
func (q *QP) completeRecv(w *RecvWQE, r RecvResult) {
	q.mu.Lock()
	found := false
	for i, x := range q.taken {
		if x == w {
			copy(q.taken[i:], q.taken[i+1:])
			q.taken = q.taken[:len(q.taken)-1]
			found = true
			break
		}
	}
	if !found { // already flushed
		q.mu.Unlock()
		return
	}
	c := Completion{WRID: w.WRID, Status: r.Status, Opcode: r.Opcode, Flags: r.Flags, ByteLen: r.ByteLen,
		Imm: r.Imm, InvalidatedSTag: r.InvalidatedSTag, QPNum: q.num, SRQ: w.srq != nil}
	fr, lost := q.attr.RecvCQ.push(&c)
	q.releaseRecv(w)
	q.mu.Unlock()
	q.fireCQs(false, fr)
	if lost {
		q.fatal(EventQPFatal, ErrCQOverflow)
	}
}

// execLocal performs a local operation (OpLocalInv, OpRegMR, OpBindMW) and returns its
// status; the transport calls it when the WQE's turn comes and then CompleteSend.
func (q *QP) execLocal(w *SendWQE) Status {
	switch w.Opcode {
	case OpLocalInv:
		if q.pd.invalidate(nil, w.InvalidateSTag) != nil {
			return StatusLocProtErr
		}
		return StatusSuccess
	case OpRegMR:
		return q.pd.fastReg(&w.Reg)
	case OpBindMW:
		return q.pd.bindMW(q, &w.Bind)
	}
	return StatusLocQPOpErr
}
