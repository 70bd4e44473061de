//go:build !linux

package netstack

import (
	"context"
	"net"
	"net/netip"

	"github.com/softrnic/softrnic/link/afxdp"
)

// Stack is a userspace TCP/IP stack on an AF_XDP port; Linux only.
type Stack struct{}

// New returns ErrNotSupported: AF_XDP is Linux only.
func New(p *afxdp.Port, c *Config) (*Stack, error) { return nil, ErrNotSupported }

// Addr is the stack's IP address.
func (st *Stack) Addr() netip.Addr { return netip.Addr{} }

// Listen returns ErrNotSupported.
func (st *Stack) Listen(network, address string) (net.Listener, error) { return nil, ErrNotSupported }

// DialContext returns ErrNotSupported.
func (st *Stack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return nil, ErrNotSupported
}

// Stats returns the stack's counters.
func (st *Stack) Stats() Stats { return Stats{} }

// Close does nothing.
func (st *Stack) Close() error { return nil }
