package ddp

import "strconv"

// Layer is the Terminate layer number of DDP (RFC 5040 §4.8, RFC 6580 §3.2).
const Layer = 1

// ErrorType is the 4-bit DDP error type (RFC 5041 §7.2).
type ErrorType uint8

// DDP error types.
const (
	TypeCatastrophic ErrorType = 0x0 // local catastrophic
	TypeTagged       ErrorType = 0x1 // tagged buffer error
	TypeUntagged     ErrorType = 0x2 // untagged buffer error
	TypeLLP          ErrorType = 0x3 // reserved for the LLP
)

// String names the error type.
func (t ErrorType) String() string {
	switch t {
	case TypeCatastrophic:
		return "local catastrophic"
	case TypeTagged:
		return "tagged buffer error"
	case TypeUntagged:
		return "untagged buffer error"
	case TypeLLP:
		return "LLP error"
	}
	return "error type 0x" + strconv.FormatUint(uint64(t), 16)
}

// ErrorCode is the 8-bit DDP error code; its meaning depends on the type.
type ErrorCode uint8

// DDP error codes (RFC 5041 §7.2, RFC 6580 §3.2).
const (
	CodeLocalCatastrophic ErrorCode = 0x00 // type 0

	CodeInvalidSTag       ErrorCode = 0x00 // type 1
	CodeBaseBounds        ErrorCode = 0x01 // type 1
	CodeSTagNotAssociated ErrorCode = 0x02 // type 1
	CodeTOWrap            ErrorCode = 0x03 // type 1
	CodeTaggedVersion     ErrorCode = 0x04 // type 1

	CodeInvalidQN       ErrorCode = 0x01 // type 2
	CodeMSNNoBuffer     ErrorCode = 0x02 // type 2
	CodeMSNRange        ErrorCode = 0x03 // type 2
	CodeInvalidMO       ErrorCode = 0x04 // type 2
	CodeMessageTooLong  ErrorCode = 0x05 // type 2
	CodeUntaggedVersion ErrorCode = 0x06 // type 2
)

// Error is a DDP protocol error (RFC 5041 §7): layer DDP, with Type and Code.
// Errors match with errors.Is when Type and Code are equal.
type Error struct {
	Type ErrorType
	Code ErrorCode
}

// The errors of RFC 5041 §7.2. They are shared values; do not modify them.
var (
	ErrLocalCatastrophic = &Error{TypeCatastrophic, CodeLocalCatastrophic}
	ErrInvalidSTag       = &Error{TypeTagged, CodeInvalidSTag}
	ErrBaseBounds        = &Error{TypeTagged, CodeBaseBounds}
	ErrSTagNotAssociated = &Error{TypeTagged, CodeSTagNotAssociated}
	ErrTOWrap            = &Error{TypeTagged, CodeTOWrap}
	ErrTaggedVersion     = &Error{TypeTagged, CodeTaggedVersion}
	ErrInvalidQN         = &Error{TypeUntagged, CodeInvalidQN}
	ErrMSNNoBuffer       = &Error{TypeUntagged, CodeMSNNoBuffer}
	ErrMSNRange          = &Error{TypeUntagged, CodeMSNRange}
	ErrInvalidMO         = &Error{TypeUntagged, CodeInvalidMO}
	ErrMessageTooLong    = &Error{TypeUntagged, CodeMessageTooLong}
	ErrUntaggedVersion   = &Error{TypeUntagged, CodeUntaggedVersion}
)

// Layer returns the Terminate layer of every DDP error: 1.
func (e *Error) Layer() uint8 { return Layer }

// CodeName returns the RFC 5041 name of the code under this type, or "" if
// the pair is not assigned.
func (e *Error) CodeName() string {
	switch e.Type {
	case TypeCatastrophic:
		return "local catastrophic"
	case TypeTagged:
		switch e.Code {
		case CodeInvalidSTag:
			return "invalid STag"
		case CodeBaseBounds:
			return "base or bounds violation"
		case CodeSTagNotAssociated:
			return "STag not associated with DDP stream"
		case CodeTOWrap:
			return "TO wrap"
		case CodeTaggedVersion:
			return "invalid DDP version"
		}
	case TypeUntagged:
		switch e.Code {
		case CodeInvalidQN:
			return "invalid QN"
		case CodeMSNNoBuffer:
			return "invalid MSN - no buffer available"
		case CodeMSNRange:
			return "invalid MSN - MSN range is not valid"
		case CodeInvalidMO:
			return "invalid MO"
		case CodeMessageTooLong:
			return "DDP message too long for available buffer"
		case CodeUntaggedVersion:
			return "invalid DDP version"
		}
	case TypeLLP:
		return "LLP error"
	}
	return ""
}

// String returns e.g. "DDP untagged buffer error: invalid QN (1/2/0x01)".
func (e *Error) String() string {
	name := e.CodeName()
	if name == "" {
		name = "unassigned code"
	}
	return "DDP " + e.Type.String() + ": " + name + " (1/" +
		strconv.FormatUint(uint64(e.Type), 10) + "/0x" + hex2(uint8(e.Code)) + ")"
}

// Error implements error.
func (e *Error) Error() string { return e.String() }

// Is reports whether target is an *Error with the same type and code, or
// ErrVersion for the two version errors.
func (e *Error) Is(target error) bool {
	if target == ErrVersion {
		return (e.Type == TypeTagged && e.Code == CodeTaggedVersion) ||
			(e.Type == TypeUntagged && e.Code == CodeUntaggedVersion)
	}
	t, ok := target.(*Error)
	return ok && t != nil && t.Type == e.Type && t.Code == e.Code
}

func hex2(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&15]})
}
