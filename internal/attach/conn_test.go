package attach

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// unixPacketPair returns a connected SOCK_SEQPACKET pair, as the daemon's attachments are.
func unixPacketPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_UNIX SOCK_SEQPACKET socketpair: %v", err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "attach-test")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestCallPeerGone: a Call whose write finds the other side gone (before Serve saw the
// end of the connection) fails with ErrClosed, wrapping the system's error.
func TestCallPeerGone(t *testing.T) {
	a, b := unixPacketPair(t)
	defer a.Close()
	c := NewConn(a, func(m Msg) Msg { return m }) // no Serve: the end is seen by the write
	b.Close()
	_, err := c.Call(context.Background(), Msg{Op: "test"})
	if !errors.Is(err, ErrClosed) || !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Call to a closed peer: %v", err)
	}
}
