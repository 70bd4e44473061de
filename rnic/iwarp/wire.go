package iwarp

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

var be = binary.BigEndian

func putUntagged(b []byte, last bool, op rdmap.Opcode, field, qn uint32, msn uint32, mo uint32) {
	ddp.Untagged(b[:ddp.UntaggedLen]).Init(last, rdmap.Control(op), field, qn, ddp.MSN(msn), mo)
}

func putTagged(b []byte, last bool, op rdmap.Opcode, stag uint32, to uint64) {
	ddp.Tagged(b[:ddp.TaggedLen]).Init(last, rdmap.Control(op), stag, to)
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
