package iwarp

import (
	"errors"
	"fmt"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
)

// ErrClosed is returned by a closed Listener.
var ErrClosed = errors.New("iwarp: listener closed")

// ErrFirstFPDUTimeout ends an accepted connection whose initiator sent no FPDU within
// Config.FirstFPDUTimeout of the MPA Reply (RFC 5044 §7.1.2: the responder may not send
// before it; RFC 6581 §9.2: in peer-to-peer mode that FPDU is the RTR).
var ErrFirstFPDUTimeout = errors.New("iwarp: no FPDU from the initiator after the MPA Reply")

// RejectError is returned by Dial when the peer rejected the connection (MPA Reply with
// the R bit, RFC 5044 §7.1.2); it carries the peer's private data.
type RejectError struct {
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("iwarp: connection rejected by peer (%d bytes private data)", len(e.PrivateData))
}

// Unwrap returns mpa.ErrRejected.
func (e *RejectError) Unwrap() error { return mpa.ErrRejected }

// LLPError reports the loss of the TCP connection (RFC 5044 §8 code 1, "TCP connection
// closed, terminated or lost") as the error of an EventQPFatal; Err is the I/O error
// (a *net.OpError wrapping the syscall error, io.ErrUnexpectedEOF, …).
type LLPError struct{ Err error }

func (e *LLPError) Error() string { return "iwarp: connection lost: " + e.Err.Error() }

// Unwrap returns the I/O error.
func (e *LLPError) Unwrap() error { return e.Err }

// Is matches rdmap.TermMPATCPClosed.
func (e *LLPError) Is(target error) bool { return target == error(rdmap.TermMPATCPClosed) }

var errUsed = errors.New("iwarp: connection request already answered")
