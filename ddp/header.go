package ddp

import (
	"encoding/binary"
	"errors"
)

// DDP control field bits (RFC 5041 §4.1).
const (
	CtrlTagged      = 0x80 // T: segment targets a tagged buffer
	CtrlLast        = 0x40 // L: last segment of the message
	CtrlRsvdMask    = 0x3C // reserved, zero on transmit, not checked on receive
	CtrlVersionMask = 0x03 // DV
	Version         = 1    // the DDP version of RFC 5041
)

// Header lengths, excluding the MPA length field (RFC 5041 §4.2, §4.3).
const (
	TaggedLen   = 14
	UntaggedLen = 18
)

// Field offsets within the headers.
const (
	OffCtrl     = 0 // DDP control field
	OffULPCtrl  = 1 // first RsvdULP octet (the RDMAP control field)
	OffSTag     = 2 // tagged: STag (4)
	OffTO       = 6 // tagged: TO (8)
	OffULPField = 2 // untagged: RsvdULP[8:39] (RDMAP Invalidate STag)
	OffQN       = 6 // untagged: QN (4)
	OffMSN      = 10
	OffMO       = 14
)

// Untagged queue numbers used by RDMAP (RFC 5040 §5, RFC 7306 §5.2).
const (
	QNSend           = 0
	QNReadRequest    = 1
	QNTerminate      = 2
	QNAtomicResponse = 3
)

// ErrShort reports input too short for the header or message it should hold.
var ErrShort = errors.New("ddp: short buffer")

// ErrVersion is matched (with errors.Is) by the tagged and untagged
// "invalid DDP version" errors.
var ErrVersion = errors.New("ddp: invalid DDP version")

// IsTaggedHeader reports whether b starts with a DDP control field with T set.
// It returns false for empty input.
func IsTaggedHeader(b []byte) bool { return len(b) > 0 && b[0]&CtrlTagged != 0 }

// HeaderLen returns the header length for the model selected by the control
// byte ctrl: TaggedLen or UntaggedLen.
func HeaderLen(ctrl byte) int {
	if ctrl&CtrlTagged != 0 {
		return TaggedLen
	}
	return UntaggedLen
}

// Check validates the DDP header at the start of b (RFC 5041 §4, §7.2): the
// input must hold a whole header for its model and DV must be 1. It returns
// the header length. Errors are ErrShort or the tagged/untagged version
// *Error (which matches ErrVersion).
func Check(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, ErrShort
	}
	n := HeaderLen(b[0])
	if len(b) < n {
		return 0, ErrShort
	}
	if b[0]&CtrlVersionMask != Version {
		if n == TaggedLen {
			return 0, ErrTaggedVersion
		}
		return 0, ErrUntaggedVersion
	}
	return n, nil
}

func ctrlByte(tagged, last bool) byte {
	c := byte(Version)
	if tagged {
		c |= CtrlTagged
	}
	if last {
		c |= CtrlLast
	}
	return c
}

// Tagged is a view of a tagged DDP header (RFC 5041 §4.2, Figure 4).
type Tagged []byte

// IsValid reports whether h is long enough to hold a tagged header.
func (h Tagged) IsValid() bool { return len(h) >= TaggedLen }

// Tagged reports the T bit (1 for a well-formed tagged header).
func (h Tagged) Tagged() bool { return h[OffCtrl]&CtrlTagged != 0 }

// Last reports the L bit.
func (h Tagged) Last() bool { return h[OffCtrl]&CtrlLast != 0 }

// Version returns DV.
func (h Tagged) Version() uint8 { return h[OffCtrl] & CtrlVersionMask }

// Control returns the raw DDP control byte.
func (h Tagged) Control() byte { return h[OffCtrl] }

// RsvdULP returns the 8-bit RsvdULP field (RDMAP's control field).
func (h Tagged) RsvdULP() byte { return h[OffULPCtrl] }

// ULPControl is RsvdULP under the name RDMAP uses.
func (h Tagged) ULPControl() byte { return h[OffULPCtrl] }

// STag returns the Steering Tag.
func (h Tagged) STag() uint32 { return binary.BigEndian.Uint32(h[OffSTag:]) }

// TO returns the Tagged Offset.
func (h Tagged) TO() uint64 { return binary.BigEndian.Uint64(h[OffTO:]) }

// Init writes a complete tagged header: T=1, L=last, reserved bits zero,
// DV=1, and the given RsvdULP, STag and TO.
func (h Tagged) Init(last bool, ulp byte, stag uint32, to uint64) {
	h[OffCtrl] = ctrlByte(true, last)
	h[OffULPCtrl] = ulp
	binary.BigEndian.PutUint32(h[OffSTag:], stag)
	binary.BigEndian.PutUint64(h[OffTO:], to)
}

// SetLast sets or clears the L bit.
func (h Tagged) SetLast(last bool) { setLast(h, last) }

// SetULPControl sets RsvdULP.
func (h Tagged) SetULPControl(c byte) { h[OffULPCtrl] = c }

// SetSTag sets the STag.
func (h Tagged) SetSTag(v uint32) { binary.BigEndian.PutUint32(h[OffSTag:], v) }

// SetTO sets the Tagged Offset.
func (h Tagged) SetTO(v uint64) { binary.BigEndian.PutUint64(h[OffTO:], v) }

// Untagged is a view of an untagged DDP header (RFC 5041 §4.3, Figure 5).
type Untagged []byte

// IsValid reports whether h is long enough to hold an untagged header.
func (h Untagged) IsValid() bool { return len(h) >= UntaggedLen }

// Tagged reports the T bit (0 for a well-formed untagged header).
func (h Untagged) Tagged() bool { return h[OffCtrl]&CtrlTagged != 0 }

// Last reports the L bit.
func (h Untagged) Last() bool { return h[OffCtrl]&CtrlLast != 0 }

// Version returns DV.
func (h Untagged) Version() uint8 { return h[OffCtrl] & CtrlVersionMask }

// Control returns the raw DDP control byte.
func (h Untagged) Control() byte { return h[OffCtrl] }

// RsvdULP returns the first RsvdULP octet (RDMAP's control field).
func (h Untagged) RsvdULP() byte { return h[OffULPCtrl] }

// ULPControl is RsvdULP under the name RDMAP uses.
func (h Untagged) ULPControl() byte { return h[OffULPCtrl] }

// ULPField returns RsvdULP[8:39], the 32 bits RDMAP uses for the Invalidate
// STag.
func (h Untagged) ULPField() uint32 { return binary.BigEndian.Uint32(h[OffULPField:]) }

// QN returns the Queue Number.
func (h Untagged) QN() uint32 { return binary.BigEndian.Uint32(h[OffQN:]) }

// MSN returns the Message Sequence Number.
func (h Untagged) MSN() MSN { return MSN(binary.BigEndian.Uint32(h[OffMSN:])) }

// MO returns the Message Offset.
func (h Untagged) MO() uint32 { return binary.BigEndian.Uint32(h[OffMO:]) }

// Init writes a complete untagged header: T=0, L=last, reserved bits zero,
// DV=1, and the given RsvdULP octet, 32-bit RsvdULP field, QN, MSN and MO.
func (h Untagged) Init(last bool, ulp byte, field uint32, qn uint32, msn MSN, mo uint32) {
	h[OffCtrl] = ctrlByte(false, last)
	h[OffULPCtrl] = ulp
	binary.BigEndian.PutUint32(h[OffULPField:], field)
	binary.BigEndian.PutUint32(h[OffQN:], qn)
	binary.BigEndian.PutUint32(h[OffMSN:], uint32(msn))
	binary.BigEndian.PutUint32(h[OffMO:], mo)
}

// SetLast sets or clears the L bit.
func (h Untagged) SetLast(last bool) { setLast(h, last) }

// SetULPControl sets the first RsvdULP octet.
func (h Untagged) SetULPControl(c byte) { h[OffULPCtrl] = c }

// SetULPField sets RsvdULP[8:39].
func (h Untagged) SetULPField(v uint32) { binary.BigEndian.PutUint32(h[OffULPField:], v) }

// SetQN sets the Queue Number.
func (h Untagged) SetQN(v uint32) { binary.BigEndian.PutUint32(h[OffQN:], v) }

// SetMSN sets the Message Sequence Number.
func (h Untagged) SetMSN(v MSN) { binary.BigEndian.PutUint32(h[OffMSN:], uint32(v)) }

// SetMO sets the Message Offset.
func (h Untagged) SetMO(v uint32) { binary.BigEndian.PutUint32(h[OffMO:], v) }

func setLast(h []byte, last bool) {
	if last {
		h[OffCtrl] |= CtrlLast
	} else {
		h[OffCtrl] &^= CtrlLast
	}
}
