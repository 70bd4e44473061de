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

// newUDPLinkConn sets up a UDPLink on conn, bound to local. It repeats
// ListenUDP's set-up, which does not call it (ListenUDP's file is owned
// elsewhere); the two must stay in step.
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
		if domain == unix.AF_INET {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		}
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
		if opt.GSO {
			l.gso = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, udpSegment, 0) == nil
		}
		if opt.GRO {
			l.gro = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, udpGRO, 1) == nil
		}
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
