package rocev2

// The requester (IBTA Vol.1 §9.7.4, rxe req.c): turns send WQEs into request packets —
// segmentation to the path MTU, PSNs, AckReq, the unacknowledged window, READ/atomic
// depth, fences — and the retransmission timers.

import (
	"errors"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// requester is the state the requester and the completer share (rxe's qp->req and
// qp->comp): the send queue window and its PSNs, retry counters and timers.
type requester struct {
	sq             []sqe // ring of the WQEs taken from the QP, grown up to sqMax
	sqMax          int
	sqHead, sqSend uint64
	sqTail         uint64
	txBlocked      bool // fill stopped for the window, a fence or the READ/atomic depth
	sendPSN        roce.PSN
	maxSent        roce.PSN // one past the highest PSN sent
	sendOff        uint64
	unaPSN         roce.PSN // oldest unacknowledged PSN
	noack          int
	rdOut          int
	completed      uint64 // send WQEs completed (complete), which may unblock a fence
	retryLeft      uint8
	rnrLeft        uint8
	ackDeadline    time.Time
	ackRestart     bool // armAck restarted the armed ACK timeout: timersLocked moves ackDeadline
	rnrPending     bool
	rnrUntil       time.Time
	rnrPSN         roce.PSN
	lastNak        roce.PSN
	lastNakValid   bool
	seqRetried     bool
	hdr            roce.Header
	ahead          int    // packets of the WQEs taken and not started (takeAhead)
	win            window // unacknowledged PSNs allowed (window.go)

	// Keepalive (Config.KeepAlive): when the connection carried nothing for
	// an interval, a zero-length RDMA WRITE probes the peer; a dead peer
	// exhausts its retries like any request.
	kaNext   time.Time // next check; zero: keepalive off
	kaSeen   uint64    // packets counted (less probes and their ACKs) at the last change
	kaIdle   time.Time // when kaSeen last changed
	probeOut bool      // a probe is outstanding at probePSN
	probePSN roce.PSN
}

// sqe is the requester's state of one send WQE between NextSend and completion.
type sqe struct {
	w           *rnic.SendWQE
	first, last roce.PSN // PSNs of the request (a Read: of its responses)
	started     bool
	counted     bool // counted in rdOut
	done        bool
	got         uint64 // Read: response bytes placed
	np          int    // packets, counted in requester.ahead until started
	crc         *pcrc  // payload CRCs computed ahead (txcrc.go), or nil
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
		c.armAck()
		return
	}
	if c.ackDeadline.IsZero() || now.Before(c.ackDeadline) {
		return
	}
	if c.unaPSN == c.maxSent {
		c.ackDeadline = time.Time{}
		return
	}
	if c.ackRestart {
		// Restarted since it was armed (armAck): the timeout runs from now.
		c.ackRestart = false
		c.ackDeadline = now.Add(c.tmo)
		return
	}
	// Local ACK timeout (IBTA §9.7.6.1.3): retransmit from the oldest unacknowledged PSN.
	// With nothing outstanding but a keepalive probe, the probe is what is
	// retransmitted, and a dead peer exhausts the retries.
	if c.retryLeft == 0 {
		c.failOldest(rnic.StatusRetryExcErr, ErrRetryExceeded)
		return
	}
	c.retryLeft--
	c.qp.CountRetransmit()
	c.lost()
	c.seek(c.unaPSN)
	c.seqRetried = false
	c.ackDeadline, c.ackRestart = now.Add(c.tmo), false
}

// keepalive probes the peer when the connection carried no packet in either
// direction (probes and their ACKs aside) for Config.KeepAlive and has nothing
// outstanding. It looks every quarter of the interval, so a probe leaves at most
// 1¼ intervals after the last packet.
func (c *Conn) keepalive(now time.Time) {
	if c.kaNext.IsZero() || now.Before(c.kaNext) {
		return
	}
	c.kaNext = now.Add(c.e.cfg.KeepAlive / 4)
	cnt := c.qp.QP().Counters()
	seen := cnt.RxSegments.Load() + cnt.TxSegments.Load()
	if seen != c.kaSeen {
		c.kaSeen, c.kaIdle = seen, now
		return
	}
	if now.Sub(c.kaIdle) >= c.e.cfg.KeepAlive && !c.probeOut && c.unaPSN == c.maxSent && c.sqHead == c.sqTail && !c.fatal {
		c.probeOut, c.probePSN = true, c.sendPSN
		c.kaIdle = now
	}
}

// probe builds the keepalive probe: a zero-length RDMA WRITE, which needs no
// R_Key or address (IBTA C9-88) and changes nothing at the peer but its ACK.
func (c *Conn) probe(b []byte) []byte {
	h := &c.hdr
	h.Opcode, h.PSN, h.SE, h.AckReq = roce.RCWriteOnly, c.sendPSN, false, true
	h.VA, h.RKey, h.DMALen = 0, 0, 0
	b = h.Append(b, 0)
	c.noack = 0
	c.kaSeen++ // the probe is not traffic
	c.sendPSN = c.sendPSN.Add(1)
	if c.sendPSN.Distance(c.maxSent) > 0 {
		c.maxSent = c.sendPSN
	}
	if c.ackDeadline.IsZero() {
		c.armAck()
	}
	return finish(b, 0, c.local, c.remote)
}

// armAck (re)starts the local ACK timeout (IBTA §9.7.6.1.3) while requests are
// unacknowledged, and stops it otherwise. Only a timeout that is not running reads the
// clock: a restart is recorded (ackRestart), and when the deadline comes the timer runs
// from then rather than retransmitting (timersLocked). So each ACK or READ response of a
// stream costs no clock read, and a retransmission comes between one and two timeouts
// after the last restart rather than exactly one (Config.Timeout).
func (c *Conn) armAck() {
	if c.typ != RC || c.tmo == 0 || c.unaPSN == c.maxSent {
		c.ackDeadline, c.ackRestart = time.Time{}, false
		return
	}
	if !c.ackDeadline.IsZero() {
		c.ackRestart = true
		return
	}
	c.ackDeadline = time.Now().Add(c.tmo)
}

// growSQ doubles the requester's ring (from 4, up to sqMax), keeping each entry at its
// index; the caller holds no entry pointer.
func (c *Conn) growSQ() {
	n := uint64(min(max(2*len(c.sq), 4), c.sqMax))
	sq := make([]sqe, n)
	for i := c.sqHead; i != c.sqTail; i++ {
		sq[i%n] = c.sq[i%uint64(len(c.sq))]
	}
	c.sq = sq
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
		if p.Less(e.first) { // p is a keepalive probe's, sent before e
			c.sqSend, c.sendOff = i, 0
			return
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

// take takes the next posted WQE into the ring at sqTail: ok, or empty when none is
// waiting (neither when the ring is full).
func (c *Conn) take() (ok, empty bool) {
	if c.sqTail-c.sqHead == uint64(len(c.sq)) {
		if len(c.sq) >= c.sqMax {
			return false, false
		}
		c.growSQ()
	}
	w := c.qp.NextSend()
	if w == nil {
		return false, true
	}
	e := c.ent(c.sqTail)
	*e = sqe{w: w, np: 1}
	if !isRdAtomic(w.Opcode) && !isLocal(w.Opcode) {
		e.np = int(c.npkts(w.Len))
	}
	c.sqTail++
	if c.ahead+e.np > c.e.txSize || c.e.crcHelpNow {
		// Some of its packets are beyond the next batch: a helper has time to compute
		// their payload CRCs. (For a WQE that goes out whole in the next batch a job
		// would cost the goroutine more than it saves: nobody gets to it first.)
		c.crcJob(e)
	}
	c.ahead += e.np
	return true, false
}

// takeAhead takes posted RC WQEs beyond the send cursor, up to a window of packets not
// started, so that their payload CRCs can be computed before fill reaches them
// (txcrc.go). It takes none after a local operation (RegMR, LocalInv, BindMW) that has
// not executed: the WQEs after it are resolved (NextSend checks their keys) only once it
// has. empty reports that it found no WQE waiting.
func (c *Conn) takeAhead() (empty bool) {
	if c.typ != RC || c.fatal {
		return false
	}
	for c.ahead < c.win.n {
		if c.sqTail != c.sqSend {
			if e := c.ent(c.sqTail - 1); isLocal(e.w.Opcode) && !e.done {
				return false
			}
		}
		if ok, empty := c.take(); !ok {
			return empty
		}
	}
	return false
}

// fill builds up to a batch of packets in c.txb: Read responses, then requests, then an
// ACK a Wait deferred (owedAck).
func (c *Conn) fill() int {
	owed := c.owesAck()
	lim := len(c.txb.b)
	if owed {
		lim-- // its place
	}
	n := c.fillPackets(lim)
	c.qp.CountTx(c.txBytes, n) // once per batch: four atomic adds (QP and device)
	c.txBytes = 0
	if owed {
		n = c.owedAck(n)
	}
	return n
}

// owesAck reports whether the responder owes the ACK that a receive run by a Wait
// deferred (Endpoint.endBatch). Outside a receive batch it owes one only then: every
// batch ends by sending its ACK or deferring it. The caller holds c.mu.
func (c *Conn) owesAck() bool {
	return c.ackPending && !c.inBatch && !c.dead && !c.fatal
}

// owedAck builds the owed ACK (owesAck) as c.txb's packet n, so that it leaves with the
// packets before it, and returns n+1. It goes last: an ACK is shorter than a request that
// carries data, and UDP GSO sends a run of equal datagrams and a shorter last one as one
// message (UDPLink.sendParts), so a ping-pong's answer and the ACK leave in one
// UDP_SEGMENT send, one packet through the kernel until it is segmented (bench/README has
// the strace). The caller holds c.mu.
func (c *Conn) owedAck(n int) int {
	c.ackPending, c.ackOwed = false, false
	c.ackJoined++
	c.txb.b[n] = c.coalescedAck(c.txb.b[n][:0])
	c.txb.setParts(n, nil)
	return n + 1
}

// fillPackets is fill without the traffic count and the owed ACK: it builds up to lim
// packets in c.txb, adding their payload bytes to c.txBytes, and returns how many.
func (c *Conn) fillPackets(lim int) int {
	txb := c.txb.b[:lim]
	n := 0
	for n < len(txb) && c.rdLen > 0 {
		if j := &c.rdq[c.rdHead]; j.ctl {
			txb[n] = append(txb[n][:0], j.cbuf[:j.cn]...)
			c.popJob()
		} else {
			txb[n] = c.readResp(txb[n][:0])
		}
		c.txb.setParts(n, nil)
		n++
	}
	if c.fatal || c.rnrPending {
		return n
	}
	if c.probeOut && c.sendPSN == c.probePSN && n < len(txb) {
		txb[n] = c.probe(txb[n][:0])
		c.txb.setParts(n, nil)
		n++
	}
	c.txBlocked = false
	// The send queue is asked for more work at most once after it was found empty (a
	// post after that wakes the goroutine again: SendQueued).
	empty := c.takeAhead()
	for n < len(txb) {
		if c.sqSend == c.sqTail {
			if empty {
				break
			}
			var ok bool
			if ok, empty = c.take(); !ok {
				break
			}
		}
		e := c.ent(c.sqSend)
		w := e.w
		if e.done {
			c.sqSend++
			continue
		}
		if isLocal(w.Opcode) {
			if w.Flags&rnic.LocalFence != 0 && !c.qp.IsOldest(w) {
				c.txBlocked = true
				break
			}
			st := c.qp.ExecLocal(w)
			c.ahead -= e.np
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
			if w.Flags&rnic.Fence != 0 && c.rdOut > 0 || w.Flags&rnic.LocalFence != 0 && !c.qp.IsOldest(w) {
				c.txBlocked = true
				break
			}
			if c.typ == UC && (isRdAtomic(w.Opcode) || w.Opcode == rnic.OpSendInv) {
				c.failWQE(e, rnic.StatusLocQPOpErr, errors.New("rocev2: operation not supported on UC"))
				break
			}
		}
		if isRdAtomic(w.Opcode) && !e.counted && c.rdOut >= c.cfg.MaxRdAtomic ||
			c.typ == RC && c.win.full(c.sendPSN.Sub(c.unaPSN)) {
			c.txBlocked = true // an ACK or response lets it go on (completer)
			break
		}
		if !e.started {
			e.started = true
			c.ahead -= e.np
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
		var body []byte
		txb[n], body, fin = c.request(txb[n][:0], e)
		c.txb.setParts(n, body)
		n++
		if !c.used {
			c.used = true // sending is using the connection (CMConfig.FirstMessageTimeout)
			c.firstBy = time.Time{}
		}
		if c.sendPSN.Distance(c.maxSent) > 0 {
			c.maxSent = c.sendPSN
		}
		if c.ackDeadline.IsZero() {
			c.armAck()
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
	if !empty {
		c.takeAhead()
	}
	return n
}

// request builds the next request packet of e at c.sendOff / c.sendPSN in b. On a
// gatherLink a payload that one segment of the WQE holds is not copied: it is returned
// as body, and b is the headers, pad and ICRC, the packet's parts (txBatch.setParts).
// Only RC: its WQE completes when the peer acknowledges it, after the kernel copied the
// packet (a retransmission racing the ACK of the original may carry bytes the application
// changed after the completion under the old ICRC: the peer drops that duplicate as
// corrupt), where a UC WQE completes as its last packet is built (fill), before the send.
// (READ responses are always copied: the responder's memory may change under them, and a
// packet must match its ICRC.)
func (c *Conn) request(b []byte, e *sqe) (pkt, body []byte, last bool) {
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
	case rnic.OpSend, rnic.OpSendImm, rnic.OpSendInv, rnic.OpWrite, rnic.OpWriteImm:
		payload = true
		pf, pl := first, last // the packet's place in its message
		switch {
		case w.Opcode == rnic.OpWrite && c.typ == RC && c.e.writeOnly:
			// Each packet its own WRITE Only (Endpoint.writeOnly), naming its part.
			pf, pl = true, true
			h.VA, h.RKey, h.DMALen = w.RemoteAddr+off, w.RKey, uint32(n)
		case first && (w.Opcode == rnic.OpWrite || w.Opcode == rnic.OpWriteImm):
			h.VA, h.RKey, h.DMALen = w.RemoteAddr, w.RKey, uint32(w.Len)
		}
		h.Opcode, _ = roce.PacketOpcode(rcOnlyOpcode(w.Opcode), pf, pl)
		if last {
			switch w.Opcode {
			case rnic.OpSendImm, rnic.OpWriteImm:
				h.Imm = w.Imm
			case rnic.OpSendInv:
				h.InvRKey = w.InvalidateSTag
			}
			h.SE = w.Opcode != rnic.OpWrite && w.Flags&rnic.Solicited != 0
		}
	case rnic.OpRead:
		h.Opcode = roce.RCReadRequest
		h.VA, h.RKey, h.DMALen = w.RemoteAddr+off, w.RKey, uint32(rem)
		c.sendPSN = e.last.Add(1)
		c.sendOff = w.Len
		b = h.Append(b, 0)
		return finish(b, 0, c.local, c.remote), nil, true
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
		return finish(b, 0, c.local, c.remote), nil, true
	}
	if c.typ == UC {
		h.Opcode = h.Opcode.WithService(roce.ServiceUC)
	}
	c.noack++
	// AckReq every AckEvery packets, and at least twice per window: a window smaller
	// than AckEvery would otherwise wait for the ACK timeout.
	if last || c.noack >= min(c.cfg.AckEvery, max(c.win.n/2, 1)) {
		h.AckReq = c.typ == RC
		c.noack = 0
	}
	b = h.Append(b, n)
	hl := len(b)
	if payload && n > 0 {
		if c.e.gather != nil && n >= minGather && c.typ == RC {
			if c.segs = w.Segs.Slices(c.segs[:0], off, uint64(n)); len(c.segs) == 1 {
				body = c.segs[0]
			}
			clear(c.segs) // hold no registered memory past the packet
		}
		if body == nil {
			b = gather(b, w.Segs, off, n)
		}
	}
	c.sendOff += uint64(n)
	c.sendPSN = c.sendPSN.Add(1)
	if payload {
		c.txBytes += n
	}
	if e.crc != nil && n == c.mtu {
		p := body
		if p == nil {
			p = b[hl:]
		}
		if part, ok := e.crc.part(int(off/uint64(c.mtu)), p); ok {
			c.txJoined++
			return c.finishJoined(b[:hl], body, n, part), body, last
		}
	}
	return c.finishTx(b, body, n), body, last
}

// minGather is the smallest payload request sends uncopied: below it a copy costs less
// than the two more iovecs the kernel walks.
const minGather = 512

// finishTx is finish for the packets fill builds (under c.mu), with the ICRC's
// pseudo-header state kept for the last packet length: a stream of full-sized
// packets computes it once. b is the headers and the n-byte payload, or with body
// (n bytes) the headers alone, the payload following them on the wire.
func (c *Conn) finishTx(b, body []byte, n int) []byte {
	hl := len(b)
	b = roce.AppendPad(b, n)
	if ib := len(b) + len(body); ib != c.txICRCLen {
		c.txICRCLen, c.txICRC = ib, icrcStart(c.local, c.remote, ib)
	}
	if body == nil {
		return roce.AppendICRC(b, roce.ICRCAddTransport(c.txICRC, b))
	}
	crc := roce.ICRCAdd(roce.ICRCAddTransport(c.txICRC, b[:hl]), body)
	return roce.AppendICRC(b, roce.ICRCAdd(crc, b[hl:]))
}

// finishJoined is finishTx for a packet whose n-byte payload has the CRC part
// (roce.ICRCPart, computed ahead: txcrc.go): the ICRC (IBTA Vol.1 §7.8.1, Annex A17.3.3)
// runs over the headers h alone and joins the payload's CRC with a multiplication
// (roce.ICRCJoin). The payload is body, or follows the headers in h's buffer (copied).
func (c *Conn) finishJoined(h, body []byte, n int, part uint32) []byte {
	ib := len(h) + n + roce.PadLen(n)
	if ib != c.txICRCLen {
		c.txICRCLen, c.txICRC = ib, icrcStart(c.local, c.remote, ib)
	}
	crc := roce.ICRCJoin(roce.ICRCAddTransport(c.txICRC, h), part, n)
	b := h
	if body == nil {
		b = h[:len(h)+n]
	}
	pad := len(b)
	b = roce.AppendPad(b, n)
	return roce.AppendICRC(b, roce.ICRCAdd(crc, b[pad:]))
}

// gather appends bytes [off, off+n) of segs to b (b has room: a packet buffer).
func gather(b []byte, segs rnic.Segs, off uint64, n int) []byte {
	k := len(b)
	b = b[:k+n]
	segs.ReadAt(b[k:], off)
	return b
}

// rcOnlyOpcode is the RC ONLY opcode of a work request that carries a payload (IBTA
// Vol.1 §9.2); roce.PacketOpcode picks a packet's FIRST, MIDDLE or LAST from it.
func rcOnlyOpcode(op rnic.Opcode) roce.Opcode {
	switch op {
	case rnic.OpSendImm:
		return roce.RCSendOnlyImm
	case rnic.OpSendInv:
		return roce.RCSendOnlyInv
	case rnic.OpWrite:
		return roce.RCWriteOnly
	case rnic.OpWriteImm:
		return roce.RCWriteOnlyImm
	}
	return roce.RCSendOnly
}
