package cm

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// TestIsPeerClose: the peer's close on either transport (a reset, broken pipe or end of
// stream under iWARP, a DREQ under RoCEv2), wrapped or not, is a peer close; a failure of
// the connection is not.
func TestIsPeerClose(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&iwarp.LLPError{Err: syscall.ECONNRESET}, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{io.EOF, true},
		{rocev2.ErrPeerDisconnected, true},
		{fmt.Errorf("communication: %w", rocev2.ErrPeerDisconnected), true},
		{rocev2.ErrFirstMessageTimeout, false},
		{syscall.ETIMEDOUT, false},
		{errors.New("other"), false},
		{nil, false},
	} {
		if got := IsPeerClose(tc.err); got != tc.want {
			t.Errorf("IsPeerClose(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
