package mpa

import (
	"errors"
	"strconv"
)

// ErrorCode is an MPA error code (RFC 5044 §8, extended by RFC 6581 §8). In a
// Terminate it is the ECode of Layer 2 (LLP), EType 0 (MPA).
type ErrorCode uint8

// MPA error codes.
const (
	CodeTCPClosed         ErrorCode = 0x01 // TCP connection closed, terminated or lost (RFC 5044 §8)
	CodeCRC               ErrorCode = 0x02 // received CRC does not match (RFC 5044 §8)
	CodeMarker            ErrorCode = 0x03 // Marker and ULPDU Length disagree on the FPDU start (RFC 5044 §8)
	CodeInvalidReqRep     ErrorCode = 0x04 // invalid MPA Request or Reply frame (RFC 5044 §8)
	CodeLocalCatastrophic ErrorCode = 0x05 // local catastrophic error (RFC 6581 §8)
	CodeInsufficientIRD   ErrorCode = 0x06 // insufficient IRD resources (RFC 6581 §8, §9.1)
	CodeNoMatchingRTR     ErrorCode = 0x07 // no matching RTR option (RFC 6581 §8, §9.2)
)

// TermLayer and TermType are the RFC 5040 §7.3 / RFC 6581 §8 Terminate layer
// and error type under which every ErrorCode is reported: Layer 2 (LLP),
// EType 0 (MPA).
const (
	TermLayer = 0x2
	TermType  = 0x0
)

var codeNames = [...]string{
	CodeTCPClosed:         "TCP connection lost",
	CodeCRC:               "CRC error",
	CodeMarker:            "marker/FPDU start mismatch",
	CodeInvalidReqRep:     "invalid MPA request/reply",
	CodeLocalCatastrophic: "local catastrophic",
	CodeInsufficientIRD:   "insufficient IRD resources",
	CodeNoMatchingRTR:     "no matching RTR option",
}

// String returns the RFC 5044 §8 / RFC 6581 §8 description of c.
func (c ErrorCode) String() string {
	if int(c) < len(codeNames) && codeNames[c] != "" {
		return codeNames[c]
	}
	return "mpa error code 0x" + strconv.FormatUint(uint64(c), 16)
}

// Error is an MPA protocol error carrying the LLP error code (RFC 5044 §8,
// RFC 6581 §8) to report locally or to put in a Terminate (Layer 2, EType 0).
type Error struct {
	Code   ErrorCode
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Reason == "" {
		return "mpa: " + e.Code.String()
	}
	return "mpa: " + e.Code.String() + ": " + e.Reason
}

// Is reports whether target is an *Error with the same Code, so
// errors.Is(err, &mpa.Error{Code: mpa.CodeCRC}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Preallocated errors returned on the framing hot path (no allocation).
var (
	errCRC    = &Error{Code: CodeCRC, Reason: "FPDU CRC mismatch"}
	errMarker = &Error{Code: CodeMarker, Reason: "marker FPDUPTR does not point at the FPDU start"}
)

// Sentinel parse and usage errors, usable with errors.Is.
var (
	ErrShort              = errors.New("mpa: frame too short")
	ErrBadKey             = errors.New("mpa: bad MPA request/reply key (RFC 5044 §7.1.1)")
	ErrPrivateDataTooLong = errors.New("mpa: private data too long (RFC 5044 §7.1.1)")
	ErrTrailingData       = errors.New("mpa: bytes after the private data")
	ErrShortEnhanced      = errors.New("mpa: S set but private data shorter than 4 (RFC 6581 §6)")
	ErrRejected           = errors.New("mpa: connection rejected by peer (R bit, RFC 5044 §7.1.2)")
	ErrULPDUTooLong       = errors.New("mpa: ULPDU longer than 65535 or FPDU too long for markers")
	ErrNotInFPDU          = errors.New("mpa: no FPDU in progress (call Next)")
	ErrFPDUInProgress     = errors.New("mpa: previous FPDU not ended (call End)")
	ErrShortULPDU         = errors.New("mpa: read beyond the end of the ULPDU")
)
