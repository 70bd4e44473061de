package rdmap

import (
	"encoding/binary"
	"strconv"
)

// RFC 7306 header lengths (after the DDP header).
const (
	ImmediateLen      = 8  // §6.2 Figure 7
	AtomicRequestLen  = 52 // §5.2.1 Figure 4
	AtomicResponseLen = 12 // §5.2.2 Figure 6
)

// ParseImmediate returns the 8 bytes of Immediate Data of an Immediate Data
// (with SE) message (RFC 7306 §6.2). The message must carry exactly 8 bytes
// (§6.3): ErrShort for fewer, ErrLength for more.
func ParseImmediate(b []byte) (uint64, error) {
	if len(b) < ImmediateLen {
		return 0, ErrShort
	}
	if len(b) > ImmediateLen {
		return 0, ErrLength
	}
	return binary.BigEndian.Uint64(b), nil
}

// AppendImmediate appends 8 bytes of Immediate Data.
func AppendImmediate(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// AtomicOpcode is the 4-bit Atomic Operation Code (RFC 7306 §5.2.1 Figure 5,
// §10.1).
type AtomicOpcode uint8

// Atomic operation codes.
const (
	AtomicFetchAdd AtomicOpcode = 0x0
	AtomicReserved AtomicOpcode = 0x1 // reserved by RFC 7306 §10.1
	AtomicCmpSwap  AtomicOpcode = 0x2
)

// String names the atomic opcode.
func (a AtomicOpcode) String() string {
	switch a {
	case AtomicFetchAdd:
		return "FetchAdd"
	case AtomicCmpSwap:
		return "CmpSwap"
	case AtomicReserved:
		return "Reserved"
	}
	return "atomic opcode 0x" + strconv.FormatUint(uint64(a), 16)
}

// Known reports whether a is FetchAdd or CmpSwap.
func (a AtomicOpcode) Known() bool { return a == AtomicFetchAdd || a == AtomicCmpSwap }

// AllOnes is the value of the mask fields that a request does not use
// (RFC 7306 §5.2.1).
const AllOnes = ^uint64(0)

// AtomicRequest is the Atomic Operation Request header (RFC 7306 §5.2.1). It
// travels on QN 1 with opcode OpAtomicRequest.
type AtomicRequest struct {
	Op          AtomicOpcode
	ReqID       uint32 // Request Identifier, echoed in the response
	STag        uint32 // Remote STag
	TO          uint64 // Remote Tagged Offset, 8-byte aligned
	Data        uint64 // Add Data (FetchAdd) or Swap Data (CmpSwap)
	DataMask    uint64 // Add Mask or Swap Mask
	Compare     uint64 // Compare Data (CmpSwap; zero otherwise)
	CompareMask uint64 // Compare Mask (CmpSwap; all ones otherwise)
}

// NewFetchAdd returns a masked FetchAdd request; addMask 0 is a plain 64-bit
// add. Compare is zero and CompareMask all ones, as §5.2.1 requires.
func NewFetchAdd(reqID, stag uint32, to, add, addMask uint64) AtomicRequest {
	return AtomicRequest{AtomicFetchAdd, reqID, stag, to, add, addMask, 0, AllOnes}
}

// NewCmpSwap returns a masked CmpSwap request; masks of AllOnes compare and
// swap the whole 64-bit value.
func NewCmpSwap(reqID, stag uint32, to, compare, compareMask, swap, swapMask uint64) AtomicRequest {
	return AtomicRequest{AtomicCmpSwap, reqID, stag, to, swap, swapMask, compare, compareMask}
}

// ParseAtomicRequest decodes an Atomic Request header, which must be exactly
// AtomicRequestLen bytes (ErrShort, ErrLength); ULP payload is not allowed
// (RFC 7306 §4.2). Reserved bits are ignored and any AOpCode is returned;
// Check applies the semantic rules.
func ParseAtomicRequest(b []byte) (AtomicRequest, error) {
	if len(b) < AtomicRequestLen {
		return AtomicRequest{}, ErrShort
	}
	if len(b) > AtomicRequestLen {
		return AtomicRequest{}, ErrLength
	}
	be := binary.BigEndian
	return AtomicRequest{
		Op:          AtomicOpcode(b[3] & 0x0F),
		ReqID:       be.Uint32(b[4:]),
		STag:        be.Uint32(b[8:]),
		TO:          be.Uint64(b[12:]),
		Data:        be.Uint64(b[20:]),
		DataMask:    be.Uint64(b[28:]),
		Compare:     be.Uint64(b[36:]),
		CompareMask: be.Uint64(b[44:]),
	}, nil
}

// Len returns AtomicRequestLen.
func (r AtomicRequest) Len() int { return AtomicRequestLen }

// Append appends the encoded header (reserved bits zero) to b.
func (r AtomicRequest) Append(b []byte) []byte {
	be := binary.BigEndian
	b = be.AppendUint32(b, uint32(r.Op&0x0F))
	b = be.AppendUint32(b, r.ReqID)
	b = be.AppendUint32(b, r.STag)
	b = be.AppendUint64(b, r.TO)
	b = be.AppendUint64(b, r.Data)
	b = be.AppendUint64(b, r.DataMask)
	b = be.AppendUint64(b, r.Compare)
	return be.AppendUint64(b, r.CompareMask)
}

// Check applies the Responder's checks (RFC 7306 §5.2.1, §8.2): an unknown
// AOpCode is TermUnexpectedOpcode (RFC 7306 names no code for it), a TO that
// is not 8-byte aligned is TermCatastrophicStream (§8.2).
func (r AtomicRequest) Check() error {
	if !r.Op.Known() {
		return TermUnexpectedOpcode
	}
	if r.TO&7 != 0 {
		return TermCatastrophicStream
	}
	return nil
}

// Apply computes the value the Responder writes back given the original
// 64-bit value (RFC 7306 §5.1). FetchAdd adds Data to orig in independent
// fields whose most significant bits are the set bits of DataMask (the carry
// out of a field is discarded; mask 0 is a plain add). CmpSwap replaces the
// DataMask bits of orig with those of Data if orig equals Compare under
// CompareMask, else returns orig. Unknown opcodes return orig.
func (r AtomicRequest) Apply(orig uint64) uint64 {
	switch r.Op {
	case AtomicFetchAdd:
		m := r.DataMask
		// Add with each field's top bit cleared so no carry crosses a
		// field boundary, then restore the top bits (sum mod 2).
		return ((orig &^ m) + (r.Data &^ m)) ^ ((orig ^ r.Data) & m)
	case AtomicCmpSwap:
		if (r.Compare^orig)&r.CompareMask == 0 {
			return orig&^r.DataMask | r.Data&r.DataMask
		}
	}
	return orig
}

// AtomicResponse is the Atomic Operation Response header (RFC 7306 §5.2.2).
// It travels on QN 3 with opcode OpAtomicResponse.
type AtomicResponse struct {
	ReqID uint32 // Original Request Identifier
	Orig  uint64 // Original Remote Data Value
}

// ParseAtomicResponse decodes an Atomic Response header, which must be
// exactly AtomicResponseLen bytes (ErrShort, ErrLength).
func ParseAtomicResponse(b []byte) (AtomicResponse, error) {
	if len(b) < AtomicResponseLen {
		return AtomicResponse{}, ErrShort
	}
	if len(b) > AtomicResponseLen {
		return AtomicResponse{}, ErrLength
	}
	return AtomicResponse{binary.BigEndian.Uint32(b), binary.BigEndian.Uint64(b[4:])}, nil
}

// Len returns AtomicResponseLen.
func (r AtomicResponse) Len() int { return AtomicResponseLen }

// Append appends the encoded header to b.
func (r AtomicResponse) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, r.ReqID)
	return binary.BigEndian.AppendUint64(b, r.Orig)
}
