package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// classify wraps a transport's connect error with the category every consumer needs
// (librdmacm's REJECTED, UNREACHABLE, CONNECT_ERROR with ETIMEDOUT …), keeping the cause.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		return err
	}
	var iwRej *iwarp.RejectError
	var rcRej *rocev2.RejectError
	switch {
	case errors.As(err, &iwRej):
		return &RejectError{PrivateData: iwRej.PrivateData, Err: err}
	case errors.As(err, &rcRej):
		if rcRej.Reason == roce.RejConsumerDefined {
			return &RejectError{PrivateData: rcRej.PrivateData, Err: err}
		}
		// no listener (invalid service ID), stale connection, no resources …: the CM,
		// not the consumer, refused
		return fmt.Errorf("%w: %w", ErrRefused, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: %w", ErrRefused, err)
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EINVAL):
		// EINVAL: the local address cannot reach the remote (a loopback source to a
		// routable destination)
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	case errors.Is(err, rocev2.ErrCMTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	var ae *net.AddrError
	if errors.As(err, &ae) { // no local address of the remote's family
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// closedErr marks a listener's closed error with ErrClosed.
func closedErr(err error) error {
	if errors.Is(err, iwarp.ErrClosed) || errors.Is(err, rocev2.ErrCMClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// IsPeerClose reports whether err, the error that ended a connection (Conn.Err, an
// rnic.AsyncEvent's Err), is the peer closing it — over iWARP an abortive close surfaces
// as a reset or broken pipe on the TCP connection, or end of stream; over RoCEv2 it is
// the peer's DREQ (rocev2.ErrPeerDisconnected) — rather than a failure of the connection
// (DAT and librdmacm report the first as DISCONNECTED, the second as an error).
func IsPeerClose(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, rocev2.ErrPeerDisconnected)
}
