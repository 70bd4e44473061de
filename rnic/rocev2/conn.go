package rocev2

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// QPType is the IB transport service of a connected QP.
type QPType uint8

// Connected transport services (IBTA Vol.1 §9.8; UD is UDQP).
const (
	RC QPType = iota // reliable connection
	UC               // unreliable connection: SEND and WRITE only, no ACKs
)

func (t QPType) String() string {
	if t == UC {
		return "UC"
	}
	return "RC"
}

// ConnAttr are the per-connection attributes of ibv_modify_qp to RTR/RTS.
type ConnAttr struct {
	Type      QPType
	Remote    netip.AddrPort // the peer's link address (UDP port 4791 for a kernel peer)
	RemoteQPN uint32         // dest_qp_num
	SendPSN   roce.PSN       // sq_psn: the first PSN this QP sends
	RecvPSN   roce.PSN       // rq_psn: the first PSN expected from the peer
	MTU       roce.MTU       // path MTU; 0 means the endpoint's
}

// Errors of the transport.
var (
	ErrRetryExceeded    = errors.New("rocev2: transport retry count exceeded")
	ErrRNRRetryExceeded = errors.New("rocev2: RNR retry count exceeded")
	ErrRemoteNAK        = errors.New("rocev2: NAK received")
	ErrLocalNAK         = errors.New("rocev2: request refused with a NAK")
)

// NAKError is the cause of a QP error caused by a NAK, sent or received.
type NAKError struct {
	Code roce.NAKCode
	PSN  roce.PSN
	Sent bool // this side sent the NAK (responder)
}

func (e *NAKError) Error() string {
	if e.Sent {
		return "rocev2: sent NAK " + e.Code.String() + " at PSN " + e.PSN.String()
	}
	return "rocev2: received NAK " + e.Code.String() + " at PSN " + e.PSN.String()
}

// Unwrap returns ErrLocalNAK or ErrRemoteNAK.
func (e *NAKError) Unwrap() error {
	if e.Sent {
		return ErrLocalNAK
	}
	return ErrRemoteNAK
}

// sqe is the requester's state of one send WQE between NextSend and completion.
type sqe struct {
	w           *rnic.SendWQE
	first, last roce.PSN // PSNs of the request (a Read: of its responses)
	started     bool
	counted     bool // counted in rdOut
	done        bool
	got         uint64 // Read: response bytes placed
}

// rdJob is an entry of the responder's ordered response queue: a READ
// response being streamed, or a control packet (ACK, NAK, atomic ACK)
// queued behind one so that responses leave in PSN order.
type rdJob struct {
	psn  roce.PSN
	data []byte
	off  int
	ctl  bool
	dup  bool // re-execution of a duplicate READ (not counted against IRD)
	cn   int
	cbuf [40]byte
}

type atomRes struct {
	psn  roce.PSN
	orig uint64
	ok   bool
}

const (
	kindNone = iota
	kindSend
	kindWrite
	kindDrop // UC: rest of a message that could not be received
)

// Conn is a connected RC or UC QP on an Endpoint: it implements rnic.QPTransport.
type Conn struct {
	e      *Endpoint
	qp     *rnic.TransportQP
	typ    QPType
	local  netip.AddrPort
	remote netip.AddrPort
	rqpn   uint32
	mtu    int
	cfg    Config
	tmo    time.Duration

	kick chan struct{}
	done chan struct{}
	disc atomic.Int32 // 1 graceful, 2 abort

	onDone       func()      // CM: send a DREQ when the connection ends
	remoteClosed atomic.Bool // CM: the peer sent a DREQ
	peerPD       []byte

	mu        sync.Mutex
	flushResp bool // send the queued responses before stopping (responder NAK)
	dead      bool
	inBatch   bool
	fatal     bool
	err       error

	// requester and completer
	sq             []sqe
	sqHead, sqSend uint64
	sqTail         uint64
	sendPSN        roce.PSN
	maxSent        roce.PSN // one past the highest PSN sent
	sendOff        uint64
	unaPSN         roce.PSN // oldest unacknowledged PSN
	noack          int
	rdOut          int
	retryLeft      uint8
	rnrLeft        uint8
	ackDeadline    time.Time
	rnrPending     bool
	rnrUntil       time.Time
	rnrPSN         roce.PSN
	lastNak        roce.PSN
	lastNakValid   bool
	seqRetried     bool
	hdr            roce.Header

	// responder
	ePSN       roce.PSN
	msn        uint32
	nakSent    bool
	ackPending bool
	curKind    int
	curRecv    *rnic.RecvWQE
	curOff     uint64
	curWBuf    []byte
	atom       []atomRes
	atomNext   int
	rdq        []rdJob
	rdHead     int
	rdLen      int
	rdReads    int
	rhdr       roce.Header

	txb [][]byte
}

// Connect binds qp (Idle, not yet attached) to a peer QP: the equivalent of
// ibv_modify_qp INIT→RTR→RTS with attr. The QP is in RTS on return.
func (e *Endpoint) Connect(qp *rnic.QP, attr ConnAttr) (*Conn, error) {
	return e.connect(qp, attr, nil, nil)
}

func (e *Endpoint) connect(qp *rnic.QP, attr ConnAttr, cp *Config, onDone func()) (*Conn, error) {
	if e.closed.Load() {
		return nil, ErrEndpointClosed
	}
	if qp.Num() < rnic.FirstQPN {
		return nil, ErrQPNumReserved
	}
	cfg := e.cfg
	if cp != nil {
		cfg = *cp
	}
	if attr.MTU.Valid() {
		cfg.MTU = attr.MTU
	}
	c := &Conn{e: e, typ: attr.Type, local: e.link.LocalAddr(), remote: attr.Remote,
		rqpn: attr.RemoteQPN & roce.QPNMask, mtu: cfg.MTU.Bytes(), cfg: cfg,
		kick: make(chan struct{}, 1), done: make(chan struct{}), onDone: onDone}
	if cfg.Timeout != 0 {
		c.tmo = roce.TimeoutExp(cfg.Timeout)
	}
	c.sq = make([]sqe, qp.Attr().Cap.MaxSendWR)
	c.sendPSN, c.maxSent, c.unaPSN = attr.SendPSN&roce.PSNMask, attr.SendPSN&roce.PSNMask, attr.SendPSN&roce.PSNMask
	c.ePSN = attr.RecvPSN & roce.PSNMask
	c.retryLeft, c.rnrLeft = cfg.RetryCnt, cfg.RNRRetry
	c.atom = make([]atomRes, cfg.MaxDestRd)
	c.rdq = make([]rdJob, 4*cfg.MaxDestRd+64)
	c.hdr = roce.Header{PKey: cfg.PKey, DestQP: c.rqpn}
	c.rhdr = c.hdr
	bs := e.link.BatchSize()
	c.txb = make([][]byte, bs)
	for i := range c.txb {
		c.txb[i] = make([]byte, 0, MaxPacket)
	}
	e.mu.Lock()
	if _, ok := e.conns[qp.Num()]; ok {
		e.mu.Unlock()
		return nil, rnic.ErrAttached
	}
	e.conns[qp.Num()] = c
	e.mu.Unlock()
	tq, err := rnic.AttachTransport(qp, c)
	if err != nil {
		e.mu.Lock()
		delete(e.conns, qp.Num())
		e.mu.Unlock()
		return nil, err
	}
	c.qp = tq
	go c.run()
	if err := tq.Established(); err != nil {
		c.Disconnect(false)
		<-c.done
		return nil, err
	}
	return c, nil
}

// QP returns the bound queue pair.
func (c *Conn) QP() *rnic.QP { return c.qp.QP() }

// Type returns RC or UC.
func (c *Conn) Type() QPType { return c.typ }

// Done is closed once the connection's goroutine has stopped.
func (c *Conn) Done() <-chan struct{} { return c.done }

// SendQueued implements rnic.QPTransport.
func (c *Conn) SendQueued() { c.wake() }

// Disconnect implements rnic.QPTransport: graceful waits until every sent
// request is acknowledged; abortive stops at once. RoCE has no LLP to close.
func (c *Conn) Disconnect(graceful bool) {
	v := int32(2)
	if graceful {
		v = 1
	}
	for {
		o := c.disc.Load()
		if o >= v || c.disc.CompareAndSwap(o, v) {
			break
		}
	}
	c.wake()
}

func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// ---- conn goroutine: requester transmit, Read responses, timers ----

func (c *Conn) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		c.mu.Lock()
		if c.disc.Load() == 2 && c.flushResp && c.rdLen > 0 {
			// The responder NAKed and went to Error: the READ responses
			// queued before the NAK, and the NAK, still leave, in order.
			n := c.fill()
			c.mu.Unlock()
			_ = c.e.link.Send(c.txb[:n], c.remote)
			continue
		}
		if c.disc.Load() == 2 || (c.disc.Load() == 1 && c.idleLocked()) {
			c.dead = true
			err := c.err
			c.mu.Unlock()
			c.e.mu.Lock()
			delete(c.e.conns, c.qp.QP().Num())
			c.e.mu.Unlock()
			if c.onDone != nil && !c.remoteClosed.Load() && !c.e.closed.Load() {
				c.onDone()
			}
			c.qp.TransportDone(err)
			close(c.done)
			return
		}
		now := time.Now()
		c.timersLocked(now)
		n := c.fill()
		next := c.nextDeadline()
		c.mu.Unlock()
		if n > 0 {
			_ = c.e.link.Send(c.txb[:n], c.remote)
			continue
		}
		if !next.IsZero() {
			t.Reset(time.Until(next))
		} else {
			t.Reset(time.Hour)
		}
		select {
		case <-c.kick:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

func (c *Conn) idleLocked() bool {
	return c.fatal || (c.sqHead == c.sqTail && !c.qp.SendPending() && c.rdLen == 0)
}

func (c *Conn) nextDeadline() time.Time {
	var d time.Time
	if c.rnrPending {
		d = c.rnrUntil
	} else if !c.ackDeadline.IsZero() {
		d = c.ackDeadline
	}
	return d
}

func (c *Conn) timersLocked(now time.Time) {
	if c.fatal {
		return
	}
	if c.rnrPending {
		if now.Before(c.rnrUntil) {
			return
		}
		c.rnrPending = false
		c.seek(c.rnrPSN)
		c.armAck(now)
		return
	}
	if c.ackDeadline.IsZero() || now.Before(c.ackDeadline) {
		return
	}
	if c.unaPSN == c.maxSent {
		c.ackDeadline = time.Time{}
		return
	}
	// Local ACK timeout (IBTA §9.7.6.1.3): retransmit from the oldest unacknowledged PSN.
	if c.retryLeft == 0 {
		c.failOldest(rnic.StatusRetryExcErr, ErrRetryExceeded)
		return
	}
	c.retryLeft--
	c.qp.CountRetransmit()
	c.seek(c.unaPSN)
	c.seqRetried = false
	c.ackDeadline = now.Add(c.tmo)
}

func (c *Conn) armAck(now time.Time) {
	if c.typ != RC || c.tmo == 0 || c.unaPSN == c.maxSent {
		c.ackDeadline = time.Time{}
		return
	}
	c.ackDeadline = now.Add(c.tmo)
}

func (c *Conn) ent(i uint64) *sqe { return &c.sq[i%uint64(len(c.sq))] }

func isRdAtomic(op rnic.Opcode) bool {
	return op == rnic.OpRead || op == rnic.OpAtomicCmpSwap || op == rnic.OpAtomicFetchAdd
}

func isLocal(op rnic.Opcode) bool {
	return op == rnic.OpLocalInv || op == rnic.OpRegMR || op == rnic.OpBindMW
}

func (c *Conn) npkts(n uint64) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(c.mtu) - 1) / uint64(c.mtu))
}

// seek moves the send cursor to PSN p (a retransmission, or past what an ACK
// covered): IBTA §9.7.6 "go back N" from p.
func (c *Conn) seek(p roce.PSN) {
	c.sendPSN = p
	for i := c.sqHead; i != c.sqTail; i++ {
		e := c.ent(i)
		if !e.started {
			c.sqSend, c.sendOff = i, 0
			return
		}
		if e.done || isLocal(e.w.Opcode) {
			continue
		}
		if p.Sub(e.first) <= e.last.Sub(e.first) {
			c.sqSend = i
			c.sendOff = uint64(p.Sub(e.first)) * uint64(c.mtu)
			if isRdAtomic(e.w.Opcode) && e.w.Opcode != rnic.OpRead {
				c.sendOff = 0
			}
			return
		}
	}
	c.sqSend, c.sendOff = c.sqTail, 0
}

// fill builds up to len(txb) packets: Read responses first, then requests.
func (c *Conn) fill() int {
	n := 0
	for n < len(c.txb) && c.rdLen > 0 {
		if j := &c.rdq[c.rdHead]; j.ctl {
			c.txb[n] = append(c.txb[n][:0], j.cbuf[:j.cn]...)
			c.popJob()
		} else {
			c.txb[n] = c.readResp(c.txb[n][:0])
		}
		n++
	}
	if c.fatal || c.rnrPending {
		return n
	}
	for n < len(c.txb) {
		if c.sqSend == c.sqTail {
			w := c.qp.NextSend()
			if w == nil {
				break
			}
			*c.ent(c.sqTail) = sqe{w: w}
			c.sqTail++
		}
		e := c.ent(c.sqSend)
		w := e.w
		if e.done {
			c.sqSend++
			continue
		}
		if isLocal(w.Opcode) {
			if w.Flags&rnic.LocalFence != 0 && !c.qp.IsOldest(w) {
				break
			}
			st := c.qp.ExecLocal(w)
			e.done, e.started = true, true
			c.qp.CompleteSend(w, st)
			c.sqSend++
			c.retire()
			if st != rnic.StatusSuccess {
				c.setFatal(rnic.EventQPFatal, errors.New("rocev2: local operation failed: "+st.String()))
				break
			}
			continue
		}
		if !e.started {
			if w.Flags&rnic.Fence != 0 && c.rdOut > 0 {
				break
			}
			if w.Flags&rnic.LocalFence != 0 && !c.qp.IsOldest(w) {
				break
			}
			if c.typ == UC && (isRdAtomic(w.Opcode) || w.Opcode == rnic.OpSendInv) {
				c.failWQE(e, rnic.StatusLocQPOpErr, errors.New("rocev2: operation not supported on UC"))
				break
			}
		}
		if isRdAtomic(w.Opcode) && !e.counted && c.rdOut >= c.cfg.MaxRdAtomic {
			break
		}
		if c.typ == RC && c.sendPSN.Sub(c.unaPSN) >= uint32(c.cfg.Window) {
			break
		}
		if !e.started {
			e.started = true
			e.first = c.sendPSN
			np := uint32(1)
			if w.Opcode != rnic.OpAtomicCmpSwap && w.Opcode != rnic.OpAtomicFetchAdd {
				np = c.npkts(w.Len)
			}
			e.last = e.first.Add(np - 1)
			c.sendOff = 0
		}
		if isRdAtomic(w.Opcode) && !e.counted {
			e.counted = true
			c.rdOut++
		}
		var fin bool
		c.txb[n], fin = c.request(c.txb[n][:0], e)
		n++
		if c.sendPSN.Distance(c.maxSent) > 0 {
			c.maxSent = c.sendPSN
		}
		if c.ackDeadline.IsZero() {
			c.armAck(time.Now())
		}
		if fin {
			c.sqSend++
			c.sendOff = 0
			if c.typ == UC {
				e.done = true
				c.qp.CompleteSend(w, rnic.StatusSuccess)
				c.unaPSN = c.sendPSN
				c.retire()
			}
		}
	}
	c.qp.CountTx(0, n)
	return n
}

// request builds the next request packet of e at c.sendOff / c.sendPSN.
func (c *Conn) request(b []byte, e *sqe) ([]byte, bool) {
	w := e.w
	h := &c.hdr
	h.PSN = c.sendPSN
	h.SE, h.AckReq = false, false
	off := c.sendOff
	rem := w.Len - off
	n := int(min(rem, uint64(c.mtu)))
	first, last := off == 0, rem <= uint64(c.mtu)
	var payload bool
	switch w.Opcode {
	case rnic.OpSend, rnic.OpSendImm, rnic.OpSendInv:
		payload = true
		switch {
		case first && last:
			h.Opcode = roce.RCSendOnly
		case first:
			h.Opcode = roce.RCSendFirst
		case last:
			h.Opcode = roce.RCSendLast
		default:
			h.Opcode = roce.RCSendMiddle
		}
		if last {
			switch w.Opcode {
			case rnic.OpSendImm:
				h.Opcode++ // SEND_LAST → SEND_LAST_IMM, SEND_ONLY → SEND_ONLY_IMM
				h.Imm = w.Imm
			case rnic.OpSendInv:
				h.Opcode = roce.RCSendLastInv
				if first {
					h.Opcode = roce.RCSendOnlyInv
				}
				h.InvRKey = w.InvalidateSTag
			}
			h.SE = w.Flags&rnic.Solicited != 0
		}
	case rnic.OpWrite, rnic.OpWriteImm:
		payload = true
		switch {
		case first && last:
			h.Opcode = roce.RCWriteOnly
		case first:
			h.Opcode = roce.RCWriteFirst
		case last:
			h.Opcode = roce.RCWriteLast
		default:
			h.Opcode = roce.RCWriteMiddle
		}
		if first {
			h.VA, h.RKey, h.DMALen = w.RemoteAddr, w.RKey, uint32(w.Len)
		}
		if last && w.Opcode == rnic.OpWriteImm {
			h.Opcode++
			h.Imm = w.Imm
			h.SE = w.Flags&rnic.Solicited != 0
		}
	case rnic.OpRead:
		h.Opcode = roce.RCReadRequest
		h.VA, h.RKey, h.DMALen = w.RemoteAddr+off, w.RKey, uint32(rem)
		c.sendPSN = e.last.Add(1)
		c.sendOff = w.Len
		b = h.Append(b, 0)
		return finish(b, 0, c.local, c.remote), true
	case rnic.OpAtomicCmpSwap, rnic.OpAtomicFetchAdd:
		h.Opcode = roce.RCCompareSwap
		h.SwapAdd, h.Compare = w.Swap, w.Compare
		if w.Opcode == rnic.OpAtomicFetchAdd {
			h.Opcode = roce.RCFetchAdd
			h.SwapAdd, h.Compare = w.Compare, 0
		}
		h.VA, h.RKey = w.RemoteAddr, w.RKey
		c.sendPSN = c.sendPSN.Add(1)
		b = h.Append(b, 0)
		return finish(b, 0, c.local, c.remote), true
	}
	if c.typ == UC {
		h.Opcode = h.Opcode.WithService(roce.ServiceUC)
	}
	c.noack++
	if last || c.noack >= c.cfg.AckEvery {
		h.AckReq = c.typ == RC
		c.noack = 0
	}
	b = h.Append(b, n)
	if payload {
		b = gather(b, w.Segs, off, n)
	}
	c.sendOff += uint64(n)
	c.sendPSN = c.sendPSN.Add(1)
	if payload {
		c.qp.CountTx(n, 0)
	}
	return finish(b, n, c.local, c.remote), last
}

// gather appends bytes [off, off+n) of segs to b (b has room: a packet buffer).
func gather(b []byte, segs rnic.Segs, off uint64, n int) []byte {
	k := len(b)
	b = b[:k+n]
	segs.ReadAt(b[k:], off)
	return b
}

// readResp builds the next RDMA READ response packet of the oldest job.
func (c *Conn) readResp(b []byte) []byte {
	j := &c.rdq[c.rdHead]
	h := &c.rhdr
	total := len(j.data)
	rem := total - j.off
	n := min(rem, c.mtu)
	switch {
	case total <= c.mtu:
		h.Opcode = roce.RCReadResponseOnly
	case j.off == 0:
		h.Opcode = roce.RCReadResponseFirst
	case rem <= c.mtu:
		h.Opcode = roce.RCReadResponseLast
	default:
		h.Opcode = roce.RCReadResponseMiddle
	}
	h.PSN = j.psn
	h.AckReq, h.SE = false, false
	h.Syndrome, h.MSN = roce.ACKSyndrome(roce.CreditsUnlimited), c.msn
	b = h.Append(b, n)
	b = append(b, j.data[j.off:j.off+n]...)
	j.off += n
	j.psn = j.psn.Add(1)
	if j.off >= total {
		if !j.dup {
			c.rdReads--
		}
		c.popJob()
	}
	c.qp.CountTx(n, 0)
	return finish(b, n, c.local, c.remote)
}

// ---- completion helpers ----

func (c *Conn) retire() {
	for c.sqHead != c.sqSend && c.ent(c.sqHead).done {
		*c.ent(c.sqHead) = sqe{}
		c.sqHead++
	}
}

func (c *Conn) complete(e *sqe, st rnic.Status) {
	if e.done {
		return
	}
	e.done = true
	if e.counted {
		c.rdOut--
	}
	c.qp.CompleteSend(e.w, st)
}

func (c *Conn) setFatal(ev rnic.EventType, err error) {
	if c.fatal {
		return
	}
	c.fatal = true
	c.err = err
	c.ackDeadline = time.Time{}
	c.rnrPending = false
	c.qp.Fatal(ev, err)
}

func (c *Conn) failWQE(e *sqe, st rnic.Status, err error) {
	c.complete(e, st)
	c.setFatal(rnic.EventQPFatal, err)
}

func (c *Conn) failOldest(st rnic.Status, err error) {
	if debugHook != nil {
		debugHook(c)
	}
	for i := c.sqHead; i != c.sqTail; i++ {
		if e := c.ent(i); !e.done && e.started {
			c.failWQE(e, st, err)
			return
		}
	}
	c.setFatal(rnic.EventQPFatal, err)
}

func (c *Conn) progress() {
	c.retryLeft = c.cfg.RetryCnt
	c.rnrLeft = c.cfg.RNRRetry
	c.seqRetried = false
}

// ackTo acknowledges every request packet with PSN ≤ p (IBTA §9.7.5.1.2:
// ACKs are cumulative). It returns false if a Read or atomic before p is
// still unanswered, in which case its request is retransmitted.
func (c *Conn) ackTo(p roce.PSN) bool {
	if !p.Less(c.maxSent) || p.Less(c.unaPSN.Add(psnMinus1)) {
		return true // outside the window: stale or bogus
	}
	for i := c.sqHead; i != c.sqTail; i++ {
		e := c.ent(i)
		if !e.started {
			break
		}
		if e.done || isLocal(e.w.Opcode) {
			continue
		}
		if !e.last.LessEq(p) {
			break
		}
		if isRdAtomic(e.w.Opcode) {
			// Its PSNs are covered but its response has not arrived: the
			// response was lost; ask again (rxe comp: COMPST_ERROR_RETRY).
			if c.unaPSN.Less(e.first) {
				c.unaPSN = e.first
				c.progress()
			}
			if !c.seqRetried {
				c.seqRetried = true
				c.seek(c.unaPSN)
			}
			c.retire()
			return false
		}
		c.complete(e, rnic.StatusSuccess)
	}
	if c.unaPSN.LessEq(p) {
		c.unaPSN = p.Add(1)
		c.progress()
	}
	if c.sendPSN.Less(c.unaPSN) {
		c.seek(c.unaPSN)
	}
	c.retire()
	return true
}

// psnMinus1 adds −1 to a PSN with PSN.Add.
const psnMinus1 = roce.PSNMask

// entryAt returns the started, unfinished request whose PSN range holds p.
func (c *Conn) entryAt(p roce.PSN) *sqe {
	for i := c.sqHead; i != c.sqTail; i++ {
		e := c.ent(i)
		if !e.started {
			return nil
		}
		if e.done || isLocal(e.w.Opcode) {
			continue
		}
		if p.Sub(e.first) <= e.last.Sub(e.first) {
			return e
		}
	}
	return nil
}

// ---- receive path (called by the endpoint under c.mu) ----

func (c *Conn) input(r *rxCtx, p *roce.Packet, from netip.AddrPort) {
	op := p.Opcode()
	want := roce.ServiceRC
	if c.typ == UC {
		want = roce.ServiceUC
	}
	if op.Service() != want {
		c.e.RxDropped.Add(1)
		return
	}
	c.qp.CountRx(len(p.Payload), 1)
	if op.IsResponse() {
		if c.typ == RC && !c.fatal {
			c.completer(p)
		}
		return
	}
	if c.fatal || c.qp.QP().State() == rnic.QPError {
		return
	}
	if c.typ == UC {
		c.ucInput(r, p)
		return
	}
	psn := p.BTH.PSN()
	d := psn.Distance(c.ePSN)
	if d > 0 {
		// IBTA §9.7.5.1.1: out of sequence; NAK once per expected PSN.
		if !c.nakSent {
			c.nakSent = true
			c.ackPending = false
			c.sendAck(r, roce.NAKSyndrome(roce.NAKPSNSequenceError), c.ePSN, 0, false)
		}
		return
	}
	if d < 0 {
		c.duplicate(r, p)
		return
	}
	c.nakSent = false
	c.execute(r, p)
}

func (c *Conn) popJob() {
	c.rdq[c.rdHead] = rdJob{}
	c.rdHead = (c.rdHead + 1) % len(c.rdq)
	c.rdLen--
}

// sendAck sends an ACK, NAK or atomic ACK from the receive goroutine, or
// queues it behind pending READ responses to keep responses in PSN order.
func (c *Conn) sendAck(r *rxCtx, syn roce.Syndrome, psn roce.PSN, orig uint64, atomicAck bool) {
	var buf []byte
	var k *ctlPkt
	var j *rdJob
	if c.rdLen > 0 {
		if c.rdLen == len(c.rdq) {
			return
		}
		j = &c.rdq[(c.rdHead+c.rdLen)%len(c.rdq)]
		*j = rdJob{ctl: true}
		c.rdLen++
		buf = j.cbuf[:0]
		c.wake()
	} else {
		if k = r.alloc(c.remote); k == nil {
			return
		}
		buf = k.buf[:0]
	}
	h := &c.rhdr
	h.Opcode = roce.RCAck
	if atomicAck {
		h.Opcode = roce.RCAtomicAck
		h.OrigData = orig
	}
	h.PSN, h.AckReq, h.SE = psn, false, false
	h.Syndrome, h.MSN = syn, c.msn
	b := h.Append(buf, 0)
	b = finish(b, 0, c.local, c.remote)
	if k != nil {
		k.n = len(b)
	} else {
		j.cn = len(b)
	}
	if syn.IsNAK() || syn.IsRNRNAK() {
		c.qp.CountNAK()
	}
}

func (c *Conn) flushAck(r *rxCtx) {
	if c.ackPending && !c.dead {
		c.ackPending = false
		c.sendAck(r, roce.ACKSyndrome(roce.CreditsUnlimited), c.ePSN.Add(psnMinus1), 0, false)
	}
}

// nak answers the packet at ePSN with a NAK and moves the QP to Error
// (IBTA §9.7.5.2.x class B/C errors; rxe do_class_ac_error).
func (c *Conn) nak(r *rxCtx, code roce.NAKCode) {
	c.ackPending = false
	c.sendAck(r, roce.NAKSyndrome(code), c.ePSN, 0, false)
	ev := rnic.EventQPReqErr
	if code == roce.NAKRemoteAccessError {
		ev = rnic.EventQPAccessErr
	} else if code == roce.NAKRemoteOperationalError {
		ev = rnic.EventQPFatal
	}
	if c.curRecv != nil {
		c.qp.CompleteRecv(c.curRecv, rnic.RecvResult{Status: rnic.StatusWRFlushErr, Opcode: rnic.WCRecv})
		c.curRecv = nil
	}
	c.flushResp = true
	c.setFatal(ev, &NAKError{Code: code, PSN: c.ePSN, Sent: true})
}

func (c *Conn) duplicate(r *rxCtx, p *roce.Packet) {
	psn := p.BTH.PSN()
	switch op := p.Opcode(); op {
	case roce.RCReadRequest:
		// Re-execute from the duplicate's PSN with its own RETH (rxe resp:
		// duplicate_request); the memory is read again.
		if c.rdLen == len(c.rdq) {
			return
		}
		n := uint64(p.RETH.DMALen())
		var buf []byte
		if n > 0 {
			b, err := c.qp.ResolveRemote(p.RETH.RKey(), p.RETH.VA(), n, rnic.AccessRemoteRead)
			if err != nil {
				return
			}
			buf = b
		}
		c.pushRead(psn, buf, true)
	case roce.RCCompareSwap, roce.RCFetchAdd:
		for i := range c.atom {
			if a := &c.atom[i]; a.ok && a.psn == psn {
				c.sendAck(r, roce.ACKSyndrome(roce.CreditsUnlimited), psn, a.orig, true)
				return
			}
		}
	default:
		c.ackPending = true
	}
}

func (c *Conn) pushRead(psn roce.PSN, buf []byte, dup bool) {
	i := (c.rdHead + c.rdLen) % len(c.rdq)
	c.rdq[i] = rdJob{psn: psn, data: buf, dup: dup}
	c.rdLen++
	if !dup {
		c.rdReads++
	}
	c.wake()
}

var debugHook func(c *Conn)

func isSendOp(op roce.Opcode) bool {
	switch op.WithService(roce.ServiceRC) {
	case roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast, roce.RCSendLastImm, roce.RCSendOnly,
		roce.RCSendOnlyImm, roce.RCSendLastInv, roce.RCSendOnlyInv:
		return true
	}
	return false
}

func isWriteOp(op roce.Opcode) bool {
	switch op.WithService(roce.ServiceRC) {
	case roce.RCWriteFirst, roce.RCWriteMiddle, roce.RCWriteLast, roce.RCWriteLastImm, roce.RCWriteOnly,
		roce.RCWriteOnlyImm:
		return true
	}
	return false
}

// execute runs the request at the expected PSN (rxe resp: check_op_seq,
// check_op_valid, check_resource, check_rkey, execute). uc selects the
// UC rules: errors drop the message silently instead of a NAK.
// takeRecv takes the receive WQE for an incoming SEND or WRITE with immediate. With none
// posted it answers an RNR NAK with our min_rnr_timer (RC, IBTA §9.7.5.2.8) or drops the
// message (UC) and returns nil; it also returns nil when the QP cannot take receives.
func (c *Conn) takeRecv(r *rxCtx, uc bool, fail func(roce.NAKCode)) (*rnic.RecvWQE, rnic.Status) {
	w, st := c.qp.TakeRecv()
	if w != nil || st != rnic.StatusSuccess {
		return w, st
	}
	if uc {
		fail(0)
		return nil, st
	}
	c.ackPending = false
	c.sendAck(r, roce.RNRNAKSyndrome(c.cfg.MinRNRTimer), c.ePSN, 0, false)
	return nil, st
}

func (c *Conn) execute(r *rxCtx, p *roce.Packet) {
	op := p.Opcode()
	uc := c.typ == UC
	fail := func(code roce.NAKCode) {
		if uc {
			c.curKind = kindDrop
			c.curOff = 0
			c.ePSN = c.ePSN.Add(1)
			return
		}
		c.nak(r, code)
	}
	firstish := op.IsFirst() || op.IsOnly()
	lastish := op.IsLast() || op.IsOnly()
	n := len(p.Payload)
	switch {
	case isSendOp(op):
		if firstish != (c.curKind == kindNone) || (!firstish && c.curKind != kindSend) {
			fail(roce.NAKInvalidRequest)
			return
		}
		if c.curRecv == nil {
			w, st := c.takeRecv(r, uc, fail)
			if w == nil {
				return
			}
			c.curRecv = w
			c.curOff = 0
			if st != rnic.StatusSuccess {
				c.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
				c.curRecv = nil
				fail(roce.NAKRemoteOperationalError)
				return
			}
		}
		w := c.curRecv
		if (!lastish && n != c.mtu) || (lastish && n > c.mtu) {
			fail(roce.NAKInvalidRequest)
			return
		}
		if c.curOff+uint64(n) > w.Len {
			c.qp.CompleteRecv(w, rnic.RecvResult{Status: rnic.StatusLocLenErr, Opcode: rnic.WCRecv})
			c.curRecv = nil
			fail(roce.NAKInvalidRequest)
			return
		}
		c.curKind = kindSend
		w.Segs.WriteAt(p.Payload, c.curOff)
		c.curOff += uint64(n)
		if lastish {
			res := rnic.RecvResult{Opcode: rnic.WCRecv, ByteLen: uint32(c.curOff)}
			if p.ImmDt != nil {
				res.Flags |= rnic.WCWithImm
				res.Imm = p.ImmDt.Imm()
			}
			if p.IETH != nil {
				if err := c.qp.Invalidate(p.IETH.RKey()); err != nil {
					c.qp.CompleteRecv(w, rnic.RecvResult{Status: rnic.StatusRemInvReqErr, Opcode: rnic.WCRecv})
					c.curRecv = nil
					fail(roce.NAKInvalidRequest)
					return
				}
				res.Flags |= rnic.WCWithInv
				res.InvalidatedSTag = p.IETH.RKey()
			}
			if p.BTH.SE() {
				res.Flags |= rnic.WCSolicited
			}
			c.curRecv = nil
			c.curKind = kindNone
			c.msn = (c.msn + 1) & roce.MSNMask
			c.qp.CompleteRecv(w, res)
		}
	case isWriteOp(op):
		if firstish != (c.curKind == kindNone) || (!firstish && c.curKind != kindWrite) {
			fail(roce.NAKInvalidRequest)
			return
		}
		if p.ImmDt != nil && c.curRecv == nil {
			w, st := c.takeRecv(r, uc, fail)
			if w == nil {
				return
			}
			c.curRecv = w
			if st != rnic.StatusSuccess {
				c.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecvRDMAWithImm})
				c.curRecv = nil
				fail(roce.NAKRemoteOperationalError)
				return
			}
		}
		if firstish {
			l := uint64(p.RETH.DMALen())
			c.curWBuf = nil
			if l > 0 {
				b, err := c.qp.ResolveRemote(p.RETH.RKey(), p.RETH.VA(), l, rnic.AccessRemoteWrite)
				if err != nil {
					fail(roce.NAKRemoteAccessError)
					return
				}
				c.curWBuf = b
			} else {
				c.curWBuf = c.curWBuf[:0:0]
			}
			c.curOff = 0
			c.curKind = kindWrite
		}
		if (!lastish && n != c.mtu) || c.curOff+uint64(n) > uint64(len(c.curWBuf)) ||
			(lastish && c.curOff+uint64(n) != uint64(len(c.curWBuf))) {
			fail(roce.NAKInvalidRequest)
			return
		}
		copy(c.curWBuf[c.curOff:], p.Payload)
		c.curOff += uint64(n)
		if lastish {
			c.curKind = kindNone
			c.msn = (c.msn + 1) & roce.MSNMask
			if p.ImmDt != nil {
				w := c.curRecv
				c.curRecv = nil
				res := rnic.RecvResult{Opcode: rnic.WCRecvRDMAWithImm, Flags: rnic.WCWithImm,
					ByteLen: uint32(len(c.curWBuf)), Imm: p.ImmDt.Imm()}
				if p.BTH.SE() {
					res.Flags |= rnic.WCSolicited
				}
				c.qp.CompleteRecv(w, res)
			}
			c.curWBuf = nil
		}
	case op == roce.RCReadRequest:
		if c.curKind != kindNone {
			fail(roce.NAKInvalidRequest)
			return
		}
		if c.rdReads >= c.cfg.MaxDestRd {
			fail(roce.NAKInvalidRequest) // more than max_dest_rd_atomic outstanding
			return
		}
		if c.rdLen == len(c.rdq) {
			return // queue full of duplicates and ACKs: let the requester retry
		}
		l := uint64(p.RETH.DMALen())
		var buf []byte
		if l > 0 {
			b, err := c.qp.ResolveRemote(p.RETH.RKey(), p.RETH.VA(), l, rnic.AccessRemoteRead)
			if err != nil {
				fail(roce.NAKRemoteAccessError)
				return
			}
			buf = b
		}
		c.msn = (c.msn + 1) & roce.MSNMask
		c.pushRead(c.ePSN, buf, false)
		c.ePSN = c.ePSN.Add(c.npkts(l))
		return
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		if c.curKind != kindNone {
			fail(roce.NAKInvalidRequest)
			return
		}
		a := p.AtomicETH
		if a.VA()%8 != 0 {
			fail(roce.NAKInvalidRequest)
			return
		}
		b, err := c.qp.ResolveRemote(a.RKey(), a.VA(), 8, rnic.AccessRemoteAtomic)
		if err != nil {
			fail(roce.NAKRemoteAccessError)
			return
		}
		// IBTA §9.4.5; one lock per device, across transports
		orig := c.qp.Atomic(b, func(v uint64) uint64 {
			if op == roce.RCFetchAdd {
				return v + a.SwapAdd()
			}
			if v == a.Compare() {
				return a.SwapAdd()
			}
			return v
		})
		c.atom[c.atomNext] = atomRes{psn: c.ePSN, orig: orig, ok: true}
		c.atomNext = (c.atomNext + 1) % len(c.atom)
		c.msn = (c.msn + 1) & roce.MSNMask
		c.sendAck(r, roce.ACKSyndrome(roce.CreditsUnlimited), c.ePSN, orig, true)
		c.ePSN = c.ePSN.Add(1)
		return
	default:
		fail(roce.NAKInvalidRequest)
		return
	}
	c.ePSN = c.ePSN.Add(1)
	if p.BTH.AckReq() {
		c.ackPending = true
	}
}

// ucInput is the UC responder: no ACKs; a PSN gap abandons the message in
// progress and resynchronises on the next First or Only packet (IBTA §9.8.3).
func (c *Conn) ucInput(r *rxCtx, p *roce.Packet) {
	psn := p.BTH.PSN()
	op := p.Opcode()
	if psn != c.ePSN {
		if psn.Less(c.ePSN) && psn.Distance(c.ePSN) > -(1<<22) {
			return // duplicate
		}
		c.curKind, c.curOff, c.curWBuf = kindNone, 0, nil
		c.ePSN = psn
	}
	if c.curKind == kindDrop {
		if op.IsFirst() || op.IsOnly() {
			c.curKind = kindNone
		} else {
			if op.IsLast() {
				c.curKind = kindNone
			}
			c.ePSN = c.ePSN.Add(1)
			return
		}
	}
	if c.curKind == kindNone && !(op.IsFirst() || op.IsOnly()) {
		c.ePSN = c.ePSN.Add(1)
		return
	}
	c.execute(r, p)
}

// completer handles ACKs and responses (rxe comp: check_psn, check_ack, do_read, do_atomic).
func (c *Conn) completer(p *roce.Packet) {
	psn := p.BTH.PSN()
	op := p.Opcode()
	if !psn.Less(c.maxSent) || psn.Less(c.unaPSN.Add(psnMinus1)) {
		return
	}
	var syn roce.Syndrome
	if p.AETH != nil {
		syn = p.AETH.Syndrome()
	}
	now := time.Now()
	switch op {
	case roce.RCAck:
		switch {
		case syn.IsACK():
			c.ackTo(psn)
		case syn.IsRNRNAK():
			if !c.ackTo(psn.Add(psnMinus1)) || psn != c.unaPSN || c.rnrPending {
				break
			}
			c.qp.CountNAK()
			if c.rnrLeft == 0 {
				c.failOldest(rnic.StatusRNRRetryExcErr, ErrRNRRetryExceeded)
				return
			}
			if c.rnrLeft != 7 {
				c.rnrLeft--
			}
			c.rnrPending = true
			c.rnrUntil = now.Add(syn.RNRTimer().Duration())
			c.rnrPSN = psn
			c.ackDeadline = time.Time{}
			c.wake()
			return
		case syn.IsNAK():
			if !c.ackTo(psn.Add(psnMinus1)) || psn != c.unaPSN {
				break
			}
			c.qp.CountNAK()
			code := syn.NAKCode()
			if code == roce.NAKPSNSequenceError {
				if c.lastNakValid && c.lastNak == psn {
					break
				}
				if c.retryLeft == 0 {
					c.failOldest(rnic.StatusRetryExcErr, ErrRetryExceeded)
					return
				}
				c.retryLeft--
				c.lastNak, c.lastNakValid = psn, true
				c.qp.CountRetransmit()
				c.seek(psn)
				break
			}
			st := rnic.StatusRemOpErr
			switch code {
			case roce.NAKInvalidRequest:
				st = rnic.StatusRemInvReqErr
			case roce.NAKRemoteAccessError:
				st = rnic.StatusRemAccessErr
			}
			err := &NAKError{Code: code, PSN: psn}
			if e := c.entryAt(psn); e != nil {
				c.failWQE(e, st, err)
			} else {
				c.setFatal(rnic.EventQPFatal, err)
			}
			return
		}
	case roce.RCAtomicAck:
		if !syn.IsACK() || !c.ackTo(psn.Add(psnMinus1)) {
			break
		}
		e := c.entryAt(psn)
		if e == nil || e.first != psn || (e.w.Opcode != rnic.OpAtomicCmpSwap && e.w.Opcode != rnic.OpAtomicFetchAdd) {
			break
		}
		binary.NativeEndian.PutUint64(e.w.Segs[0], p.AtomicAckETH.OrigData())
		c.complete(e, rnic.StatusSuccess)
		c.unaPSN = psn.Add(1)
		c.progress()
		if c.sendPSN.Less(c.unaPSN) {
			c.seek(c.unaPSN)
		}
		c.retire()
	default: // READ responses
		e := c.entryAt(psn)
		if e == nil || e.w.Opcode != rnic.OpRead {
			break
		}
		exp := e.first.Add(uint32(e.got / uint64(c.mtu)))
		if psn != exp {
			if exp.Less(psn) && !c.seqRetried {
				// A response is missing: retransmit from the oldest unanswered PSN.
				c.seqRetried = true
				c.qp.CountRetransmit()
				c.ackTo(e.first.Add(psnMinus1))
				c.seek(c.unaPSN)
			}
			break
		}
		if !c.ackTo(e.first.Add(psnMinus1)) {
			break
		}
		rem := e.w.Len - e.got
		n := uint64(len(p.Payload))
		last := op == roce.RCReadResponseLast || op == roce.RCReadResponseOnly
		if n != min(rem, uint64(c.mtu)) || last != (rem <= uint64(c.mtu)) {
			c.failWQE(e, rnic.StatusBadRespErr, errors.New("rocev2: bad READ response length"))
			return
		}
		e.w.Segs.WriteAt(p.Payload, e.got)
		e.got += n
		c.unaPSN = psn.Add(1)
		c.progress()
		if last {
			c.complete(e, rnic.StatusSuccess)
			if c.sendPSN.Less(c.unaPSN) {
				c.seek(c.unaPSN)
			}
			c.retire()
		}
	}
	if c.lastNakValid && c.lastNak.Less(c.unaPSN) {
		c.lastNakValid = false
	}
	c.armAck(now)
	c.wake()
}
