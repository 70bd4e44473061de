package iwarp

import (
	"testing"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
)

// siwWord encodes a Terminate control word the way Linux siw puts it on the wire
// (EType in the high nibble of the first byte, Layer in the low one).
func siwWord(e rdmap.TerminateError, flags uint32) uint32 {
	return uint32(e.Type)<<28 | uint32(e.Layer)<<24 | uint32(e.Code)<<16 | flags
}

func TestDecodeTermWord(t *testing.T) {
	all := []rdmap.TerminateError{
		rdmap.TermInvalidSTag, rdmap.TermBaseBounds, rdmap.TermAccessRights, rdmap.TermSTagNotAssociated,
		rdmap.TermUnexpectedOpcode, rdmap.TermCatastrophicStream, rdmap.TermProtCannotInvalidate,
		rdmap.FromDDP(ddp.ErrInvalidSTag), rdmap.FromDDP(ddp.ErrBaseBounds), rdmap.FromDDP(ddp.ErrMSNNoBuffer),
		rdmap.FromDDP(ddp.ErrMessageTooLong), rdmap.TermMPACRC, rdmap.TermMPANoMatchingRTR, rdmap.TermMPAInsufficientIRD,
	}
	for _, e := range all {
		flags := uint32(0)
		if headersAllowed(e) {
			flags = rdmap.TermFlagM | rdmap.TermFlagD
		}
		// RFC-conforming peers (softrnic itself) are always read as sent.
		if got := decodeTermWord(rdmap.Terminate{Err: e}.Control() | flags); got != e {
			t.Errorf("RFC %v read as %v", e, got)
		}
		// siw's swapped nibbles are undone when the result is unambiguous.
		got := decodeTermWord(siwWord(e, flags))
		if got != e && !(e.Layer == rdmap.LayerLLP && e.Code >= 5) {
			t.Errorf("siw %v (word %#x) read as %v", e, siwWord(e, flags), got)
		}
	}
}
