//go:build !linux

package xdp

import (
	"net/netip"

	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// Link is a rocev2.Link over an AF_XDP socket; it exists on Linux only.
type Link struct{}

var _ rocev2.Link = (*Link)(nil)

// New returns ErrNotSupported: AF_XDP is Linux only.
func New(o Options) (*Link, error) { return nil, ErrNotSupported }

// Port is the AF_XDP port the link runs on.
func (l *Link) Port() *afxdp.Port { return nil }

// Mode reports the attach mode.
func (l *Link) Mode() Mode { return ModeAuto }

// ZeroCopy reports whether the socket is bound in zero-copy mode.
func (l *Link) ZeroCopy() bool { return false }

// Stats returns the link's counters.
func (l *Link) Stats() Stats { return Stats{} }

// Send implements rocev2.Link.
func (l *Link) Send(bufs [][]byte, dst netip.AddrPort) error { return ErrNotSupported }

// Recv implements rocev2.Link.
func (l *Link) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	return 0, ErrNotSupported
}

// LocalAddr implements rocev2.Link.
func (l *Link) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// BatchSize implements rocev2.Link.
func (l *Link) BatchSize() int { return 1 }

// Close implements rocev2.Link.
func (l *Link) Close() error { return nil }
