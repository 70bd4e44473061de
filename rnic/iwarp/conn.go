package iwarp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// Conn is one established iWARP connection bound to a QP; it is the QP's transport.
type Conn struct {
	qp        *rnic.TransportQP // set by attach
	uqp       *rnic.QP          // the QP to attach to
	nc        net.Conn
	cfg       Config
	params    mpa.Params
	initiator bool
	peerPD    []byte
	procKey   string // responder: this connection's key in inProc
	mulpdu    int
	ird, ord  int
	ext       bool

	rd *mpa.Reader // FPDUs in (RFC 5044 §4): readv straight into registered memory
	wr *mpa.Writer // FPDUs out, batched into vectored writes

	kick     chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
	running  atomic.Int32
	done     chan struct{}
	timer    *time.Timer

	mu       sync.Mutex
	cond     chan struct{} // closed when the responder may transmit (first FPDU received)
	condOnce sync.Once
	orq      ring[orqEntry]
	irq      ring[irqEntry]
	irqBusy  int    // responses taken from irq whose last FPDU is not yet written
	term     []byte // pending Terminate ULPDU (after the MPA length), built by the receiver
	termErr  rdmap.TerminateError
	termSend bool
	closing  bool
	rxEOF    bool
	err      error

	// sender state, guarded by txMu (held by the sender goroutine or the fast path)
	txMu     sync.Mutex
	ready    atomic.Bool // gate passed and RTR sent: the fast path may run
	txDone   bool
	lastFast int64           // time of the last fast-path attempt (UnixNano)
	sent     []*rnic.SendWQE // written into the batch: complete after the flush
	txMSN    [4]uint32
	hdr      [96]byte
	pieces   [][]byte
	held     *rnic.SendWQE
	reqID    uint32

	// receiver-owned
	rxMSN     [4]uint32
	rxPieces  [][]byte
	rh        [128]byte
	cur       *rnic.RecvWQE
	curGot    uint64
	tagged    ddp.TaggedStream
	rtrExpect bool
	lastWrite bool
}

type orqKind uint8

const (
	orqRead orqKind = iota
	orqAtomic
	orqRTR
)

type orqEntry struct {
	kind     orqKind
	w        *rnic.SendWQE
	sinkSTag uint32
	sinkTO   uint64
	size     uint64
	got      uint64
	reqID    uint32
	msn      uint32 // QN 1 MSN of the request
}

type irqEntry struct {
	atomic   bool
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
	reqID    uint32
	orig     uint64
}

// ring is a fixed-capacity FIFO.
type ring[T any] struct {
	buf     []T
	head, n int
}

func newRing[T any](n int) ring[T] { return ring[T]{buf: make([]T, max(n, 1))} }
func (r *ring[T]) full() bool      { return r.n == len(r.buf) }
func (r *ring[T]) push(v T) bool {
	if r.full() {
		return false
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
	return true
}
func (r *ring[T]) front() *T { return &r.buf[r.head] }
func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var z T
	r.buf[r.head] = z
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

func newConn(qp *rnic.QP, nc net.Conn, cfg Config, p mpa.Params, initiator bool, peerPD []byte) *Conn {
	c := &Conn{uqp: qp, nc: nc, cfg: cfg, params: p, initiator: initiator, peerPD: peerPD,
		ext: cfg.Extensions, kick: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{}), cond: make(chan struct{})}
	c.ird, c.ord = int(p.IRD), int(p.ORD)
	if c.ird > qp.Device().Config().MaxIRD {
		c.ird = qp.Device().Config().MaxIRD
	}
	if c.ord > qp.Device().Config().MaxORD {
		c.ord = qp.Device().Config().MaxORD
	}
	if cfg.testORD > 0 {
		c.ord = cfg.testORD
	}
	c.orq = newRing[orqEntry](c.ord + 1)
	c.irq = newRing[irqEntry](c.ird + 1)
	c.mulpdu = cfg.MULPDU
	if c.mulpdu <= 0 {
		c.mulpdu = mpa.MULPDU(tcpMSS(nc), p.TxMarkers)
		if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok && ta.IP.IsLoopback() && !p.TxMarkers {
			// Loopback has no wire segments to align to (RFC 5044 §4.5 is a SHOULD):
			// use the largest FPDU with 4-byte aligned payload.
			c.mulpdu = mpa.MaxULPDU - 3
		}
	}
	c.mulpdu = max(min(c.mulpdu, mpa.MaxULPDU), mpa.MinMULPDU)
	rx := p.RxFraming()
	rx.ReadBuffer = rxReadBuffer
	c.rd = mpa.NewReader(rxStream(nc), rx)
	c.wr = mpa.NewWriter(nc, p.TxFraming())
	c.pieces = make([][]byte, 0, 32)
	c.rxPieces = make([][]byte, 0, 32)
	c.sent = make([]*rnic.SendWQE, 0, 64)
	for i := range c.txMSN {
		c.txMSN[i] = 1
		c.rxMSN[i] = 1
	}
	c.rtrExpect = !initiator && p.P2P
	if initiator {
		c.openGate()
	}
	return c
}

// attach binds c to its QP as the QP's transport.
func (c *Conn) attach() error {
	tq, err := rnic.AttachTransport(c.uqp, c)
	if err != nil {
		return err
	}
	c.qp = tq
	return nil
}

// start attaches c to the QP and runs its goroutines.
func (c *Conn) start() error {
	if err := c.attach(); err != nil {
		return err
	}
	c.running.Store(2)
	go c.sendLoop()
	go c.recvLoop()
	return c.qp.Established()
}

// QP returns the bound queue pair.
func (c *Conn) QP() *rnic.QP { return c.uqp }

// Params returns the negotiated MPA parameters.
func (c *Conn) Params() mpa.Params { return c.params }

// PeerPrivateData returns the private data the peer sent (Reply for the initiator,
// Request for the responder).
func (c *Conn) PeerPrivateData() []byte { return c.peerPD }

// MULPDU returns the largest ULPDU this side sends.
func (c *Conn) MULPDU() int { return c.mulpdu }

// IRD and ORD return the negotiated inbound and outbound Read depths.
func (c *Conn) IRD() int { return c.ird }

// ORD returns the negotiated outbound Read depth.
func (c *Conn) ORD() int { return c.ord }

// LocalAddr returns the TCP local address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the TCP remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed when both goroutines have exited and the QP was flushed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close aborts the connection and waits until the QP is flushed.
func (c *Conn) Close() error {
	c.Disconnect(false)
	<-c.done
	return nil
}

// SendQueued implements rnic.QPTransport. Small work is written by the calling goroutine
// when the sender goroutine is idle (see fastPump).
func (c *Conn) SendQueued() {
	if !c.ready.Load() || !c.txMu.TryLock() {
		c.wake()
		return
	}
	more := c.fastPump()
	c.txMu.Unlock()
	if more {
		c.wake()
	}
}

// Disconnect implements rnic.QPTransport.
func (c *Conn) Disconnect(graceful bool) {
	if !graceful {
		c.abort(true)
		return
	}
	c.mu.Lock()
	if !c.closing {
		c.closing = true
		c.timer = time.AfterFunc(c.cfg.Disconnect, func() { c.abort(true) })
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Conn) openGate() { c.condOnce.Do(func() { close(c.cond) }) }

// abort closes the socket (with RST when rst) and stops both goroutines.
func (c *Conn) abort(rst bool) {
	c.quitOnce.Do(func() {
		close(c.quit)
		if tc, ok := c.nc.(*net.TCPConn); ok && rst {
			_ = tc.SetLinger(0)
		}
		_ = c.nc.Close()
	})
}

func (c *Conn) quitting() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// exit is run by each goroutine on its way out; the last one finishes the QP.
func (c *Conn) exit() {
	if c.running.Add(-1) != 0 {
		return
	}
	c.abort(false)
	// Wait out a fast path running on a posting goroutine (its writes fail now that the
	// socket is closed) and keep it out, so no WQE is touched after the flush.
	c.txMu.Lock()
	c.txDone = true
	c.txMu.Unlock()
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	err := c.err
	c.mu.Unlock()
	if c.procKey != "" {
		inProc.Delete(c.procKey)
	}
	c.qp.TransportDone(err)
	close(c.done)
}

// fail moves the QP to Error because of an LLP or local error.
func (c *Conn) fail(ev rnic.EventType, err error) {
	if c.quitting() {
		return
	}
	c.setErr(err)
	c.qp.Fatal(ev, err)
}

// ---------------------------------------------------------------- sender

func (c *Conn) writeFPDU(hdr []byte, payload [][]byte) error {
	return c.fpdu(hdr, payload)
}

// txGather is gather into the sender's piece list.
func (c *Conn) txGather(segs [][]byte, off, n uint64) [][]byte {
	c.pieces = rnic.Segs(segs).Slices(c.pieces, off, n)
	return c.pieces
}

func (c *Conn) sendLoop() {
	defer c.exit()
	for gated := true; gated; {
		select {
		case <-c.cond:
			gated = false
		case <-c.quit:
			return
		case <-c.kick:
			select {
			case <-c.cond: // open too (select chose at random): send what is queued
				gated = false
				continue
			default:
			}
			// RFC 5044 §7.1.2: nothing may be sent before the initiator's first FPDU;
			// a disconnect or the peer's close meanwhile just closes our side.
			c.mu.Lock()
			stop := c.closing || c.rxEOF
			c.mu.Unlock()
			if stop {
				if tc, ok := c.nc.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				} else {
					c.abort(false)
				}
				return
			}
		}
	}
	c.wake() // kicks consumed while gated
	if c.initiator && c.cfg.Settle > 0 {
		t := time.NewTimer(c.cfg.Settle)
		select {
		case <-t.C:
		case <-c.quit:
			t.Stop()
			return
		}
	}
	c.txMu.Lock()
	if c.initiator && c.params.P2P {
		err := c.sendRTR()
		if err == nil {
			err = c.flush()
		}
		if err != nil {
			c.txMu.Unlock()
			c.fail(rnic.EventQPFatal, &LLPError{Err: err})
			return
		}
	}
	c.ready.Store(true)
	c.txMu.Unlock()
	for {
		c.txMu.Lock()
		exit := c.pump()
		if exit {
			c.txDone = true
		}
		c.txMu.Unlock()
		if exit {
			return
		}
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
	}
}

// pump sends everything that can be sent without waiting: a pending Terminate, Read and
// atomic responses, then send-queue work. It reports whether the sender must exit.
// The caller holds txMu.
func (c *Conn) pump() (exit bool) {
	for {
		c.mu.Lock()
		if c.termSend {
			b, te := c.term, c.termErr
			c.termSend = false
			c.mu.Unlock()
			err := c.flush()
			if err == nil {
				err = c.writeFPDU(b, nil)
			}
			if err == nil {
				err = c.flush()
			}
			if err == nil {
				c.qp.CountTermSent()
				c.qp.CountTx(0, 1)
			}
			c.lingerClose()
			terr := &TermError{TerminateError: te, Sent: true}
			c.setErr(terr)
			c.qp.Fatal(eventFor(te), terr)
			return true
		}
		if c.irq.n > 0 {
			e := c.irq.pop()
			c.irqBusy++
			c.mu.Unlock()
			if err := c.sendResponse(&e); err != nil {
				c.fail(rnic.EventQPFatal, &LLPError{Err: err})
				return true
			}
			continue
		}
		closing, rxEOF, outstanding := c.closing, c.rxEOF, c.orq.n
		c.mu.Unlock()
		if rxEOF {
			_ = c.flush()
			if tc, ok := c.nc.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return true
		}
		w := c.held
		if w == nil {
			w = c.qp.NextSend()
		}
		if w == nil {
			if err := c.flush(); err != nil {
				c.fail(rnic.EventQPFatal, &LLPError{Err: err})
				return true
			}
			if closing && outstanding == 0 && !c.qp.SendPending() {
				if tc, ok := c.nc.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				} else {
					c.abort(false)
				}
				return true
			}
			return false
		}
		if c.blocked(w, outstanding) {
			c.held = w
			if err := c.flush(); err != nil {
				c.fail(rnic.EventQPFatal, &LLPError{Err: err})
				return true
			}
			if !c.blocked(w, c.outstanding()) {
				continue
			}
			return false
		}
		c.held = nil
		if err := c.sendWQE(w); err != nil {
			c.fail(rnic.EventQPFatal, &LLPError{Err: err})
			return true
		}
	}
}

// fastMax is the largest send WQE the posting goroutine transmits itself; fastIdle is
// how long the connection must have been idle for the fast path (ns): back-to-back posts
// are left to the sender goroutine, which coalesces them into one vectored write.
const (
	fastMax  = 16 << 10
	fastIdle = 5000
)

// fastPump is the doorbell fast path: when the sender goroutine is idle, the goroutine
// that posted work writes small WQEs itself, saving a goroutine hand-off per message.
// Anything else (responses, Terminates, fences, large WQEs, closing) is left to the sender
// goroutine; more reports that it must be woken. The caller holds txMu.
func (c *Conn) fastPump() (more bool) {
	if c.txDone || c.quitting() || c.held != nil {
		return !c.txDone
	}
	now := time.Now().UnixNano()
	if now-c.lastFast < fastIdle {
		// Posts are streaming in: let the sender goroutine batch them.
		c.lastFast = now
		return true
	}
	c.lastFast = now
	c.mu.Lock()
	special := c.termSend || c.irq.n > 0 || c.closing || c.rxEOF
	c.mu.Unlock()
	if special {
		return true
	}
	for i := 0; i < 16; i++ {
		w := c.qp.NextSend()
		if w == nil {
			break
		}
		if w.Len > fastMax || c.blocked(w, c.outstanding()) {
			c.held = w
			break
		}
		if err := c.sendWQE(w); err != nil {
			c.fail(rnic.EventQPFatal, &LLPError{Err: err})
			return false
		}
	}
	if err := c.flush(); err != nil {
		c.fail(rnic.EventQPFatal, &LLPError{Err: err})
		return false
	}
	return c.held != nil || c.qp.SendPending()
}

func (c *Conn) outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.orq.n
}

func (c *Conn) blocked(w *rnic.SendWQE, outstanding int) bool {
	if w.Flags&rnic.LocalFence != 0 && !c.qp.IsOldest(w) {
		return true
	}
	if w.Flags&rnic.Fence != 0 && outstanding > 0 {
		return true
	}
	switch w.Opcode {
	case rnic.OpRead, rnic.OpAtomicCmpSwap, rnic.OpAtomicFetchAdd:
		return c.ord > 0 && outstanding >= c.ord // ORD 0: sendWQE fails the WR
	}
	return false
}

var errLocalOp = errors.New("iwarp: work request not supported on this connection")

func (c *Conn) localError(w *rnic.SendWQE, st rnic.Status, ev rnic.EventType) error {
	c.qp.CompleteSend(w, st)
	c.setErr(errLocalOp)
	c.qp.Fatal(ev, errLocalOp)
	return nil
}

func (c *Conn) sendWQE(w *rnic.SendWQE) error {
	switch w.Opcode {
	case rnic.OpSend, rnic.OpSendInv:
		op := rdmap.OpSend
		se := w.Flags&rnic.Solicited != 0
		inv := uint32(0)
		if w.Opcode == rnic.OpSendInv {
			inv = w.InvalidateSTag
			op = rdmap.OpSendInvalidate
			if se {
				op = rdmap.OpSendSEInvalidate
			}
		} else if se {
			op = rdmap.OpSendSE
		}
		if err := c.sendUntagged(op, inv, w.Segs, w.Len); err != nil {
			return err
		}
	case rnic.OpWrite, rnic.OpWriteImm:
		if w.Opcode == rnic.OpWriteImm && !c.ext {
			return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
		}
		if err := c.sendTagged(rdmap.OpWrite, w.RKey, w.RemoteAddr, w.Segs, w.Len); err != nil {
			return err
		}
		if w.Opcode == rnic.OpWriteImm {
			if err := c.sendImm(w); err != nil {
				return err
			}
		}
	case rnic.OpSendImm:
		if !c.ext || w.Len != 0 {
			return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
		}
		if err := c.sendImm(w); err != nil {
			return err
		}
	case rnic.OpRead:
		if c.ord == 0 || w.Len > 0xFFFFFFFF {
			return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
		}
		e := orqEntry{kind: orqRead, w: w, sinkSTag: 1, size: w.Len}
		if len(w.SGL) > 0 {
			e.sinkSTag, e.sinkTO = w.SGL[0].LKey, w.SGL[0].Addr
		}
		e.msn = c.txMSN[1]
		c.mu.Lock()
		c.orq.push(e)
		c.mu.Unlock()
		return c.sendReadReq(e.sinkSTag, e.sinkTO, uint32(w.Len), w.RKey, w.RemoteAddr)
	case rnic.OpAtomicCmpSwap, rnic.OpAtomicFetchAdd:
		if !c.ext || c.ord == 0 {
			return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
		}
		c.reqID++
		c.mu.Lock()
		c.orq.push(orqEntry{kind: orqAtomic, w: w, reqID: c.reqID, msn: c.txMSN[1]})
		c.mu.Unlock()
		putUntagged(c.hdr[:], true, rdmap.OpAtomicRequest, 0, ddp.QNReadRequest, c.txMSN[1], 0)
		c.txMSN[1]++
		req := rdmap.NewFetchAdd(c.reqID, w.RKey, w.RemoteAddr, w.Compare, 0)
		if w.Opcode == rnic.OpAtomicCmpSwap {
			req = rdmap.NewCmpSwap(c.reqID, w.RKey, w.RemoteAddr, w.Compare, rdmap.AllOnes, w.Swap, rdmap.AllOnes)
		}
		h := req.Append(c.hdr[:ddp.UntaggedLen])
		if err := c.writeFPDU(h, nil); err != nil {
			return err
		}
		c.qp.CountTx(0, 1)
		return nil
	case rnic.OpLocalInv, rnic.OpRegMR, rnic.OpBindMW:
		st := c.qp.ExecLocal(w)
		c.qp.CompleteSend(w, st)
		if st != rnic.StatusSuccess {
			err := errors.New("iwarp: local " + w.Opcode.String() + " failed: " + st.String())
			c.setErr(err)
			c.qp.Fatal(rnic.EventQPFatal, err)
		}
		return nil
	default:
		return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
	}
	c.sent = append(c.sent, w)
	return nil
}

// sendUntagged sends one Send-type message on QN 0 (RFC 5040 §4.4, RFC 5041 §4.3).
func (c *Conn) sendUntagged(op rdmap.Opcode, inv uint32, segs [][]byte, n uint64) error {
	per := uint64(c.mulpdu - ddp.UntaggedLen)
	msn := c.txMSN[0]
	c.txMSN[0]++
	h := c.hdr[:ddp.UntaggedLen]
	var off uint64
	for {
		k := min(per, n-off)
		last := off+k == n
		putUntagged(h, last, op, inv, ddp.QNSend, msn, uint32(off))
		if err := c.writeFPDU(h, c.txGather(segs, off, k)); err != nil {
			return err
		}
		c.qp.CountTx(int(k), 1)
		off += k
		if last {
			return nil
		}
	}
}

// sendTagged sends one tagged message (Write or Read Response, RFC 5040 §4.3, §4.5).
// A Read Response frees its inbound Read slot just before its last FPDU is framed: the
// peer cannot have seen the whole response, and so send another Read Request, earlier.
func (c *Conn) sendTagged(op rdmap.Opcode, stag uint32, to uint64, segs [][]byte, n uint64) error {
	per := uint64(c.mulpdu - ddp.TaggedLen)
	h := c.hdr[:ddp.TaggedLen]
	var off uint64
	for {
		k := min(per, n-off)
		last := off+k == n
		if last && op == rdmap.OpReadResponse {
			c.releaseIRD()
		}
		putTagged(h, last, op, stag, to+off)
		if err := c.writeFPDU(h, c.txGather(segs, off, k)); err != nil {
			return err
		}
		c.qp.CountTx(int(k), 1)
		off += k
		if last {
			return nil
		}
	}
}

func (c *Conn) sendImm(w *rnic.SendWQE) error {
	op := rdmap.OpImmediateData
	if w.Flags&rnic.Solicited != 0 {
		op = rdmap.OpImmediateDataSE
	}
	putUntagged(c.hdr[:], true, op, 0, ddp.QNSend, c.txMSN[0], 0)
	c.txMSN[0]++
	h := rdmap.AppendImmediate(c.hdr[:ddp.UntaggedLen], uint64(w.Imm))
	if err := c.writeFPDU(h, nil); err != nil {
		return err
	}
	c.qp.CountTx(0, 1)
	return nil
}

// sendReadReq sends an RDMA Read Request (RFC 5040 §4.4) on QN 1.
func (c *Conn) sendReadReq(sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) error {
	h := c.hdr[:ddp.UntaggedLen+rdmap.ReadRequestLen]
	putUntagged(h, true, rdmap.OpReadRequest, 0, ddp.QNReadRequest, c.txMSN[1], 0)
	c.txMSN[1]++
	rdmap.ReadRequest(h[ddp.UntaggedLen:]).Init(sinkSTag, sinkTO, size, srcSTag, srcTO)
	if err := c.writeFPDU(h, nil); err != nil {
		return err
	}
	c.qp.CountTx(0, 1)
	return nil
}

// sendRTR sends the initiator's RFC 6581 §9.2 ready-to-receive indication in the form
// Linux siw uses.
func (c *Conn) sendRTR() error {
	switch {
	case c.params.RTR&mpa.RTRWrite != 0:
		h := c.hdr[:ddp.TaggedLen]
		putTagged(h, true, rdmap.OpWrite, 1, 0)
		return c.writeFPDU(h, nil)
	case c.params.RTR&mpa.RTRRead != 0:
		c.mu.Lock()
		c.orq.push(orqEntry{kind: orqRTR, sinkSTag: 1})
		c.mu.Unlock()
		return c.sendReadReq(1, 0, 0, 1, 0)
	case c.params.RTR&mpa.RTRSend != 0:
		return c.sendUntagged(rdmap.OpSend, 0, nil, 0)
	}
	return nil
}

// releaseIRD ends the inbound Read or atomic that the sender is responding to.
func (c *Conn) releaseIRD() {
	c.mu.Lock()
	c.irqBusy--
	c.mu.Unlock()
}

// inboundFull reports whether the peer already has IRD Read and atomic requests
// outstanding: queued, or being answered and not yet fully framed (RFC 5040 §6.1, RFC 7306
// §5.2). The caller holds mu.
func (c *Conn) inboundFull() bool { return c.irq.n+c.irqBusy >= c.ird }

// sendResponse sends a Read Response streamed from the source region or an Atomic
// Response.
func (c *Conn) sendResponse(e *irqEntry) error {
	if e.atomic {
		c.releaseIRD()
		putUntagged(c.hdr[:], true, rdmap.OpAtomicResponse, 0, ddp.QNAtomicResponse, c.txMSN[3], 0)
		c.txMSN[3]++
		h := rdmap.AtomicResponse{ReqID: e.reqID, Orig: e.orig}.Append(c.hdr[:ddp.UntaggedLen])
		if err := c.writeFPDU(h, nil); err != nil {
			return err
		}
		c.qp.CountTx(0, 1)
		return nil
	}
	var one [1][]byte
	one[0] = e.src
	return c.sendTagged(rdmap.OpReadResponse, e.sinkSTag, e.sinkTO, one[:], uint64(len(e.src)))
}

// ---------------------------------------------------------------- receiver

func (c *Conn) recvLoop() {
	defer c.exit()
	for {
		n, err := c.rd.Next()
		if err != nil {
			c.rxError(err)
			return
		}
		if !c.segment(n) {
			return
		}
	}
}

func (c *Conn) rxError(err error) {
	if c.quitting() {
		return
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if errors.Is(err, io.EOF) {
		// Graceful close by the peer (or the answer to ours).
		c.mu.Lock()
		c.rxEOF = true
		c.mu.Unlock()
		c.wake()
		if !closing {
			// let the sender close our side; the QP is flushed at exit.
			return
		}
		return
	}
	var me *mpa.Error
	if errors.As(err, &me) {
		te := rdmap.FromLLP(uint8(me.Code))
		if me.Code == mpa.CodeCRC {
			c.qp.CountCRCError()
		}
		c.sendTerm(te, nil, 0, nil)
		return
	}
	if closing {
		c.setErr(err)
		c.abort(false)
		return
	}
	c.fail(rnic.EventQPFatal, &LLPError{Err: err})
}

// LLPError reports the loss of the TCP connection (RFC 5044 §8 code 1, "TCP connection
// closed, terminated or lost") as the error of an EventQPFatal.
type LLPError struct{ Err error }

func (e *LLPError) Error() string { return "iwarp: connection lost: " + e.Err.Error() }

// Unwrap returns the I/O error.
func (e *LLPError) Unwrap() error { return e.Err }

// Is matches rdmap.TermMPATCPClosed.
func (e *LLPError) Is(target error) bool { return target == error(rdmap.TermMPATCPClosed) }

// lingerClose half-closes the socket after a Terminate and drains the peer's data
// briefly, so the Terminate is delivered rather than destroyed by a reset (closing a
// socket with unread data makes TCP send RST). The receiver has already stopped.
func (c *Conn) lingerClose() {
	tc, ok := c.nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.CloseWrite()
	_ = tc.SetReadDeadline(time.Now().Add(time.Second))
	var buf [512]byte
	for {
		if _, err := tc.Read(buf[:]); err != nil {
			return
		}
	}
}

// sendTerm hands a Terminate to the sender (RFC 5040 §5.4.1 / §7): QN 2, MSN 1, MO 0,
// then the control word and, when hdr is given, the DDP segment length and header (and
// the Read Request header when rr is given). The receiver stops after calling it.
func (c *Conn) sendTerm(te rdmap.TerminateError, hdr []byte, ulpLen int, rr []byte) {
	// Layout and header rules (RFC 5040 §4.8 Figure 10) come from rdmap.TerminateFor; the
	// DDP Segment Length is the segment's payload length, as siw reports it.
	var t rdmap.Terminate
	if hdr != nil {
		segLen := max(ulpLen-len(hdr)-rdmap.ControlOpcode(hdr[1]).HeaderLen(), 0)
		t = rdmap.TerminateFor(te, uint16(segLen), hdr, rr)
	} else {
		t = rdmap.TerminateFor(te, 0, nil, nil)
	}
	b := rdmap.AppendTerminateMessage(make([]byte, 0, ddp.UntaggedLen+t.Len()), 1, &t)
	c.qp.EnterTerminate()
	if c.cur != nil && te == rdmap.FromDDP(ddp.ErrMessageTooLong) {
		// the receive buffer is too small; other failures leave the WQE to the flush
		c.qp.CompleteRecv(c.cur, rnic.RecvResult{Status: rnic.StatusLocLenErr, Opcode: rnic.WCRecv})
	}
	c.cur = nil
	c.mu.Lock()
	c.term, c.termErr, c.termSend = b, te, true
	c.mu.Unlock()
	c.openGate()
	c.wake()
}

// readInto reads n payload bytes of the current FPDU into segs at offset off.
func (c *Conn) readInto(segs [][]byte, off, n uint64) error {
	c.rxPieces = rnic.Segs(segs).Slices(c.rxPieces, off, n)
	for _, p := range c.rxPieces {
		if err := c.rd.ReadFull(p); err != nil {
			return err
		}
	}
	clear(c.rxPieces) // keep no reference to the WQE's memory
	return nil
}

// segment processes one FPDU of ULPDU length n; it returns false when the receiver must stop.
func (c *Conn) segment(n int) bool {
	h := c.rh[:]
	if n < 2 {
		c.sendTerm(rdmap.TermCatastrophicStream, nil, 0, nil)
		return false
	}
	if err := c.rd.ReadFull(h[:2]); err != nil {
		c.rxError(err)
		return false
	}
	hl := ddp.HeaderLen(h[0])
	if n < hl {
		c.sendTerm(rdmap.TermCatastrophicStream, nil, 0, nil)
		return false
	}
	if err := c.rd.ReadFull(h[2:hl]); err != nil {
		c.rxError(err)
		return false
	}
	op, _, err := rdmap.CheckSegment(h[:hl])
	if err != nil {
		te, ok := rdmap.AsTerminateError(err)
		if !ok {
			te = rdmap.TermCatastrophicStream
		}
		c.sendTerm(te, h[:hl], n, nil)
		return false
	}
	if (op.Extension() && !c.ext) || op == rdmap.OpExperimental {
		c.sendTerm(rdmap.TermUnexpectedOpcode, h[:hl], n, nil)
		return false
	}
	rl := op.HeaderLen()
	if n < hl+rl || (op != rdmap.OpTerminate && !op.CarriesPayload() && n != hl+rl) {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMessageTooLong), h[:hl], n, nil)
		return false
	}
	if rl > 0 {
		if err := c.rd.ReadFull(h[hl : hl+rl]); err != nil {
			c.rxError(err)
			return false
		}
	}
	plen := uint64(n - hl - rl)
	c.openGate()
	if c.rtrExpect {
		c.rtrExpect = false
		if ok, handled := c.rtr(op, h[:hl+rl], n, plen); !ok {
			return false
		} else if handled {
			return true
		}
	}
	c.qp.CountRx(int(plen), 1)
	switch op {
	case rdmap.OpWrite:
		return c.rxWrite(h[:hl], n, plen)
	case rdmap.OpReadResponse:
		return c.rxReadResp(h[:hl], n, plen)
	case rdmap.OpSend, rdmap.OpSendSE, rdmap.OpSendInvalidate, rdmap.OpSendSEInvalidate:
		return c.rxSend(op, h[:hl], n, plen)
	case rdmap.OpReadRequest:
		return c.rxReadReq(h[:hl+rl], n)
	case rdmap.OpTerminate:
		return c.rxTerm(h[hl:hl+rl], plen)
	case rdmap.OpImmediateData, rdmap.OpImmediateDataSE:
		return c.rxImm(op, h[:hl+rl], n)
	case rdmap.OpAtomicRequest:
		return c.rxAtomicReq(h[:hl+rl], n)
	case rdmap.OpAtomicResponse:
		return c.rxAtomicResp(h[:hl+rl], n)
	}
	c.sendTerm(rdmap.TermUnexpectedOpcode, h[:hl], n, nil)
	return false
}

func (c *Conn) end() bool {
	if err := c.rd.End(); err != nil {
		c.rxError(err)
		return false
	}
	return true
}

// rtr handles the responder's first FPDU in peer-to-peer mode (RFC 6581 §9.2): it must be
// an RTR of a type the responder accepted. handled reports that the FPDU was consumed.
func (c *Conn) rtr(op rdmap.Opcode, h []byte, n int, plen uint64) (ok, handled bool) {
	types := c.params.RTR
	switch {
	case op == rdmap.OpWrite && plen == 0 && types&mpa.RTRWrite != 0:
		return c.end(), true
	case op == rdmap.OpReadRequest && types&mpa.RTRRead != 0:
		rr := rdmap.ReadRequest(h[ddp.UntaggedLen:]) // segment checked its length
		if rr.Size() == 0 {
			if !c.end() {
				return false, true
			}
			c.rxMSN[1]++
			c.mu.Lock()
			c.irq.push(irqEntry{sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO()})
			c.mu.Unlock()
			c.wake()
			return true, true
		}
	case op == rdmap.OpSend && plen == 0 && types&mpa.RTRSend != 0:
		if !c.end() {
			return false, true
		}
		c.rxMSN[0]++
		return true, true
	}
	c.sendTerm(rdmap.TermMPANoMatchingRTR, nil, 0, nil)
	return false, true
}

func (c *Conn) rxWrite(h []byte, n int, plen uint64) bool {
	t := ddp.Tagged(h)
	stag, to := t.STag(), t.TO()
	if err := c.tagged.Accept(stag, to, int(plen), t.Last()); err != nil {
		te, _ := rdmap.AsTerminateError(err)
		c.sendTerm(te, h, n, nil)
		return false
	}
	var dst []byte
	if plen > 0 { // RFC 5041 §5.2: STag and TO of a zero-length segment are not checked
		var err error
		if dst, err = c.qp.ResolveRemote(stag, to, plen, rnic.AccessRemoteWrite); err != nil {
			c.sendTerm(taggedTerm(err), h, n, nil)
			return false
		}
	}
	if err := c.rd.ReadFull(dst); err != nil {
		c.rxError(err)
		return false
	}
	if !c.end() {
		return false
	}
	c.lastWrite = t.Last()
	return true
}

func (c *Conn) rxReadResp(h []byte, n int, plen uint64) bool {
	t := ddp.Tagged(h)
	c.mu.Lock()
	var e *orqEntry
	if c.orq.n > 0 && c.orq.front().kind != orqAtomic {
		e = c.orq.front()
	}
	c.mu.Unlock()
	if e == nil {
		c.sendTerm(rdmap.TermUnexpectedOpcode, h, n, nil)
		return false
	}
	if t.STag() != e.sinkSTag {
		c.sendTerm(rdmap.FromDDP(ddp.ErrInvalidSTag), h, n, nil)
		return false
	}
	if t.TO() != e.sinkTO+e.got || e.got+plen > e.size {
		c.sendTerm(rdmap.FromDDP(ddp.ErrBaseBounds), h, n, nil)
		return false
	}
	if e.w != nil {
		if err := c.readInto(e.w.Segs, e.got, plen); err != nil {
			c.rxError(err)
			return false
		}
	}
	if !c.end() {
		return false
	}
	e.got += plen
	if !t.Last() {
		return true
	}
	if e.got != e.size {
		c.sendTerm(rdmap.FromDDP(ddp.ErrBaseBounds), h, n, nil)
		return false
	}
	c.mu.Lock()
	done := c.orq.pop()
	c.mu.Unlock()
	if done.w != nil {
		c.qp.CompleteSend(done.w, rnic.StatusSuccess)
	}
	c.wake()
	return true
}

func (c *Conn) rxSend(op rdmap.Opcode, h []byte, n int, plen uint64) bool {
	u := ddp.Untagged(h)
	if uint32(u.MSN()) != c.rxMSN[0] {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), h, n, nil)
		return false
	}
	if uint64(u.MO()) != c.curGot {
		c.sendTerm(rdmap.FromDDP(ddp.ErrInvalidMO), h, n, nil)
		return false
	}
	if c.cur == nil {
		w, st := c.qp.TakeRecv()
		switch {
		case w == nil && st == rnic.StatusSuccess:
			c.sendTerm(rdmap.FromDDP(ddp.ErrMSNNoBuffer), h, n, nil)
			return false
		case w == nil:
			c.abort(false)
			return false
		case st != rnic.StatusSuccess:
			c.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
			c.sendTerm(rdmap.TermLocalCatastrophic, nil, 0, nil)
			return false
		}
		c.cur = w
	}
	w := c.cur
	if c.curGot+plen > w.Len {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMessageTooLong), h, n, nil)
		return false
	}
	if err := c.readInto(w.Segs, c.curGot, plen); err != nil {
		c.rxError(err)
		return false
	}
	if !c.end() {
		return false
	}
	c.curGot += plen
	if !u.Last() {
		return true
	}
	r := rnic.RecvResult{Opcode: rnic.WCRecv, ByteLen: uint32(c.curGot)}
	if op.SolicitedEvent() {
		r.Flags |= rnic.WCSolicited
	}
	if op.CarriesInvalidateSTag() {
		inv := u.ULPField()
		if err := c.qp.Invalidate(inv); err != nil {
			c.sendTerm(rdmap.TermProtCannotInvalidate, h, n, nil)
			return false
		}
		r.Flags |= rnic.WCWithInv
		r.InvalidatedSTag = inv
	}
	c.cur, c.curGot = nil, 0
	c.rxMSN[0]++
	c.lastWrite = false
	c.qp.CompleteRecv(w, r)
	return true
}

func (c *Conn) rxImm(op rdmap.Opcode, h []byte, n int) bool {
	u := ddp.Untagged(h)
	if uint32(u.MSN()) != c.rxMSN[0] || c.cur != nil {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), h[:ddp.UntaggedLen], n, nil)
		return false
	}
	if u.MO() != 0 || !u.Last() {
		c.sendTerm(rdmap.FromDDP(ddp.ErrInvalidMO), h[:ddp.UntaggedLen], n, nil)
		return false
	}
	if !c.end() {
		return false
	}
	w, st := c.qp.TakeRecv()
	if w == nil {
		if st == rnic.StatusSuccess {
			c.sendTerm(rdmap.FromDDP(ddp.ErrMSNNoBuffer), h[:ddp.UntaggedLen], n, nil)
		}
		return false
	}
	imm, _ := rdmap.ParseImmediate(h[ddp.UntaggedLen:]) // segment checked its length
	r := rnic.RecvResult{Status: st, Opcode: rnic.WCRecv, Flags: rnic.WCWithImm, Imm: uint32(imm)}
	if c.lastWrite {
		r.Opcode = rnic.WCRecvRDMAWithImm
	}
	if op == rdmap.OpImmediateDataSE {
		r.Flags |= rnic.WCSolicited
	}
	c.rxMSN[0]++
	c.lastWrite = false
	c.qp.CompleteRecv(w, r)
	return true
}

func (c *Conn) rxReadReq(h []byte, n int) bool {
	u := ddp.Untagged(h)
	if uint32(u.MSN()) != c.rxMSN[1] || u.MO() != 0 || !u.Last() {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
		return false
	}
	rr := rdmap.ReadRequest(h[ddp.UntaggedLen:]) // segment checked its length
	c.mu.Lock()
	full := c.inboundFull()
	c.mu.Unlock()
	if full {
		// RFC 5040 names no code for a peer exceeding IRD; Linux siw (siw_init_rresp)
		// sends RDMAP / Remote Operation / catastrophic error localized to the stream.
		c.sendTerm(rdmap.TermCatastrophicStream, h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
		return false
	}
	var src []byte
	if rr.Size() > 0 { // RFC 5040 §5.2.1: a zero-length Read's source MUST NOT be validated
		var err error
		src, err = c.qp.ResolveRemote(rr.SrcSTag(), rr.SrcTO(), uint64(rr.Size()), rnic.AccessRemoteRead)
		if err != nil {
			c.sendTerm(readTerm(err), h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
			return false
		}
	}
	if !c.end() {
		return false
	}
	c.rxMSN[1]++
	c.mu.Lock()
	c.irq.push(irqEntry{sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO(), src: src})
	c.mu.Unlock()
	c.wake()
	return true
}

func (c *Conn) rxAtomicReq(h []byte, n int) bool {
	u := ddp.Untagged(h)
	dh, a := h[:ddp.UntaggedLen], h[ddp.UntaggedLen:]
	if uint32(u.MSN()) != c.rxMSN[1] || u.MO() != 0 || !u.Last() {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), dh, n, nil)
		return false
	}
	c.mu.Lock()
	full := c.inboundFull()
	c.mu.Unlock()
	if full { // as for Read Requests: atomics share the IRD (RFC 7306 §5.2)
		c.sendTerm(rdmap.TermCatastrophicStream, dh, n, nil)
		return false
	}
	req, err := rdmap.ParseAtomicRequest(a)
	if err == nil {
		err = req.Check() // RFC 7306 §5.2.1, §8.2
	}
	if err != nil {
		te, ok := rdmap.AsTerminateError(err)
		if !ok {
			te = rdmap.TermCatastrophicStream
		}
		c.sendTerm(te, dh, n, nil)
		return false
	}
	dst, err := c.qp.ResolveRemote(req.STag, req.TO, 8, rnic.AccessRemoteAtomic)
	if err != nil {
		c.sendTerm(readTerm(err), dh, n, nil)
		return false
	}
	if !c.end() {
		return false
	}
	orig := c.qp.Atomic(dst, req.Apply) // RFC 7306 §5.3: one lock per device, across transports
	c.rxMSN[1]++
	c.mu.Lock()
	c.irq.push(irqEntry{atomic: true, reqID: req.ReqID, orig: orig})
	c.mu.Unlock()
	c.wake()
	return true
}

func (c *Conn) rxAtomicResp(h []byte, n int) bool {
	u := ddp.Untagged(h)
	dh, a := h[:ddp.UntaggedLen], h[ddp.UntaggedLen:]
	if uint32(u.MSN()) != c.rxMSN[3] {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), dh, n, nil)
		return false
	}
	c.mu.Lock()
	var e *orqEntry
	if c.orq.n > 0 && c.orq.front().kind == orqAtomic {
		e = c.orq.front()
	}
	c.mu.Unlock()
	resp, err := rdmap.ParseAtomicResponse(a)
	if err != nil || e == nil || e.reqID != resp.ReqID {
		c.sendTerm(rdmap.TermUnexpectedOpcode, dh, n, nil)
		return false
	}
	if !c.end() {
		return false
	}
	c.rxMSN[3]++
	binary.NativeEndian.PutUint64(e.w.Segs[0], resp.Orig)
	c.mu.Lock()
	done := c.orq.pop()
	c.mu.Unlock()
	c.qp.CompleteSend(done.w, rnic.StatusSuccess)
	c.wake()
	return true
}

// rxTerm handles a received Terminate (RFC 5040 §5.4): the oldest outstanding Read or
// atomic completes with the matching status; the QP goes to Error.
func (c *Conn) rxTerm(ctrl []byte, plen uint64) bool {
	te := decodeTermWord(be.Uint32(ctrl))
	// The echoed DDP header (D bit) names the offending message: a Read Request or
	// atomic request (QN 1) identifies the outstanding WQE by its MSN.
	var buf [rdmap.TerminateMaxLen]byte
	n := copy(buf[:], ctrl)
	k := min(plen, uint64(len(buf)-n))
	read := c.rd.ReadFull(buf[n:n+int(k)]) == nil
	_ = c.rd.End()
	var msn uint32
	found := false
	if t, err := rdmap.ParseTerminate(buf[:n+int(k)]); read && err == nil && t.D && len(t.DDPHeader) == ddp.UntaggedLen {
		if u := ddp.Untagged(t.DDPHeader); u.QN() == ddp.QNReadRequest {
			msn, found = uint32(u.MSN()), true
		}
	}
	c.qp.CountTermRecv()
	err := &TermError{TerminateError: te}
	c.setErr(err)
	c.mu.Lock()
	var w *rnic.SendWQE
	for i := 0; found && i < c.orq.n; i++ {
		e := &c.orq.buf[(c.orq.head+i)%len(c.orq.buf)]
		if e.msn == msn {
			w = e.w
			e.w = nil
			break
		}
	}
	c.mu.Unlock()
	if w != nil {
		c.qp.CompleteSend(w, termStatus(te))
	}
	c.qp.Fatal(eventFor(te), err)
	return false
}
