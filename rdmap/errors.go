package rdmap

import (
	"errors"
	"strconv"

	"github.com/softrnic/softrnic/ddp"
)

// Layer is the 4-bit Terminate layer (RFC 5040 §4.8 Figure 9).
type Layer uint8

// Terminate layers.
const (
	LayerRDMAP Layer = 0x0
	LayerDDP   Layer = 0x1
	LayerLLP   Layer = 0x2 // MPA
)

// String names the layer.
func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return "layer " + strconv.FormatUint(uint64(l), 10)
}

// ErrorType is the 4-bit Terminate error type. Its meaning depends on the
// layer; the constants below name the RDMAP types (RFC 5040 §4.8), the DDP
// types (RFC 5041 §7.2) and the MPA type (RFC 5044 §8, RFC 6580 §3.3).
type ErrorType uint8

// Error types.
const (
	TypeLocalCatastrophic ErrorType = 0x0 // RDMAP
	TypeRemoteProtection  ErrorType = 0x1 // RDMAP
	TypeRemoteOperation   ErrorType = 0x2 // RDMAP

	TypeDDPCatastrophic ErrorType = 0x0 // DDP
	TypeDDPTagged       ErrorType = 0x1 // DDP
	TypeDDPUntagged     ErrorType = 0x2 // DDP
	TypeDDPLLP          ErrorType = 0x3 // DDP, reserved for the LLP

	TypeMPA ErrorType = 0x0 // LLP (MPA)
)

// String names the type as an RDMAP error type; TerminateError.String names
// it for its own layer.
func (t ErrorType) String() string { return typeName(LayerRDMAP, t) }

func typeName(l Layer, t ErrorType) string {
	switch l {
	case LayerRDMAP:
		switch t {
		case TypeLocalCatastrophic:
			return "local catastrophic error"
		case TypeRemoteProtection:
			return "remote protection error"
		case TypeRemoteOperation:
			return "remote operation error"
		}
	case LayerDDP:
		return ddp.ErrorType(t).String()
	case LayerLLP:
		if t == TypeMPA {
			return "MPA error"
		}
	}
	return "error type " + strconv.FormatUint(uint64(t), 10)
}

// ErrorCode is the 8-bit Terminate error code.
type ErrorCode uint8

// RDMAP error codes (RFC 5040 §4.8 Figure 9, RFC 6580 §3.1).
const (
	CodeInvalidSTag        ErrorCode = 0x00 // remote protection
	CodeBaseBounds         ErrorCode = 0x01 // remote protection
	CodeAccessRights       ErrorCode = 0x02 // remote protection
	CodeSTagNotAssociated  ErrorCode = 0x03 // remote protection
	CodeTOWrap             ErrorCode = 0x04 // remote protection
	CodeInvalidVersion     ErrorCode = 0x05 // remote operation
	CodeUnexpectedOpcode   ErrorCode = 0x06 // remote operation
	CodeCatastrophicStream ErrorCode = 0x07 // remote operation
	CodeCatastrophicGlobal ErrorCode = 0x08 // remote operation
	CodeCannotInvalidate   ErrorCode = 0x09 // remote protection or operation
	CodeUnspecified        ErrorCode = 0xFF // remote protection or operation
)

// DDP error codes (RFC 5041 §7.2, RFC 6580 §3.2), for layer DDP.
const (
	CodeDDPLocalCatastrophic ErrorCode = ErrorCode(ddp.CodeLocalCatastrophic)
	CodeDDPInvalidSTag       ErrorCode = ErrorCode(ddp.CodeInvalidSTag)
	CodeDDPBaseBounds        ErrorCode = ErrorCode(ddp.CodeBaseBounds)
	CodeDDPSTagNotAssociated ErrorCode = ErrorCode(ddp.CodeSTagNotAssociated)
	CodeDDPTOWrap            ErrorCode = ErrorCode(ddp.CodeTOWrap)
	CodeDDPTaggedVersion     ErrorCode = ErrorCode(ddp.CodeTaggedVersion)
	CodeDDPInvalidQN         ErrorCode = ErrorCode(ddp.CodeInvalidQN)
	CodeDDPMSNNoBuffer       ErrorCode = ErrorCode(ddp.CodeMSNNoBuffer)
	CodeDDPMSNRange          ErrorCode = ErrorCode(ddp.CodeMSNRange)
	CodeDDPInvalidMO         ErrorCode = ErrorCode(ddp.CodeInvalidMO)
	CodeDDPMessageTooLong    ErrorCode = ErrorCode(ddp.CodeMessageTooLong)
	CodeDDPUntaggedVersion   ErrorCode = ErrorCode(ddp.CodeUntaggedVersion)
)

// MPA error codes, type 0 of layer LLP (RFC 5044 §8, RFC 6581 §9, RFC 6580
// §3.3).
const (
	CodeMPATCPClosed         ErrorCode = 0x01 // TCP connection closed, terminated or lost
	CodeMPACRC               ErrorCode = 0x02 // MPA CRC error
	CodeMPAMarker            ErrorCode = 0x03 // marker and ULPDU length mismatch
	CodeMPAInvalidReqRep     ErrorCode = 0x04 // invalid MPA Request or Reply frame
	CodeMPALocalCatastrophic ErrorCode = 0x05 // RFC 6581
	CodeMPAInsufficientIRD   ErrorCode = 0x06 // RFC 6581
	CodeMPANoMatchingRTR     ErrorCode = 0x07 // RFC 6581
)

// String returns the code in hex; TerminateError.String names it.
func (c ErrorCode) String() string { return "0x" + hex2(uint8(c)) }

// TerminateError is the Layer/EType/ECode triple of a Terminate message
// (RFC 5040 §4.8): the common type for protocol errors of all three layers.
// It is comparable and matches with errors.Is by value.
type TerminateError struct {
	Layer Layer
	Type  ErrorType
	Code  ErrorCode
}

// Named terminate errors: every RDMAP entry of RFC 6580 §3.1 and the MPA
// entries of §3.3 and RFC 6581. DDP errors come from FromDDP.
var (
	TermLocalCatastrophic = TerminateError{LayerRDMAP, TypeLocalCatastrophic, 0}

	TermInvalidSTag          = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeInvalidSTag}
	TermBaseBounds           = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeBaseBounds}
	TermAccessRights         = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeAccessRights}
	TermSTagNotAssociated    = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeSTagNotAssociated}
	TermTOWrap               = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeTOWrap}
	TermProtCannotInvalidate = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeCannotInvalidate}
	TermProtUnspecified      = TerminateError{LayerRDMAP, TypeRemoteProtection, CodeUnspecified}

	TermInvalidVersion     = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeInvalidVersion}
	TermUnexpectedOpcode   = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeUnexpectedOpcode}
	TermCatastrophicStream = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeCatastrophicStream}
	TermCatastrophicGlobal = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeCatastrophicGlobal}
	TermOpCannotInvalidate = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeCannotInvalidate}
	TermOpUnspecified      = TerminateError{LayerRDMAP, TypeRemoteOperation, CodeUnspecified}

	TermMPATCPClosed         = TerminateError{LayerLLP, TypeMPA, CodeMPATCPClosed}
	TermMPACRC               = TerminateError{LayerLLP, TypeMPA, CodeMPACRC}
	TermMPAMarker            = TerminateError{LayerLLP, TypeMPA, CodeMPAMarker}
	TermMPAInvalidReqRep     = TerminateError{LayerLLP, TypeMPA, CodeMPAInvalidReqRep}
	TermMPALocalCatastrophic = TerminateError{LayerLLP, TypeMPA, CodeMPALocalCatastrophic}
	TermMPAInsufficientIRD   = TerminateError{LayerLLP, TypeMPA, CodeMPAInsufficientIRD}
	TermMPANoMatchingRTR     = TerminateError{LayerLLP, TypeMPA, CodeMPANoMatchingRTR}
)

// CodeName returns the registered name of the code for this layer and type,
// or "" if the triple is not assigned. RDMAP local catastrophic errors have
// no code; any code is accepted.
func (e TerminateError) CodeName() string {
	switch e.Layer {
	case LayerRDMAP:
		switch e.Type {
		case TypeLocalCatastrophic:
			return "local catastrophic error"
		case TypeRemoteProtection:
			switch e.Code {
			case CodeInvalidSTag:
				return "invalid STag"
			case CodeBaseBounds:
				return "base or bounds violation"
			case CodeAccessRights:
				return "access rights violation"
			case CodeSTagNotAssociated:
				return "STag not associated with RDMAP stream"
			case CodeTOWrap:
				return "TO wrap"
			case CodeCannotInvalidate:
				return "STag cannot be invalidated"
			case CodeUnspecified:
				return "unspecified error"
			}
		case TypeRemoteOperation:
			switch e.Code {
			case CodeInvalidVersion:
				return "invalid RDMAP version"
			case CodeUnexpectedOpcode:
				return "unexpected opcode"
			case CodeCatastrophicStream:
				return "catastrophic error, localized to RDMAP stream"
			case CodeCatastrophicGlobal:
				return "catastrophic error, global"
			case CodeCannotInvalidate:
				return "STag cannot be invalidated"
			case CodeUnspecified:
				return "unspecified error"
			}
		}
	case LayerDDP:
		return (&ddp.Error{Type: ddp.ErrorType(e.Type), Code: ddp.ErrorCode(e.Code)}).CodeName()
	case LayerLLP:
		if e.Type == TypeMPA {
			switch e.Code {
			case CodeMPATCPClosed:
				return "TCP connection closed, terminated or lost"
			case CodeMPACRC:
				return "MPA CRC error"
			case CodeMPAMarker:
				return "MPA marker and ULPDU length mismatch"
			case CodeMPAInvalidReqRep:
				return "invalid MPA request or reply frame"
			case CodeMPALocalCatastrophic:
				return "local catastrophic error"
			case CodeMPAInsufficientIRD:
				return "insufficient IRD resources"
			case CodeMPANoMatchingRTR:
				return "no matching RTR option"
			}
		}
	}
	return ""
}

// String returns e.g. "RDMAP remote operation error: unexpected opcode (0/2/0x06)".
func (e TerminateError) String() string {
	name := e.CodeName()
	if name == "" {
		name = "unassigned code"
	}
	return e.Layer.String() + " " + typeName(e.Layer, e.Type) + ": " + name + " (" +
		strconv.FormatUint(uint64(e.Layer), 10) + "/" + strconv.FormatUint(uint64(e.Type), 10) +
		"/0x" + hex2(uint8(e.Code)) + ")"
}

// Error implements error.
func (e TerminateError) Error() string { return e.String() }

// Is reports whether target equals e (as a TerminateError or *ddp.Error),
// or is ErrVersion/ErrOpcode/ddp.ErrVersion for the matching triples.
func (e TerminateError) Is(target error) bool {
	switch t := target.(type) {
	case TerminateError:
		return t == e
	case *ddp.Error:
		return t != nil && e.Layer == LayerDDP && FromDDP(t) == e
	}
	switch target {
	case ErrVersion:
		return e == TermInvalidVersion
	case ErrOpcode:
		return e == TermUnexpectedOpcode
	case ddp.ErrVersion:
		return e.Layer == LayerDDP && (&ddp.Error{Type: ddp.ErrorType(e.Type), Code: ddp.ErrorCode(e.Code)}).Is(ddp.ErrVersion)
	}
	return false
}

// Word returns the 16-bit Layer|EType|ECode value.
func (e TerminateError) Word() uint16 {
	return uint16(e.Layer&0xF)<<12 | uint16(e.Type&0xF)<<8 | uint16(e.Code)
}

// FromDDP converts a DDP error into its Terminate triple (layer DDP).
func FromDDP(e *ddp.Error) TerminateError {
	if e == nil {
		return TermLocalCatastrophic
	}
	return TerminateError{LayerDDP, ErrorType(e.Type), ErrorCode(e.Code)}
}

// FromLLP converts an MPA (LLP) error code into its Terminate triple: layer
// LLP, type 0, the given code (RFC 6580 §3.3).
func FromLLP(code uint8) TerminateError { return TerminateError{LayerLLP, TypeMPA, ErrorCode(code)} }

// AsTerminateError finds a TerminateError or *ddp.Error in err's chain and
// returns its Terminate triple.
func AsTerminateError(err error) (TerminateError, bool) {
	var te TerminateError
	if errors.As(err, &te) {
		return te, true
	}
	var de *ddp.Error
	if errors.As(err, &de) && de != nil {
		return FromDDP(de), true
	}
	return TerminateError{}, false
}

func hex2(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&15]})
}
