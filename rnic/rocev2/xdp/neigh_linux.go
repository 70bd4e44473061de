//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoNeighbour is returned by Send when the peer's MAC address could not
// be resolved.
var ErrNoNeighbour = errors.New("rocev2/xdp: neighbour not resolved")

const (
	neighTTL     = 30 * time.Second // re-read the kernel's entry after this
	neighTimeout = 3 * time.Second  // resolution of an unknown peer: the kernel's 3 solicitations 1 s apart
	neighRetry   = time.Second      // after a failed resolution, drop this long
)

type neighEntry struct {
	mac    [6]byte
	exp    int64 // unix nanoseconds
	failed bool  // resolution failed: drop until exp
}

// neighbours caches MAC addresses read from the kernel neighbour table
// through a netlink handle opened in the link's network namespace.
type neighbours struct {
	mu      sync.RWMutex
	m       map[netip.Addr]neighEntry
	rmu     sync.Mutex // one resolution at a time
	h       *netlink.Handle
	ifindex int
	family  int
	probe   *net.UDPConn // triggers ARP for unknown peers
}

func newNeighbours(h *netlink.Handle, ifindex int, local netip.Addr) (*neighbours, error) {
	network, family := "udp4", unix.AF_INET
	if local.Is6() {
		network, family = "udp6", unix.AF_INET6
	}
	c, err := net.ListenUDP(network, &net.UDPAddr{IP: local.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("rocev2/xdp: probe socket: %w", err)
	}
	return &neighbours{m: make(map[netip.Addr]neighEntry), h: h, ifindex: ifindex, family: family, probe: c}, nil
}

func (n *neighbours) close() {
	_ = n.probe.Close()
	n.h.Close()
}

// lookup returns the MAC for dst: cached, else the next hop's entry in the
// kernel table, else after probing (up to neighTimeout). A failure is
// remembered for neighRetry so that retransmissions are dropped at once.
func (n *neighbours) lookup(dst netip.Addr) ([6]byte, error) {
	now := time.Now().UnixNano()
	n.mu.RLock()
	e, ok := n.m[dst]
	n.mu.RUnlock()
	if ok && now < e.exp {
		if e.failed {
			return [6]byte{}, ErrNoNeighbour
		}
		return e.mac, nil
	}
	return n.resolve(dst)
}

func (n *neighbours) resolve(dst netip.Addr) ([6]byte, error) {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	hop := dst
	if rs, err := n.h.RouteGet(dst.AsSlice()); err == nil && len(rs) > 0 && rs[0].Gw != nil {
		if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok {
			hop = gw.Unmap()
		}
	}
	deadline := time.Now().Add(neighTimeout)
	for probed := false; ; {
		if mac, ok := n.fromKernel(hop); ok {
			n.mu.Lock()
			n.m[dst] = neighEntry{mac: mac, exp: time.Now().Add(neighTTL).UnixNano()}
			n.mu.Unlock()
			return mac, nil
		}
		if time.Now().After(deadline) {
			n.mu.Lock()
			n.m[dst] = neighEntry{failed: true, exp: time.Now().Add(neighRetry).UnixNano()}
			n.mu.Unlock()
			return [6]byte{}, fmt.Errorf("%w: %v", ErrNoNeighbour, dst)
		}
		if !probed {
			// Any datagram makes the kernel resolve the next hop; port 9
			// (discard) keeps it away from the peer's RoCE port.
			_, _ = n.probe.WriteToUDPAddrPort([]byte{0}, netip.AddrPortFrom(dst, 9))
			probed = true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (n *neighbours) fromKernel(hop netip.Addr) ([6]byte, bool) {
	ns, err := n.h.NeighList(n.ifindex, n.family)
	if err != nil {
		return [6]byte{}, false
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, e := range ns {
		a, ok := netip.AddrFromSlice(e.IP)
		if ok && a.Unmap() == hop && e.State&usable != 0 && len(e.HardwareAddr) == 6 {
			return [6]byte(e.HardwareAddr), true
		}
	}
	return [6]byte{}, false
}
