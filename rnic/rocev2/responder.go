package rocev2

// The responder (IBTA Vol.1 §9.7.5, rxe resp.c): executes the peer's requests at the
// expected PSN, answers duplicates, sends ACKs/NAKs and streams READ responses.

import (
	"time"

	"github.com/softrnic/softrnic/internal/memcopy"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// rdJob is an entry of the responder's ordered response queue: a READ
// response being streamed, or a control packet (ACK, NAK, atomic ACK)
// queued behind one so that responses leave in PSN order.
type rdJob struct {
	psn  roce.PSN
	data []byte
	off  int
	ctl  bool
	dup  *rdRes // re-execution of a duplicate of this READ (not counted against IRD)
	gen  uint32 // dup's generation when queued
	cn   int
	cbuf [40]byte
}

// rdRes is a responder resource (IBTA §9.7.5.1.3–4, rxe's resp_res): a READ or
// atomic request this responder executed, kept so that a duplicate of it can be
// answered — a READ re-executed, an atomic answered with its saved original
// value. The last MaxDestRd of them are kept; a duplicate READ that matches none
// is dropped, so old PSNs cannot buy reads past the IRD limit.
type rdRes struct {
	gen         uint32 // bumped when the slot is reused; 0: empty
	atomic      bool
	first, last roce.PSN // a READ's response PSNs; an atomic's PSN
	va          uint64   // READ: the RETH's virtual address, R_Key and length
	rkey        uint32
	length      uint32
	orig        uint64 // atomic: the original value returned
	replaying   bool   // a re-execution of this READ is queued
}

const (
	kindNone = iota
	kindSend
	kindWrite
	kindDrop // UC: rest of a message that could not be received
)

// responder is the responder's state (IBTA §9.7.5; rxe resp.c's qp->resp).
type responder struct {
	ePSN       roce.PSN // expected PSN
	msn        roce.MSN
	nakSent    bool // a PSN-sequence or RNR NAK was sent for ePSN: later requests wait for it
	ackPending bool
	curKind    int
	curRecv    *rnic.RecvWQE
	curOff     uint64
	curWBuf    []byte
	res        []*[resChunk]rdRes // the responder resources, allocated a chunk at a time (remember)
	resNext    int                // where the next one goes
	resGen     uint32
	rdq        []rdJob // READ responses and the control packets queued behind them (a ring, grown up to rdqMax)
	rdqMax     int
	rdHead     int
	rdLen      int
	rdReads    int // new (not duplicate) READs in rdq, limited to MaxDestRd
	rhdr       roce.Header
	// ACKs a Wait deferred (rxDrive.deferAck): whether one is owed (deferred and not sent
	// since), how many were deferred, how many ackTick saw last, and the timer that sends
	// one left owed for between one and two ackDeferMax.
	ackOwed            bool
	ackDefers, ackSeen uint64
	ackDeferMax        time.Duration
	ackTimer           *time.Timer
	ackTimerOn         bool
}

// ackDeferMax is the longest an ACK a Wait deferred stays unsent with the connection's
// ACK timeout tmo (0: none): an eighth of it, between 50 µs and an eighth of the default
// (8.4 ms), so that the peer's requester, whose timeout is typically the same, never
// retransmits because of it. Then ackTick sends it.
func ackDeferMax(tmo time.Duration) time.Duration {
	m := roce.TimeoutExp(DefaultTimeout) / 8
	if tmo > 0 {
		m = min(m, max(tmo/8, 50*time.Microsecond))
	}
	return m
}

// deferred records that the receive batch ending deferred the connection's ACK
// (rxDrive.deferAck) and starts ackTick's timer unless it runs. The caller holds c.mu.
func (c *Conn) deferred() {
	c.ackOwed = true
	c.ackDefers++
	c.e.AcksDeferred.Add(1)
	if c.ackTimerOn {
		return
	}
	c.ackTimerOn = true
	if c.ackTimer == nil {
		c.ackTimer = time.AfterFunc(c.ackDeferMax, c.ackTick)
	} else {
		c.ackTimer.Reset(c.ackDeferMax)
	}
}

// ackTick bounds how long a deferred ACK waits when the program neither answers nor
// Waits again: an ACK still owed with no deferral since the last tick (so for at least
// ackDeferMax) is sent now, by this goroutine when the connection's goroutine is parked
// (sendHere), else by that goroutine (fill), counted in Endpoint.AckDeferTimeouts. The
// timer runs again while ACKs are being deferred, and stops once none is.
func (c *Conn) ackTick() {
	c.mu.Lock()
	owed := c.owesAck()
	fresh := c.ackDefers != c.ackSeen
	if c.dead || !owed && !fresh {
		c.ackTimerOn = false
		c.mu.Unlock()
		return
	}
	c.ackSeen = c.ackDefers
	c.ackTimer.Reset(c.ackDeferMax)
	c.mu.Unlock()
	if owed && !fresh {
		c.e.AckDeferTimeouts.Add(1)
		if c.lockHere() {
			c.sendHere()
		} else {
			c.wake()
		}
	}
}

// rcInput checks an RC request's PSN (IBTA §9.7.5.1.1): out of sequence gets one
// PSN-sequence NAK per expected PSN, and none after an RNR NAK of the expected PSN (the
// requester resends from it once its RNR timer ran out: a sequence NAK would make it take
// the wait for a loss, cut its window and spend a retry); a duplicate is answered, the
// expected PSN executes.
func (c *Conn) rcInput(r *rxCtx, p *roce.Packet) {
	psn := p.BTH.PSN()
	d := psn.Distance(c.ePSN)
	if d > 0 {
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

func (c *Conn) initResponder() {
	c.rdqMax = 4*c.cfg.MaxDestRd + 64
}

// resChunk is how many responder resources are allocated at a time: a QP that serves no
// READ or atomic holds none, and one that serves a few holds few, whatever its IRD.
const resChunk = 16

// rdqFull reports whether the response queue holds rdqMax jobs; below that it makes
// room for one more (the ring grows from 4 by doubling as READs come in, so a QP that
// serves no READ holds no queue).
func (c *Conn) rdqFull() bool {
	if c.rdLen < len(c.rdq) {
		return false
	}
	if c.rdLen >= c.rdqMax {
		return true
	}
	q := make([]rdJob, min(max(2*len(c.rdq), 4), c.rdqMax))
	for i := 0; i < c.rdLen; i++ {
		q[i] = c.rdq[(c.rdHead+i)%len(c.rdq)]
	}
	c.rdq, c.rdHead = q, 0
	return false
}

// remember records an executed READ or atomic as a responder resource: the last MaxDestRd
// are kept, the oldest overwritten. They are filled in order and a chunk is added when
// the filled ones run out, until MaxDestRd, so a chunk is added only before the first
// overwrite, and entries never move (rdJob.dup points at them).
func (c *Conn) remember(r rdRes) {
	c.resGen++
	if c.resGen == 0 {
		c.resGen = 1
	}
	r.gen = c.resGen
	if c.resNext == c.cfg.MaxDestRd {
		c.resNext = 0
	}
	if c.resNext/resChunk == len(c.res) {
		c.res = append(c.res, new([resChunk]rdRes))
	}
	c.res[c.resNext/resChunk][c.resNext%resChunk] = r
	c.resNext++
}

// findRes returns the responder resource of the READ (or atomic) whose response PSNs
// include psn, or nil.
func (c *Conn) findRes(psn roce.PSN, atomic bool) *rdRes {
	for _, ch := range c.res {
		for i := range ch {
			if x := &ch[i]; x.gen != 0 && x.atomic == atomic && psn.Sub(x.first) <= x.last.Sub(x.first) {
				return x
			}
		}
	}
	return nil
}

func (c *Conn) popJob() {
	if j := &c.rdq[c.rdHead]; j.dup != nil && j.dup.gen == j.gen {
		j.dup.replaying = false
	}
	c.rdq[c.rdHead] = rdJob{}
	c.rdHead = (c.rdHead + 1) % len(c.rdq)
	c.rdLen--
}

// sendAck sends an ACK, NAK or atomic ACK from the receive goroutine, or
// queues it behind pending READ responses to keep responses in PSN order.
func (c *Conn) sendAck(r *rxCtx, syn roce.Syndrome, psn roce.PSN, orig uint64, atomicAck bool) {
	c.ackOwed = false // this one covers it
	var buf []byte
	var k *ctlPkt
	var j *rdJob
	if c.rdLen > 0 {
		if c.rdqFull() {
			return
		}
		j = &c.rdq[(c.rdHead+c.rdLen)%len(c.rdq)]
		*j = rdJob{ctl: true}
		c.rdLen++
		buf = j.cbuf[:0]
		if !c.rdSend { // else it leaves behind the response ahead of it (endBatch)
			c.wake()
		}
	} else {
		if k = r.alloc(c.remote); k == nil {
			return
		}
		buf = k.buf[:0]
	}
	b := c.ackPacket(buf, syn, psn, orig, atomicAck)
	if k != nil {
		k.n = len(b)
	} else {
		j.cn = len(b)
	}
	if syn.IsNAK() || syn.IsRNRNAK() {
		c.qp.CountNAK()
	}
}

// ackPacket appends to b an ACK, NAK or atomic ACK (IBTA §9.7.5.1.6) of the packet at
// psn, with the responder's current MSN. The caller holds c.mu.
func (c *Conn) ackPacket(b []byte, syn roce.Syndrome, psn roce.PSN, orig uint64, atomicAck bool) []byte {
	h := &c.rhdr
	h.Opcode = roce.RCAck
	if atomicAck {
		h.Opcode = roce.RCAtomicAck
		h.OrigData = orig
	}
	h.PSN, h.AckReq, h.SE = psn, false, false
	h.Syndrome, h.MSN = syn, c.msn
	return finish(h.Append(b, 0), 0, c.local, c.remote)
}

// coalescedAck appends to b the ACK of everything executed so far, which flushAck queues
// and a deferred ACK (Endpoint.AcksDeferred) leaves with.
func (c *Conn) coalescedAck(b []byte) []byte {
	return c.ackPacket(b, roce.ACKSyndrome(roce.CreditsUnlimited), c.ePSN.Prev(), 0, false)
}

func (c *Conn) flushAck(r *rxCtx) {
	if c.ackPending && !c.dead {
		c.ackPending = false
		c.sendAck(r, roce.ACKSyndrome(roce.CreditsUnlimited), c.ePSN.Prev(), 0, false)
	}
}

// completeRecv completes a receive WQE of this connection at the end of the receive
// batch, after the batch's ACKs have been sent (Endpoint.endBatch); when the batch's list
// is full it completes it at once.
func (c *Conn) completeRecv(r *rxCtx, w *rnic.RecvWQE, res rnic.RecvResult) {
	if len(r.recvs) == cap(r.recvs) {
		c.qp.CompleteRecv(w, res)
		return
	}
	r.recvs = append(r.recvs, doneRecv{c: c, w: w, res: res})
	c.held.Add(1)
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
		c.completeRecv(r, c.curRecv, rnic.RecvResult{Status: rnic.StatusWRFlushErr, Opcode: rnic.WCRecv})
		c.curRecv = nil
	}
	c.flushResp = true
	c.setFatal(ev, &NAKError{Code: code, PSN: c.ePSN, Sent: true})
}

func (c *Conn) duplicate(r *rxCtx, p *roce.Packet) {
	psn := p.BTH.PSN()
	switch op := p.Opcode(); op {
	case roce.RCReadRequest:
		// Re-execute from the duplicate's PSN with its own RETH, if it lies in a
		// READ we executed and asks for a subset of its bytes through the same
		// R_Key (rxe resp.c duplicate_request); the memory is read again. One
		// re-execution per READ is queued at a time.
		va, n, rkey := p.RETH.VA(), uint64(p.RETH.DMALen()), p.RETH.RKey()
		res := c.findRes(psn, false)
		if res == nil || rkey != res.rkey || va < res.va || va-res.va > uint64(res.length) ||
			n > uint64(res.length)-(va-res.va) {
			c.e.DupReadsDropped.Add(1)
			return
		}
		if res.replaying || c.rdqFull() {
			return // the requester retries after its timeout
		}
		var buf []byte
		if n > 0 {
			b, err := c.qp.ResolveRemote(rkey, va, n, rnic.AccessRemoteRead)
			if err != nil {
				c.e.DupReadsDropped.Add(1)
				return
			}
			buf = b
		}
		res.replaying = true
		c.pushRead(psn, buf, res)
	case roce.RCCompareSwap, roce.RCFetchAdd:
		if a := c.findRes(psn, true); a != nil {
			c.sendAck(r, roce.ACKSyndrome(roce.CreditsUnlimited), psn, a.orig, true)
		}
	default:
		c.ackPending = true
	}
}

func (c *Conn) pushRead(psn roce.PSN, buf []byte, dup *rdRes) {
	i := (c.rdHead + c.rdLen) % len(c.rdq)
	c.rdq[i] = rdJob{psn: psn, data: buf, dup: dup}
	if dup != nil {
		c.rdq[i].gen = dup.gen
	} else {
		c.rdReads++
	}
	c.rdLen++
	c.readQueued()
}

// readQueued has the READ response just queued sent: by the receive goroutine at the end
// of its batch when it is the only packet job queued (a lone READ, as in a
// request/response exchange: endBatch, sendResponses), else by the connection's
// goroutine, which streams a queue of responses while the receive goroutine goes on
// receiving (a stream of 4 KiB READs, 64 posted, went 14 % slower when every batch's
// responses were sent by the receive goroutine: bench/README). The caller holds c.mu.
func (c *Conn) readQueued() {
	if c.inBatch && c.rdLen == 1 {
		c.rdSend = true
		return
	}
	c.rdSend = false
	c.wake()
}

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
	c.nakSent = true
	c.sendAck(r, roce.RNRNAKSyndrome(c.cfg.MinRNRTimer), c.ePSN, 0, false)
	return nil, st
}

// execute runs the request at the expected PSN (rxe resp: check_op_seq,
// check_op_valid, check_resource, check_rkey, execute). uc selects the
// UC rules: errors drop the message silently instead of a NAK.
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
				c.completeRecv(r, w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
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
			c.completeRecv(r, w, rnic.RecvResult{Status: rnic.StatusLocLenErr, Opcode: rnic.WCRecv})
			c.curRecv = nil
			fail(roce.NAKInvalidRequest)
			return
		}
		c.curKind = kindSend
		w.Segs.WriteAt(p.Payload, c.curOff)
		c.curOff += uint64(n)
		if lastish {
			m := rnic.RecvMessage{ByteLen: uint32(c.curOff), Solicited: p.BTH.SE()}
			if p.ImmDt != nil {
				m.HasImm, m.Imm = true, p.ImmDt.Imm()
			}
			if p.IETH != nil {
				m.HasInvalidate, m.Invalidate = true, p.IETH.RKey()
			}
			res, err := c.qp.PrepareRecv(m)
			if err != nil {
				// An IETH R_Key that cannot be invalidated is an invalid request (rxe resp.c).
				c.completeRecv(r, w, rnic.RecvResult{Status: rnic.StatusRemInvReqErr, Opcode: rnic.WCRecv})
				c.curRecv = nil
				fail(roce.NAKInvalidRequest)
				return
			}
			c.completeRecv(r, w, res)
			c.curRecv = nil
			c.curKind = kindNone
			c.msn = c.msn.Next()
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
				c.completeRecv(r, w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecvRDMAWithImm})
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
		memcopy.Copy(c.curWBuf[c.curOff:], p.Payload)
		c.curOff += uint64(n)
		if lastish {
			c.curKind = kindNone
			c.msn = c.msn.Next()
			if p.ImmDt != nil {
				w := c.curRecv
				c.curRecv = nil
				res, _ := c.qp.PrepareRecv(rnic.RecvMessage{ByteLen: uint32(len(c.curWBuf)), Solicited: p.BTH.SE(),
					HasImm: true, Imm: p.ImmDt.Imm(), AfterWrite: true}) // no invalidation: cannot fail
				c.completeRecv(r, w, res)
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
		if c.rdqFull() {
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
		c.msn = c.msn.Next()
		np := c.npkts(l)
		c.remember(rdRes{first: c.ePSN, last: c.ePSN.Add(np - 1), va: p.RETH.VA(), rkey: p.RETH.RKey(), length: uint32(l)})
		c.pushRead(c.ePSN, buf, nil)
		c.ePSN = c.ePSN.Add(np)
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
		c.remember(rdRes{atomic: true, first: c.ePSN, last: c.ePSN, orig: orig})
		c.msn = c.msn.Next()
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

// readResp builds the next RDMA READ response packet of the oldest job.
func (c *Conn) readResp(b []byte) []byte {
	j := &c.rdq[c.rdHead]
	h := &c.rhdr
	total := len(j.data)
	rem := total - j.off
	n := min(rem, c.mtu)
	h.Opcode, _ = roce.PacketOpcode(roce.RCReadResponseOnly, j.off == 0, rem <= c.mtu)
	h.PSN = j.psn
	h.AckReq, h.SE = false, false
	h.Syndrome, h.MSN = roce.ACKSyndrome(roce.CreditsUnlimited), c.msn
	b = h.Append(b, n)
	b = append(b, j.data[j.off:j.off+n]...)
	j.off += n
	j.psn = j.psn.Add(1)
	if j.off >= total {
		if j.dup == nil {
			c.rdReads--
		}
		c.popJob()
	}
	c.txBytes += n
	return c.finishTx(b, nil, n)
}
