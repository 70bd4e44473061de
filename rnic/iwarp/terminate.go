package iwarp

// Terminate messages (RFC 5040 §4.8, §5.4, §7): building and sending one when the receiver
// finds an error, receiving the peer's, and mapping errors to codes, statuses and events.

import (
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// lingerClose half-closes the socket after a Terminate and drains the peer's data
// briefly, so the Terminate is delivered rather than destroyed by a reset (closing a
// socket with unread data makes TCP send RST). The receiver has already stopped.
func (c *Conn) lingerClose() {
	if !closeWrite(c.nc) {
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
	var buf [512]byte
	for {
		if _, err := c.nc.Read(buf[:]); err != nil {
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

// rxTerm handles a received Terminate (RFC 5040 §5.4): the oldest outstanding Read or
// atomic completes with the matching status; the QP goes to Error.
func (c *Conn) rxTerm(h []byte, n int, plen uint64) bool {
	// RFC 5040 §5.4: one Terminate, on QN 2 (checked by rdmap.CheckSegment), in one
	// segment; an invalid one is an error surfaced like any other (§7.1).
	if te, ok := c.singleSegment(ddp.Untagged(h), ddp.QNTerminate); !ok {
		c.sendTerm(te, h[:ddp.UntaggedLen], n, nil)
		return false
	}
	ctrl := h[ddp.UntaggedLen:]
	te := decodeTermWord(be.Uint32(ctrl))
	// The echoed DDP header (D bit) names the offending message: a Read Request or
	// atomic request (QN 1) identifies the outstanding WQE by its MSN.
	var buf [rdmap.TerminateMaxLen]byte
	m := copy(buf[:], ctrl)
	k := min(plen, uint64(len(buf)-m))
	read := c.rxRead(buf[m:m+int(k)]) == nil
	c.end()
	var msn ddp.MSN
	found := false
	if t, err := rdmap.ParseTerminate(buf[:m+int(k)]); read && err == nil && t.D && len(t.DDPHeader) == ddp.UntaggedLen {
		if u := ddp.Untagged(t.DDPHeader); u.QN() == ddp.QNReadRequest {
			msn, found = u.MSN(), true
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

// parseTermWord decodes the error of a Terminate control word as RFC 5040 §4.8 lays it
// out (rdmap.ParseTerminate on the word alone, its header flags cleared).
func parseTermWord(w uint32) rdmap.TerminateError {
	var b [rdmap.TerminateMinLen]byte
	be.PutUint32(b[:], w&^(rdmap.TermFlagM|rdmap.TermFlagD|rdmap.TermFlagR))
	t, _ := rdmap.ParseTerminate(b[:])
	return t.Err
}

// headersAllowed reports whether a Terminate of this layer and type may carry the
// terminated DDP header (RFC 5040 §4.8 Figure 10): not for catastrophic or LLP errors.
func headersAllowed(e rdmap.TerminateError) bool {
	switch e.Layer {
	case rdmap.LayerRDMAP:
		return e.Type != rdmap.TypeLocalCatastrophic
	case rdmap.LayerDDP:
		return e.Type == rdmap.TypeDDPTagged || e.Type == rdmap.TypeDDPUntagged
	}
	return false
}

// decodeTermWord decodes a received Terminate control word, undoing Linux siw's swapped
// Layer/EType nibbles (tests/interop/README.md finding 2: siw's little-endian bitfields
// put EType<<4|Layer in the first byte). The RFC reading is kept unless it is an
// unassigned triple, or carries headers its layer/type may not, while the swapped
// reading is consistent; a conforming peer is therefore always read per the RFC.
func decodeTermWord(w uint32) rdmap.TerminateError {
	t := parseTermWord(w)
	s := t
	s.Layer, s.Type = rdmap.Layer(t.Type), rdmap.ErrorType(t.Layer)
	if s == t || s.CodeName() == "" {
		return t
	}
	if t.CodeName() == "" {
		return s
	}
	if w&rdmap.TermFlagD != 0 && !headersAllowed(t) && headersAllowed(s) {
		return s
	}
	return t
}

// taggedTerm maps an engine access error on a tagged segment to DDP tagged errors
// (RFC 5041 §7.2); missing rights are reported as "invalid STag", as siw does.
func taggedTerm(err error) rdmap.TerminateError {
	switch err {
	case rnic.AccessErrBounds:
		return rdmap.FromDDP(ddp.ErrBaseBounds)
	case rnic.AccessErrNotAssociated:
		return rdmap.FromDDP(ddp.ErrSTagNotAssociated)
	case rnic.AccessErrTOWrap:
		return rdmap.FromDDP(ddp.ErrTOWrap)
	}
	return rdmap.FromDDP(ddp.ErrInvalidSTag)
}

// readTerm maps an access error on a Read Request's source to RDMAP remote protection
// errors (RFC 5040 §4.8).
func readTerm(err error) rdmap.TerminateError {
	switch err {
	case rnic.AccessErrBounds:
		return rdmap.TermBaseBounds
	case rnic.AccessErrRights:
		return rdmap.TermAccessRights
	case rnic.AccessErrNotAssociated:
		return rdmap.TermSTagNotAssociated
	case rnic.AccessErrTOWrap:
		return rdmap.TermTOWrap
	}
	return rdmap.TermInvalidSTag
}

// termStatus maps a received Terminate to the completion status of the work request it
// concerns.
func termStatus(e rdmap.TerminateError) rnic.Status {
	switch {
	case e.Layer == rdmap.LayerRDMAP && e.Type == rdmap.TypeRemoteProtection,
		e.Layer == rdmap.LayerDDP && e.Type == rdmap.TypeDDPTagged:
		return rnic.StatusRemAccessErr
	case e.Layer == rdmap.LayerDDP && e.Type == rdmap.TypeDDPUntagged:
		if e.Code == rdmap.CodeDDPMSNNoBuffer {
			return rnic.StatusRemOpErr
		}
		return rnic.StatusRemInvReqErr
	case e.Layer == rdmap.LayerLLP:
		return rnic.StatusRetryExcErr
	}
	return rnic.StatusRemOpErr
}

// eventFor picks the async event type for a Terminate error.
func eventFor(e rdmap.TerminateError) rnic.EventType {
	switch termStatus(e) {
	case rnic.StatusRemAccessErr:
		return rnic.EventQPAccessErr
	case rnic.StatusRemInvReqErr:
		return rnic.EventQPReqErr
	}
	return rnic.EventQPFatal
}

// TermError is the error of an EventQPFatal/AccessErr/ReqErr event caused by a
// Terminate: Sent tells whether this side sent it (a local detection) or received it.
type TermError struct {
	rdmap.TerminateError
	Sent bool
}

func (e *TermError) Error() string {
	if e.Sent {
		return "iwarp: sent Terminate: " + e.TerminateError.String()
	}
	return "iwarp: received Terminate: " + e.TerminateError.String()
}

// Unwrap returns the TerminateError, so errors.Is(err, rdmap.TermInvalidSTag) works.
func (e *TermError) Unwrap() error { return e.TerminateError }
