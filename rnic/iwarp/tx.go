package iwarp

// The sender: the per-connection sender goroutine, the posting goroutine's fast path,
// send-queue work (Send, Write, Immediate Data) segmented to the MULPDU, and the batching of
// FPDUs into vectored writes.

import (
	"errors"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

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
				if !closeWrite(c.nc) {
					c.abort(false)
				}
				return
			}
		}
	}
	c.wake() // kicks consumed while gated
	c.txMu.Lock()
	if c.initiator && c.params.P2P {
		err := c.sendRTR()
		if err == nil {
			err = c.flush()
		}
		if err != nil {
			c.txMu.Unlock()
			c.txFail(err)
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
		if err := c.sendNudge(); err != nil {
			c.txFail(err)
			return true
		}
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
				c.txFail(err)
				return true
			}
			continue
		}
		closing, rxEOF, outstanding := c.closing, c.rxEOF, c.orq.n
		c.mu.Unlock()
		if rxEOF {
			_ = c.flush()
			closeWrite(c.nc)
			return true
		}
		w := c.held
		if w == nil {
			w = c.qp.NextSend()
		}
		if w == nil {
			if err := c.flush(); err != nil {
				c.txFail(err)
				return true
			}
			if closing && outstanding == 0 && !c.qp.SendPending() {
				if !closeWrite(c.nc) {
					c.abort(false)
				}
				return true
			}
			return false
		}
		if c.blocked(w, outstanding) {
			c.hold(w)
			if err := c.flush(); err != nil {
				c.txFail(err)
				return true
			}
			if !c.blocked(w, c.outstanding()) {
				continue
			}
			return false
		}
		c.hold(nil)
		if err := c.sendWQE(w); err != nil {
			c.txFail(err)
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

// fastEpoch is the origin of Conn.lastFast.
var fastEpoch = time.Now()

// fastPump is the doorbell fast path: when the sender goroutine is idle, the goroutine
// that posted work writes small WQEs itself, saving a goroutine hand-off per message.
// Anything else (responses, Terminates, fences, large WQEs, closing) is left to the sender
// goroutine; more reports that it must be woken. The caller holds txMu.
func (c *Conn) fastPump() (more bool) {
	if c.txDone || c.quitting() || c.held != nil {
		return !c.txDone
	}
	now := int64(time.Since(fastEpoch)) // monotonic clock only: one clock read, not two
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
	// With nothing queued before, the batch is this pump's work requests alone: their
	// memory is the transport's until they complete (after the write), so a small batch
	// may be copied into one buffer and written with one write(2) instead of writev(2) of
	// its pieces (mpa.Writer.FlushOwned). A Read Response's source is not: it stays with
	// Flush.
	owned := c.wr.Buffered() == 0
	for i := 0; i < 16; i++ {
		w := c.qp.NextSend()
		if w == nil {
			break
		}
		if w.Len > fastMax || c.blocked(w, c.outstanding()) {
			c.hold(w)
			break
		}
		if err := c.sendWQE(w); err != nil {
			c.txFail(err)
			return false
		}
	}
	if err := c.flushBatch(owned); err != nil {
		c.txFail(err)
		return false
	}
	return c.held != nil || c.qp.SendPending()
}

// hold sets the WQE the sender holds back (nil for none). holding mirrors it for the
// receiver, which wakes the sender at the end of a Read or atomic only when a WQE waits for
// it (ORD, Fence, LocalFence) or the connection is closing. The caller holds txMu.
func (c *Conn) hold(w *rnic.SendWQE) {
	c.held = w
	c.holding.Store(w != nil)
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
		stag := w.RKey
		if w.Opcode == rnic.OpWriteImm && w.Len == 0 && stag < 1<<8 {
			// The peer takes a zero-length Write to STag index 0 for a no-op (rxWrite);
			// the STag of a zero-length Write is not checked (RFC 5041 §5), so name
			// another one and keep the Immediate Data paired with this Write.
			stag = 1 << 8
		}
		if err := c.sendTagged(rdmap.OpWrite, stag, w.RemoteAddr, w.Segs, w.Len); err != nil {
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
		return c.sendRead(w)
	case rnic.OpAtomicCmpSwap, rnic.OpAtomicFetchAdd:
		return c.sendAtomic(w)
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
	msn := c.txMSN[ddp.QNSend]
	c.txMSN[ddp.QNSend] = c.txMSN[ddp.QNSend].Next()
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
	putUntagged(c.hdr[:], true, op, 0, ddp.QNSend, c.txMSN[ddp.QNSend], 0)
	c.txMSN[ddp.QNSend] = c.txMSN[ddp.QNSend].Next()
	h := rdmap.AppendImmediate(c.hdr[:ddp.UntaggedLen], uint64(w.Imm))
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

// Transmit batching. mpa.Writer frames FPDUs (RFC 5044 §4.1, §4.3: length, ULPDU, pad,
// Markers, CRC32c) into one iovec list, and many FPDUs — of one message or of several
// queued work requests — go out with a single vectored write straight from the
// registered memory. Send WQEs written into the batch complete after the write succeeds.

// batchBytes is the flush threshold.
const batchBytes = 512 << 10

// fpdu queues one FPDU whose ULPDU is hdr followed by payload.
func (c *Conn) fpdu(hdr []byte, payload [][]byte) error {
	if err := c.wr.QueueFPDU(hdr, payload); err != nil {
		return err
	}
	if c.wr.Buffered() >= batchBytes {
		return c.flush()
	}
	return nil
}

// flush writes the batch and completes the WQEs written in it.
func (c *Conn) flush() error { return c.flushBatch(false) }

// flushBatch is flush; owned: the batch holds only send-queue work whose memory is the
// transport's until it completes, which the writer may copy (mpa.Writer.FlushOwned).
func (c *Conn) flushBatch(owned bool) error {
	wrote := c.wr.Buffered() > 0
	var err error
	if owned {
		err = c.wr.FlushOwned()
	} else {
		err = c.wr.Flush()
	}
	if err != nil {
		return err
	}
	if wrote {
		c.noteTx()
	}
	for i, w := range c.sent {
		c.qp.CompleteSend(w, rnic.StatusSuccess)
		c.sent[i] = nil
	}
	c.sent = c.sent[:0]
	return nil
}

// txFailGrace is how long a failed write waits for the receiver to report the cause.
const txFailGrace = 100 * time.Millisecond

// txFail ends the connection after a failed write. The kernel reports the error that
// ended a TCP connection (ETIMEDOUT, ECONNRESET, …) to one system call only; a write
// after it fails with EPIPE. When our write got EPIPE, the receiver has or will at once
// have the cause, so it is given up to txFailGrace to report it first: Conn.Err and the
// QP's event then carry the cause rather than its symptom.
func (c *Conn) txFail(err error) {
	if !errors.Is(err, syscall.EPIPE) {
		c.fail(rnic.EventQPFatal, &LLPError{Err: err})
		return
	}
	go func() {
		t := time.NewTimer(txFailGrace)
		defer t.Stop()
		select {
		case <-c.rxDone:
		case <-c.quit:
		case <-t.C:
		}
		c.fail(rnic.EventQPFatal, &LLPError{Err: err})
	}()
}
