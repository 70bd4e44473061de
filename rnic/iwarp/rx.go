package iwarp

// The receiver: the receive goroutine, FPDU dispatch by opcode (RFC 5040 §4, RFC 5041 §5),
// the responder's RTR check (RFC 6581 §9.2), and placement of Writes and untagged
// messages (Send, Immediate Data) into registered memory.

import (
	"errors"
	"io"
	"sync"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/internal/memcopy"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

func (c *Conn) recvLoop() {
	defer c.exit()
	defer close(c.rxDone)
	for {
		if c.respDefer && !c.rd.FPDUBuffered() {
			c.respDefer = false
			c.respond()
		}
		n, err := c.rd.Next()
		if err != nil {
			c.rxError(err)
			return
		}
		ok, done := true, false
		if c.staging {
			done, ok = c.stage(n)
		}
		if ok && !done {
			ok = c.segment(n)
		}
		c.unstage()
		if !ok {
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

// stage reads the whole ULPDU of the FPDU just started (n bytes) into the connection's
// staging buffer and verifies its CRC before any of it is interpreted or placed. With CRC
// negotiated a ULPDU is not passed to DDP before its CRC has been verified (RFC 5044 §6,
// §7), so an FPDU with a bad CRC leaves no trace in any region, even when the corruption
// is in the header that names the target. The cost is one copy of the payload (staging
// buffer to registered memory). The buffer (64 KiB: MPA's 16-bit length) comes from a
// pool shared by all connections for the time one FPDU is processed.
//
// Three kinds of FPDU skip the copy; each writes only memory whose contents are undefined
// until a message that a CRC error fails completes:
//   - a Read Response whose header continues the Read at the front of the ORQ exactly
//     (its sink STag, the next TO, within its length) is placed straight into that Read's
//     sink, then the CRC is checked (placeReadResp);
//   - a Write segment that continues the last one placed (same STag, the next TO) and is
//     not its message's last, a Send segment of the message in progress (its MSN, the
//     next MO), and the first segment of the next Send (its MSN, MO 0) when a posted
//     receive holds it, are processed straight from the stream as without CRC, the CRC
//     checked at their end (streamable).
//
// done reports that the FPDU was processed; ok is false when the receiver must stop.
func (c *Conn) stage(n int) (done, ok bool) {
	if c.stageBuf == nil {
		c.stageBuf = stageBufs.Get().(*[mpa.MaxULPDU]byte)
	}
	b := c.stageBuf[:n]
	k := 0
	if c.rxAny && !c.rtrExpect && n > ddp.TaggedLen {
		k = ddp.TaggedLen
		if err := c.rd.ReadFull(b[:k]); err != nil {
			c.rxError(err)
			return false, false
		}
		if e := c.readRespSink(b[:k], n); e != nil {
			return true, c.placeReadResp(b[:k], n, e)
		}
		if ddp.HeaderLen(b[0]) == ddp.UntaggedLen && n > ddp.UntaggedLen {
			if err := c.rd.ReadFull(b[k:ddp.UntaggedLen]); err != nil {
				c.rxError(err)
				return false, false
			}
			k = ddp.UntaggedLen
		}
		if c.streamable(b[:k], n) {
			c.staged, c.rxStream = b[:k], true
			c.rxStreamed.Add(1)
			return false, true
		}
	}
	if err := c.rd.ReadFull(b[k:]); err != nil {
		c.rxError(err)
		return false, false
	}
	if err := c.rd.End(); err != nil {
		c.rxError(err) // a CRC error: Terminate LLP / MPA / CRC (2/0/0x02)
		return false, false
	}
	c.staged = b
	return false, true
}

// readRespSink returns the ORQ entry of the Read that h, the tagged header of an FPDU of
// ULPDU length n whose CRC is not yet verified, continues exactly: a valid Read Response
// header for the front Read's sink STag at its next TO, its payload within the Read's
// length. Anything else (nil) takes the staged path, which checks the CRC first and then
// answers the header as segment does.
func (c *Conn) readRespSink(h []byte, n int) *orqEntry {
	if ddp.HeaderLen(h[0]) != ddp.TaggedLen {
		return nil
	}
	if op, _, err := rdmap.CheckSegment(h); err != nil || op != rdmap.OpReadResponse {
		return nil
	}
	t := ddp.Tagged(h)
	plen := uint64(n - ddp.TaggedLen)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orq.n == 0 {
		return nil
	}
	e := c.orq.front()
	if e.kind == orqAtomic || e.w == nil || t.STag() != e.sinkSTag || t.TO() != e.sinkTO+e.got || e.got+plen > e.size {
		return nil
	}
	return e
}

// placeReadResp reads the payload of a Read Response that continues e (readRespSink)
// straight into e's sink, then verifies the FPDU's CRC. This passes the ULPDU to DDP
// before its CRC is verified, which RFC 5044 §6 forbids, but no one can tell: the only
// memory written is the sink of the Read this response answers, whose contents are
// undefined until that Read completes successfully, and a CRC error fails it (Terminate
// LLP / MPA / CRC; the QP goes to Error and the Read is flushed). It saves the copy from
// the staging buffer of every Read Response byte.
func (c *Conn) placeReadResp(h []byte, n int, e *orqEntry) bool {
	plen := uint64(n - ddp.TaggedLen)
	c.qp.CountRx(int(plen), 1)
	return c.streamReadResp(h, plen, e)
}

// streamable reports whether the FPDU whose header h (its whole DDP header, CRC not yet
// verified) was read may be processed straight from the stream, its CRC checked when it
// ends, as without CRC. That passes the ULPDU to DDP before its CRC is verified (RFC 5044
// §6 forbids it), where nobody can tell: the header must continue a message whose earlier
// segment passed its CRC, so a corruption that still matches can only change bytes that
// message was going to write, and a CRC error ends the connection (Terminate LLP / MPA /
// CRC) before the message completes, leaving those bytes undefined as for any failed
// message:
//   - a Write segment continuing the last one placed (its STag, the TO after it), and not
//     its message's last: the last one, whose bytes a program polling memory for the end
//     of a Write may read, is staged and verified first;
//   - a Send segment of the message in progress (its MSN, the MO after what it got), or
//     the first segment of the next one (its MSN, MO 0) when a receive is posted that
//     holds it, which it then takes: a receive buffer belongs to the QP until its
//     message completes, which happens only after its last segment's CRC, and a CRC
//     error flushes the receive with every other. A first segment for which no receive
//     is posted, or too long for it, is staged, and answered once its CRC passed.
func (c *Conn) streamable(h []byte, n int) bool {
	op, _, err := rdmap.CheckSegment(h)
	if err != nil {
		return false
	}
	switch op {
	case rdmap.OpWrite:
		t := ddp.Tagged(h)
		return c.wNextOK && !t.Last() && t.STag() == c.wNextSTag && t.TO() == c.wNextTO
	case rdmap.OpSend, rdmap.OpSendSE, rdmap.OpSendInvalidate, rdmap.OpSendSEInvalidate:
		u := ddp.Untagged(h)
		if u.QN() != ddp.QNSend || u.MSN() != c.rxMSN[ddp.QNSend] || uint64(u.MO()) != c.curGot {
			return false
		}
		if c.cur == nil { // the first segment (MO 0): take the receive it goes to
			c.cur, c.curSt = c.qp.TakeRecv()
		}
		return c.cur != nil && c.curSt == rnic.StatusSuccess && c.curGot+uint64(n-ddp.UntaggedLen) <= c.cur.Len
	}
	return false
}

// stageBufs pools the CRC staging buffers.
var stageBufs = sync.Pool{New: func() any { return new([mpa.MaxULPDU]byte) }}

// unstage gives the staging buffer back after an FPDU was processed.
func (c *Conn) unstage() {
	if c.stageBuf != nil {
		stageBufs.Put(c.stageBuf)
		c.stageBuf, c.staged, c.rxStream = nil, nil, false
	}
}

// rxRead fills p with the next len(p) bytes of the current ULPDU: from the verified
// staging buffer when CRC is on, else straight from the stream.
func (c *Conn) rxRead(p []byte) error {
	if !c.staging {
		return c.rd.ReadFull(p)
	}
	if c.rxStream { // the staged header first, then the stream
		k := memcopy.Copy(p, c.staged)
		c.staged = c.staged[k:]
		if k == len(p) {
			return nil
		}
		return c.rd.ReadFull(p[k:])
	}
	if len(p) > len(c.staged) {
		return mpa.ErrShortULPDU
	}
	memcopy.Copy(p, c.staged)
	c.staged = c.staged[len(p):]
	return nil
}

// singleSegment checks the DDP fields of an untagged message that is one segment by
// definition (Read Request, atomic request and response, Immediate Data, Terminate):
// the MSN expected on queue qn (RFC 5041 §7.2 "invalid MSN - MSN range"), then MO 0 and
// L set ("invalid MO": any other segment of it would start past MO 0).
func (c *Conn) singleSegment(u ddp.Untagged, qn int) (rdmap.TerminateError, bool) {
	if u.MSN() != c.rxMSN[qn] {
		return rdmap.FromDDP(ddp.ErrMSNRange), false
	}
	if u.MO() != 0 || !u.Last() {
		return rdmap.FromDDP(ddp.ErrInvalidMO), false
	}
	return rdmap.TerminateError{}, true
}

// readInto reads n payload bytes of the current FPDU into segs at offset off.
func (c *Conn) readInto(segs [][]byte, off, n uint64) error {
	c.rxPieces = rnic.Segs(segs).Slices(c.rxPieces, off, n)
	for _, p := range c.rxPieces {
		if err := c.rxRead(p); err != nil {
			return err
		}
	}
	clear(c.rxPieces) // keep no reference to the WQE's memory
	return nil
}

// segment processes one FPDU of ULPDU length n; it returns false when the receiver must stop.
func (c *Conn) segment(n int) bool {
	if !c.rxAny { // the peer's first FPDU
		c.rxAny = true
		c.notePeer()
		if !c.rtrExpect {
			c.openGate() // in peer-to-peer mode, once it is a valid RTR (rtr)
		}
	}
	h := c.rh[:]
	if n < 2 {
		c.sendTerm(rdmap.TermCatastrophicStream, nil, 0, nil)
		return false
	}
	if err := c.rxRead(h[:2]); err != nil {
		c.rxError(err)
		return false
	}
	hl := ddp.HeaderLen(h[0])
	if n < hl {
		c.sendTerm(rdmap.TermCatastrophicStream, nil, 0, nil)
		return false
	}
	if err := c.rxRead(h[2:hl]); err != nil {
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
	if n < hl+rl {
		// The ULPDU ends inside the RDMAP header (a truncated Read Request, Terminate,
		// atomic or Immediate Data): a malformed RDMAP message, for which RFC 5040
		// §4.8 has no specific code.
		c.sendTerm(rdmap.TermCatastrophicStream, h[:hl], n, nil)
		return false
	}
	if op != rdmap.OpTerminate && !op.CarriesPayload() && n != hl+rl {
		// Longer than the message's fixed size: it does not fit the buffer RDMAP
		// provides for it (RFC 5041 §7.2 "DDP message too long for available buffer").
		c.sendTerm(rdmap.FromDDP(ddp.ErrMessageTooLong), h[:hl], n, nil)
		return false
	}
	if rl > 0 {
		if err := c.rxRead(h[hl : hl+rl]); err != nil {
			c.rxError(err)
			return false
		}
	}
	plen := uint64(n - hl - rl)
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
		return c.rxTerm(h[:hl+rl], n, plen)
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
	if c.staging && !c.rxStream {
		c.staged = nil
		return true
	}
	if err := c.rd.End(); err != nil {
		c.rxError(err)
		return false
	}
	return true
}

// rtr handles the responder's first FPDU in peer-to-peer mode (RFC 6581 §9.2): it must be
// an RTR of a type the responder accepted; then the responder may transmit. handled
// reports that the FPDU was consumed.
func (c *Conn) rtr(op rdmap.Opcode, h []byte, n int, plen uint64) (ok, handled bool) {
	types := c.params.RTR
	switch {
	case op == rdmap.OpWrite && plen == 0 && types&mpa.RTRWrite != 0:
		if !c.end() {
			return false, true
		}
		c.openGate()
		return true, true
	case op == rdmap.OpReadRequest && types&mpa.RTRRead != 0:
		rr := rdmap.ReadRequest(h[ddp.UntaggedLen:]) // segment checked its length
		if rr.Size() == 0 {
			// An ordinary zero-length Read Request: its checks, MSN and IRD slot apply.
			ok := c.rxReadReq(h, n)
			if ok {
				c.openGate()
			}
			return ok, true
		}
	case op == rdmap.OpSend && plen == 0 && types&mpa.RTRSend != 0:
		if !c.end() {
			return false, true
		}
		c.rxMSN[ddp.QNSend] = c.rxMSN[ddp.QNSend].Next()
		c.openGate()
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
	if err := c.rxRead(dst); err != nil {
		c.rxError(err)
		return false
	}
	if !c.end() {
		return false
	}
	// A zero-length Write to STag index 0 (an RTR or a nudge; RFC 5041 §5 leaves it
	// unchecked) is a no-op: it does not make the next Immediate Data a Write with
	// Immediate (RFC 7306 §6). Our sender never names such an STag in a user's Write.
	c.lastWrite = t.Last() && (plen > 0 || stag >= 1<<8)
	c.wNextSTag, c.wNextTO, c.wNextOK = stag, to+plen, !t.Last() && plen > 0
	return true
}

func (c *Conn) rxSend(op rdmap.Opcode, h []byte, n int, plen uint64) bool {
	u := ddp.Untagged(h)
	if u.MSN() != c.rxMSN[ddp.QNSend] {
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNRange), h, n, nil)
		return false
	}
	if uint64(u.MO()) != c.curGot {
		c.sendTerm(rdmap.FromDDP(ddp.ErrInvalidMO), h, n, nil)
		return false
	}
	if c.cur == nil {
		c.cur, c.curSt = c.qp.TakeRecv()
	}
	w, st := c.cur, c.curSt
	switch {
	case w == nil && st == rnic.StatusSuccess:
		c.sendTerm(rdmap.FromDDP(ddp.ErrMSNNoBuffer), h, n, nil)
		return false
	case w == nil:
		c.abort(false)
		return false
	case st != rnic.StatusSuccess:
		c.cur = nil
		c.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
		c.sendTerm(rdmap.TermLocalCatastrophic, nil, 0, nil)
		return false
	}
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
	m := rnic.RecvMessage{ByteLen: uint32(c.curGot), Solicited: op.SolicitedEvent()}
	if op.CarriesInvalidateSTag() {
		m.HasInvalidate, m.Invalidate = true, u.ULPField()
	}
	if err := c.qp.FinishRecv(w, m); err != nil {
		// RFC 5040 §6.4.2: the STag cannot be invalidated; w stays taken and is flushed.
		c.sendTerm(rdmap.TermProtCannotInvalidate, h, n, nil)
		return false
	}
	c.cur, c.curGot = nil, 0
	c.rxMSN[ddp.QNSend] = c.rxMSN[ddp.QNSend].Next()
	c.lastWrite = false
	return true
}

func (c *Conn) rxImm(op rdmap.Opcode, h []byte, n int) bool {
	u := ddp.Untagged(h)
	te, ok := c.singleSegment(u, ddp.QNSend)
	if ok && c.cur != nil { // inside a Send: the Immediate Data took its MSN
		te, ok = rdmap.FromDDP(ddp.ErrMSNRange), false
	}
	if !ok {
		c.sendTerm(te, h[:ddp.UntaggedLen], n, nil)
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
	c.rxMSN[ddp.QNSend] = c.rxMSN[ddp.QNSend].Next()
	afterWrite := c.lastWrite
	c.lastWrite = false
	if st != rnic.StatusSuccess { // the WQE's SGL is invalid: complete it with that status
		c.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
		return true
	}
	// RFC 7306 §6: Immediate Data right after an RDMA Write completes as Write with
	// Immediate.
	_ = c.qp.FinishRecv(w, rnic.RecvMessage{HasImm: true, Imm: uint32(imm), AfterWrite: afterWrite,
		Solicited: op == rdmap.OpImmediateDataSE}) // no invalidation: cannot fail
	return true
}
