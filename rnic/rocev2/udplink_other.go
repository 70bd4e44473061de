//go:build !linux

package rocev2

import (
	"errors"
	"net"
	"net/netip"
)

// UDPOptions configure a UDPLink (batching and offloads are Linux only).
type UDPOptions struct {
	Batch    int
	GSO, GRO bool
}

// ErrUnspecifiedAddr is returned by ListenUDP for a wildcard address: the
// ICRC covers the source IP, so a link needs a specific one.
var ErrUnspecifiedAddr = errors.New("rocev2: a RoCE link needs a specific local IP address (the ICRC covers it)")

// UDPLink is a Link over a UDP socket, one datagram per system call.
type UDPLink struct {
	conn  *net.UDPConn
	local netip.AddrPort
}

// ListenUDP opens a UDP link on addr (see the Linux version for the port rules).
func ListenUDP(addr netip.AddrPort, o *UDPOptions) (*UDPLink, error) {
	if !addr.Addr().IsValid() || addr.Addr().IsUnspecified() {
		return nil, ErrUnspecifiedAddr
	}
	conn, err := listenUDP("udp", addr)
	if err != nil {
		return nil, err
	}
	la := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	return &UDPLink{conn: conn, local: netip.AddrPortFrom(la.Addr().Unmap(), la.Port())}, nil
}

// GSO reports false: no offloads here.
func (l *UDPLink) GSO() bool { return false }

// GRO reports false.
func (l *UDPLink) GRO() bool { return false }

// LocalAddr implements Link.
func (l *UDPLink) LocalAddr() netip.AddrPort { return l.local }

// BatchSize implements Link.
func (l *UDPLink) BatchSize() int { return 1 }

// Close implements Link.
func (l *UDPLink) Close() error { return l.conn.Close() }

// Send implements Link.
func (l *UDPLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	var first error
	for _, b := range bufs {
		_, err := l.conn.WriteToUDPAddrPort(b, dst)
		if errors.Is(err, net.ErrClosed) {
			return ErrLinkClosed
		}
		if err != nil && first == nil {
			first = err // the datagram is lost; the rest still go
		}
	}
	return first
}

// Recv implements Link.
func (l *UDPLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	n, a, err := l.conn.ReadFromUDPAddrPort(bufs[0][:cap(bufs[0])])
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, ErrLinkClosed
		}
		return 0, err
	}
	sizes[0], from[0] = n, netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	return 1, nil
}

// SocketDrops is not available on this system (errors.ErrUnsupported).
func (l *UDPLink) SocketDrops() (uint64, error) { return 0, errors.ErrUnsupported }
