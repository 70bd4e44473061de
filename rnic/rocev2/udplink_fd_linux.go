//go:build linux

package rocev2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotUDPSocket is returned by NewUDPLinkFile for a file that is not a
// bound UDP socket.
var ErrNotUDPSocket = errors.New("rocev2: not a bound UDP socket")

// NewUDPLinkFile makes a UDP link of a UDP socket that is already bound,
// handed over as a file: typically a socket the softrnic daemon created in
// its SO_REUSEPORT group on UDP 4791 and passed to this process over a unix
// socket (package rnic/rocev2/steer). The socket must be bound to a specific
// IP address (the ICRC covers it). The link works on its own duplicate of
// the descriptor, as net.FilePacketConn does: the caller still closes f.
// The socket gets the options ListenUDP sets (DF, 8 MiB buffers, GSO/GRO
// as o asks).
func NewUDPLinkFile(f *os.File, o *UDPOptions) (*UDPLink, error) {
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("rocev2: %s: %w", f.Name(), err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("%w: %s is a %T", ErrNotUDPSocket, f.Name(), pc)
	}
	la, ok := conn.LocalAddr().(*net.UDPAddr)
	if !ok || la.Port == 0 {
		conn.Close()
		return nil, fmt.Errorf("%w: %s is not bound", ErrNotUDPSocket, f.Name())
	}
	local := la.AddrPort()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	if local.Addr().IsUnspecified() {
		conn.Close()
		return nil, ErrUnspecifiedAddr
	}
	l, err := newUDPLinkConn(conn, local, o)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

// newUDPLinkConn sets up a UDPLink on conn, bound to local, with the socket
// options ListenUDP sets (setOptions).
func newUDPLinkConn(conn *net.UDPConn, local netip.AddrPort, o *UDPOptions) (*UDPLink, error) {
	var opt UDPOptions
	if o != nil {
		opt = *o
	}
	if opt.Batch <= 0 {
		opt.Batch = 64
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &UDPLink{conn: conn, rc: rc, batch: opt.Batch, local: local}
	var domain int
	cerr := rc.Control(func(fd uintptr) {
		domain, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			return
		}
		l.setOptions(int(fd), domain == unix.AF_INET, &opt)
	})
	if cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, fmt.Errorf("rocev2: SO_DOMAIN: %w", err)
	}
	l.init(opt.Batch)
	return l, nil
}
