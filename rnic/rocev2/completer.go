package rocev2

// The completer (IBTA Vol.1 §9.7.5.1.2–§9.7.6, rxe comp.c): ACKs, NAKs, READ responses and
// atomic ACKs for this QP's requests; completes send WQEs in order.

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// completer handles ACKs and responses (rxe comp: check_psn, check_ack, do_read, do_atomic).
func (c *Conn) completer(p *roce.Packet) {
	psn := p.BTH.PSN()
	op := p.Opcode()
	if !psn.Less(c.maxSent) || psn.Less(c.unaPSN.Prev()) {
		return
	}
	var syn roce.Syndrome
	if p.AETH != nil {
		syn = p.AETH.Syndrome()
	}
	cursor := [3]uint64{uint64(c.sendPSN), c.sqSend, c.sendOff}
	var blocked blockState
	if c.txBlocked {
		blocked = c.blockState()
	}
	switch op {
	case roce.RCAck:
		switch {
		case syn.IsACK():
			c.ackTo(psn)
		case syn.IsRNRNAK():
			if !c.ackTo(psn.Prev()) || psn != c.unaPSN || c.rnrPending {
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
			c.rnrUntil = time.Now().Add(syn.RNRTimer().Duration())
			c.rnrPSN = psn
			c.ackDeadline = time.Time{}
			c.wake()
			return
		case syn.IsNAK():
			if !c.ackTo(psn.Prev()) || psn != c.unaPSN {
				break
			}
			c.qp.CountNAK()
			code := syn.NAKCode()
			if code == roce.NAKPSNSequenceError {
				if c.lastNakValid && c.lastNak == psn {
					break
				}
				if c.rnrPending && psn == c.rnrPSN {
					// The requests behind one the peer RNR-NAKed, out of sequence there
					// (rxe's responder answers them with this NAK; softrnic's drops
					// them): the RNR retry resends from psn, nothing was lost.
					break
				}
				if c.retryLeft == 0 {
					c.failOldest(rnic.StatusRetryExcErr, ErrRetryExceeded)
					return
				}
				c.retryLeft--
				c.lastNak, c.lastNakValid = psn, true
				c.qp.CountRetransmit()
				c.lost()
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
		if !syn.IsACK() || !c.ackTo(psn.Prev()) {
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
				c.lost()
				c.ackTo(e.first.Prev())
				c.seek(c.unaPSN)
			}
			break
		}
		if !c.ackTo(e.first.Prev()) {
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
	c.armAck()
	// The goroutine needs this packet only when it unblocks sending or moved the
	// send cursor (a retransmission); a graceful disconnect waits for idle. Its timer
	// may fire early for the old ACK deadline, which is harmless.
	if c.txBlocked && c.blockState() != blocked || cursor != [3]uint64{uint64(c.sendPSN), c.sqSend, c.sendOff} ||
		c.disc.Load() != 0 {
		c.wake()
	}
}

// blockState is what can let a blocked fill go on (requester.txBlocked): a completion
// (a local fence's older WQEs, a fence's READs, the READ/atomic depth) and the window.
// While it stays the same, the packets of a stream of READ responses wake nobody: only
// the one that completes a READ does.
type blockState struct {
	completed uint64
	open      bool
}

func (c *Conn) blockState() blockState {
	return blockState{completed: c.completed, open: c.typ != RC || c.sendPSN.Sub(c.unaPSN) < uint32(c.win.n)}
}

// lost answers a lost request or response: the window halves (window.go).
func (c *Conn) lost() {
	if c.win.lost(c.maxSent) {
		c.e.WindowCuts.Add(1)
	}
}

// ackTo acknowledges every request packet with PSN ≤ p (IBTA §9.7.5.1.2:
// ACKs are cumulative). It returns false if a Read or atomic before p is
// still unanswered, in which case its request is retransmitted.
func (c *Conn) ackTo(p roce.PSN) bool {
	if !p.Less(c.maxSent) || p.Less(c.unaPSN.Prev()) {
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
	c.completed++
	if e.counted {
		c.rdOut--
	}
	c.dropCRC(e) // no helper reads the WQE's memory after its completion
	c.qp.CompleteSend(e.w, st)
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
	c.win.acked(c.unaPSN)
	c.retryLeft = c.cfg.RetryCnt
	c.rnrLeft = c.cfg.RNRRetry
	c.seqRetried = false
	if c.probeOut && c.probePSN.Less(c.unaPSN) {
		c.probeOut = false
		c.kaSeen++ // nor is its ACK
	}
}
