package rocev2

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"

	"github.com/softrnic/softrnic/roce"
)

// ErrEntropyPort is returned by ListenUDP (and MemNet.NewLink) for a UDP port in
// 0xC000-0xFFFF: peers take a packet from such a source port for ECMP entropy from
// a device listening on 4791 (Annex A17.3, see Addr), so an endpoint there could
// not be answered.
var ErrEntropyPort = errors.New("rocev2: UDP ports 0xC000-0xFFFF are RoCEv2 source-port entropy; listen on 4791 or a port below 49152")

// listenUDP binds a UDP socket for a link on addr. Port 0 picks a free port below
// 0xC000: the kernel's ephemeral choice when it is one (it usually is half the time
// with Linux's default 32768-60999 range), else a random free one in 1024-0xBFFF.
func listenUDP(network string, addr netip.AddrPort) (*net.UDPConn, error) {
	if addr.Port() >= roce.EntropyPortMin {
		return nil, fmt.Errorf("rocev2: listen on %v: %w", addr, ErrEntropyPort)
	}
	if addr.Port() != 0 {
		c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return nil, fmt.Errorf("rocev2: listen on %v: %w", addr, err)
		}
		return c, nil
	}
	var held []*net.UDPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 16 {
		c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return nil, fmt.Errorf("rocev2: listen on %v: %w", addr, err)
		}
		if c.LocalAddr().(*net.UDPAddr).Port < roce.EntropyPortMin {
			return c, nil
		}
		held = append(held, c) // keep it bound so the kernel offers another
	}
	for range 64 {
		p := uint16(1024 + rand.IntN(roce.EntropyPortMin-1024))
		if p == roce.UDPPort {
			continue
		}
		c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr.Addr(), p)))
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("rocev2: listen on %v: %w", addr, err)
		}
	}
	return nil, fmt.Errorf("rocev2: listen on %v: no free UDP port below 0xC000: %w", addr, syscall.EADDRINUSE)
}
