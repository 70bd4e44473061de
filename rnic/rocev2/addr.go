package rocev2

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softrnic/softrnic/roce"
)

// Addr is the address of one end of a RoCEv2 connection: the IP address, the
// RDMA-CM service port (the RDMA_PS_TCP port of the CM service ID, what rdma_cm
// applications call the port) and the UDP port of the RoCE link there. It
// implements net.Addr with the network "rocev2".
//
// The UDP port is 4791 (roce.UDPPort) for every kernel and hardware RoCEv2
// device; a softrnic endpoint may listen on another one so that several can share
// an IP address. Its text form appends it after '@' when it is not 4791:
// "10.0.0.2:7471", "10.0.0.2:7471@4792", "[fd00::2]:7471@4792".
type Addr struct {
	IP      netip.Addr
	Port    uint16 // RDMA-CM service port
	UDPPort uint16 // UDP port of the RoCE link; 0 means 4791
}

// Network returns "rocev2".
func (a Addr) Network() string { return "rocev2" }

// String returns "ip:port", or "ip:port@udpport" when the UDP port is not 4791
// (IPv6 addresses in brackets).
func (a Addr) String() string {
	s := netip.AddrPortFrom(a.IP, a.Port).String()
	if a.UDPPort != 0 && a.UDPPort != roce.UDPPort {
		s += "@" + strconv.Itoa(int(a.UDPPort))
	}
	return s
}

// AddrPort returns the IP address and the RDMA-CM port.
func (a Addr) AddrPort() netip.AddrPort { return netip.AddrPortFrom(a.IP, a.Port) }

// LinkAddr returns where the RoCE packets of this end go: its IP address and UDP
// port (4791 when UDPPort is 0).
func (a Addr) LinkAddr() netip.AddrPort {
	p := a.UDPPort
	if p == 0 {
		p = roce.UDPPort
	}
	return netip.AddrPortFrom(a.IP.Unmap(), p)
}

// ErrBadAddr is wrapped by ParseAddr's errors.
var ErrBadAddr = errors.New("rocev2: bad address")

// ParseAddr parses "ip:port" or "ip:port@udpport" (IP literals only: "10.0.0.2:7471",
// "[fd00::2]:7471@4792"). Without "@udpport" the UDP port is left 0 (4791).
func ParseAddr(s string) (Addr, error) {
	hp, up, hasUDP := strings.Cut(s, "@")
	ap, err := netip.ParseAddrPort(hp)
	if err != nil {
		return Addr{}, fmt.Errorf("%w %q: %w", ErrBadAddr, s, err)
	}
	a := Addr{IP: ap.Addr().Unmap(), Port: ap.Port()}
	if hasUDP {
		p, err := strconv.ParseUint(up, 10, 16)
		if err != nil || p == 0 {
			return Addr{}, fmt.Errorf("%w %q: UDP port %q", ErrBadAddr, s, up)
		}
		a.UDPPort = uint16(p)
	}
	return a, nil
}

// peerLinkAddr returns where a peer that sent a packet from src listens (Annex
// A17.3): a source port of 0 or in 0xC000-0xFFFF is ECMP entropy (kernel and
// hardware RoCEv2 send from there and listen on 4791); any other source port is
// a softrnic endpoint's own UDP port, which it sends from and listens on.
// Config.PeerPort, when set, overrides the rule for every peer.
func (e *Endpoint) peerLinkAddr(src netip.AddrPort) netip.AddrPort {
	p := src.Port()
	switch {
	case e.cfg.PeerPort != 0:
		p = e.cfg.PeerPort
	case roce.IsEntropyPort(p):
		p = roce.UDPPort
	}
	return netip.AddrPortFrom(src.Addr().Unmap(), p)
}

// dialLinkAddr returns the link address Dial sends the REQ to for a.
func (e *Endpoint) dialLinkAddr(a Addr) netip.AddrPort {
	if a.UDPPort == 0 && e.cfg.PeerPort != 0 {
		return netip.AddrPortFrom(a.IP.Unmap(), e.cfg.PeerPort)
	}
	return a.LinkAddr()
}

// fromPeer reports whether a packet from src can be the connected peer's at peer
// (IBTA §9.6 header validation, as rxe_recv.c check_addr: an RC/UC QP takes
// packets from its path only): the same IP, and a source port that maps to the
// peer's UDP port by peerLinkAddr (any port with Config.PeerPort).
func (e *Endpoint) fromPeer(src, peer netip.AddrPort) bool {
	if src.Addr().Unmap() != peer.Addr() {
		return false
	}
	return e.cfg.PeerPort != 0 || e.peerLinkAddr(src).Port() == peer.Port()
}
