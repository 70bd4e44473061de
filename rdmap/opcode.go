package rdmap

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/softrnic/softrnic/ddp"
)

// RDMAP control field (RFC 5040 §4.1): the first RsvdULP octet of the DDP
// header.
const (
	CtrlVersionMask = 0xC0 // RV
	CtrlRsvdMask    = 0x30 // reserved, zero on transmit, ignored on receive
	CtrlOpcodeMask  = 0x0F
	Version         = 1 // RV of RFC 5040
)

// Sentinel parse errors.
var (
	ErrShort    = errors.New("rdmap: short buffer")
	ErrLength   = errors.New("rdmap: message length mismatch")
	ErrVersion  = errors.New("rdmap: invalid RDMAP version")
	ErrOpcode   = errors.New("rdmap: unexpected opcode")
	ErrTrailing = errors.New("rdmap: trailing bytes")
)

// Opcode is the 4-bit RDMA message opcode (RFC 5040 §4.1 Figure 4, RFC 7306
// §4.1 Figure 2, RFC 6580 §3.4).
type Opcode uint8

// RDMA opcodes.
const (
	OpWrite            Opcode = 0x0
	OpReadRequest      Opcode = 0x1
	OpReadResponse     Opcode = 0x2
	OpSend             Opcode = 0x3
	OpSendInvalidate   Opcode = 0x4
	OpSendSE           Opcode = 0x5
	OpSendSEInvalidate Opcode = 0x6
	OpTerminate        Opcode = 0x7
	OpImmediateData    Opcode = 0x8 // RFC 7306
	OpImmediateDataSE  Opcode = 0x9 // RFC 7306
	OpAtomicRequest    Opcode = 0xA // RFC 7306
	OpAtomicResponse   Opcode = 0xB // RFC 7306
	OpExperimental     Opcode = 0xF // reserved for experiments (RFC 6580)
)

var opNames = [...]string{
	"RDMA Write", "RDMA Read Request", "RDMA Read Response", "Send",
	"Send with Invalidate", "Send with SE", "Send with SE and Invalidate",
	"Terminate", "Immediate Data", "Immediate Data with SE",
	"Atomic Request", "Atomic Response",
}

// String returns the RFC name of the opcode.
func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	if o == OpExperimental {
		return "Experimental"
	}
	return "opcode 0x" + strconv.FormatUint(uint64(o), 16)
}

// Known reports whether o is defined by RFC 5040 or RFC 7306 (0-11).
func (o Opcode) Known() bool { return o <= OpAtomicResponse }

// Extension reports whether o is one of the RFC 7306 opcodes (8-11), which
// Linux siw does not support.
func (o Opcode) Extension() bool { return o >= OpImmediateData && o <= OpAtomicResponse }

// Tagged reports whether the message uses the tagged buffer model (T=1):
// RDMA Write and RDMA Read Response.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// Queue returns the untagged queue number the message targets; ok is false
// for tagged and unknown opcodes.
func (o Opcode) Queue() (qn uint32, ok bool) {
	switch o {
	case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate, OpImmediateData, OpImmediateDataSE:
		return ddp.QNSend, true
	case OpReadRequest, OpAtomicRequest:
		return ddp.QNReadRequest, true
	case OpTerminate:
		return ddp.QNTerminate, true
	case OpAtomicResponse:
		return ddp.QNAtomicResponse, true
	}
	return 0, false
}

// CarriesInvalidateSTag reports whether the Invalidate STag field (DDP
// RsvdULP[8:39]) is valid: Send with Invalidate and Send with SE and
// Invalidate. For every other opcode it is zero on transmit and ignored.
func (o Opcode) CarriesInvalidateSTag() bool {
	return o == OpSendInvalidate || o == OpSendSEInvalidate
}

// SolicitedEvent reports whether the message requests a solicited event.
func (o Opcode) SolicitedEvent() bool {
	return o == OpSendSE || o == OpSendSEInvalidate || o == OpImmediateDataSE
}

// CarriesPayload reports whether ULP payload may follow the headers
// (RFC 5040 §4.2 Figure 5, RFC 7306 §4.2 Figure 3).
func (o Opcode) CarriesPayload() bool {
	return o == OpWrite || o == OpReadResponse || (o >= OpSend && o <= OpSendSEInvalidate)
}

// IsSend reports whether o is one of the four Send variants.
func (o Opcode) IsSend() bool { return o >= OpSend && o <= OpSendSEInvalidate }

// HeaderLen returns the length of the RDMAP header that follows the DDP
// header: 28 for Read Request, 4 (the minimum) for Terminate, 8 for
// Immediate Data, 52 for Atomic Request, 12 for Atomic Response, else 0.
func (o Opcode) HeaderLen() int {
	switch o {
	case OpReadRequest:
		return ReadRequestLen
	case OpTerminate:
		return TerminateMinLen
	case OpImmediateData, OpImmediateDataSE:
		return ImmediateLen
	case OpAtomicRequest:
		return AtomicRequestLen
	case OpAtomicResponse:
		return AtomicResponseLen
	}
	return 0
}

// Control returns the RDMAP control byte for o: RV=1, reserved bits zero.
func Control(o Opcode) byte { return Version<<6 | byte(o)&CtrlOpcodeMask }

// ControlVersion returns RV of a control byte.
func ControlVersion(c byte) uint8 { return c >> 6 }

// ControlOpcode returns the opcode of a control byte.
func ControlOpcode(c byte) Opcode { return Opcode(c & CtrlOpcodeMask) }

// CheckSegment validates the RDMAP view of a received DDP segment whose
// header starts hdr (RFC 5040 §7.2, RFC 7306 §8.2) and returns its opcode and
// DDP header length. Checks, in siw's order: the DDP header (ddp.Check:
// ErrShort or a *ddp.Error for the version); RV == 1 (TermInvalidVersion);
// the opcode is known (TermUnexpectedOpcode); the T bit matches the opcode
// (TermUnexpectedOpcode); an untagged segment targets the opcode's queue
// (ddp.ErrInvalidQN). Protocol errors are TerminateError values or
// *ddp.Error; use AsTerminateError to convert either.
func CheckSegment(hdr []byte) (Opcode, int, error) {
	n, err := ddp.Check(hdr)
	if err != nil {
		return 0, 0, err
	}
	c := hdr[ddp.OffULPCtrl]
	op := ControlOpcode(c)
	if ControlVersion(c) != Version {
		return op, n, TermInvalidVersion
	}
	if !op.Known() || op.Tagged() != ddp.IsTaggedHeader(hdr) {
		return op, n, TermUnexpectedOpcode
	}
	if n == ddp.UntaggedLen {
		qn, _ := op.Queue()
		if binary.BigEndian.Uint32(hdr[ddp.OffQN:]) != qn {
			return op, n, ddp.ErrInvalidQN
		}
	}
	return op, n, nil
}
