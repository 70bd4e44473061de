package daemon

// The RoCEv2 device's port as rxe keeps it: the netdev that carries the device's address,
// its state, MTU and GID table (one RoCEv2 GID per address of the netdev: IPv4-mapped for
// IPv4, IBTA A17.2), kept in sync from the kernel's link and address notifications
// (rtnetlink). The port is ACTIVE while the netdev is up and still has the device's
// address, DOWN otherwise (processes keep their sockets; packets simply stop flowing).

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
)

// port tracks the device's netdev.
type port struct {
	h     *netlink.Handle // made in the daemon's network namespace when it started
	log   *slog.Logger
	addr  netip.Addr
	index int
	name  string

	mu    sync.Mutex
	state string
	mtu   int
	gids  []netip.Addr

	done chan struct{}
	wg   sync.WaitGroup
}

// Port states.
const (
	portActive = "ACTIVE"
	portDown   = "DOWN"
)

// errNoNetdev: no netdev carries the address.
var errNoNetdev = errors.New("no network device has the address")

// trackPort finds the netdev carrying addr (name, when given, must be it): the netdev
// with addr assigned, else the one whose prefix holds it (127.0.0.2 on lo), and follows it.
func trackPort(addr netip.Addr, name string, log *slog.Logger) (*port, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	p := &port{h: h, log: log, addr: addr, done: make(chan struct{})}
	links, err := h.LinkList()
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("netdevs: %w", err)
	}
	var prefixMatch netlink.Link
	for _, l := range links {
		if name != "" && l.Attrs().Name != name {
			continue
		}
		as, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, a := range as {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			if ip.Unmap() == addr {
				p.index, p.name = l.Attrs().Index, l.Attrs().Name
			} else if prefixMatch == nil && a.IPNet != nil && a.IPNet.Contains(net.IP(addr.AsSlice())) {
				prefixMatch = l
			}
		}
	}
	if p.index == 0 && prefixMatch != nil {
		p.index, p.name = prefixMatch.Attrs().Index, prefixMatch.Attrs().Name
	}
	if p.index == 0 {
		h.Close()
		if name != "" {
			return nil, fmt.Errorf("-netdev %s does not carry %v: %w", name, addr, errNoNetdev)
		}
		return nil, fmt.Errorf("%v: %w", addr, errNoNetdev)
	}
	lu := make(chan netlink.LinkUpdate, 16)
	au := make(chan netlink.AddrUpdate, 16)
	if err := netlink.LinkSubscribeWithOptions(lu, p.done, netlink.LinkSubscribeOptions{}); err != nil {
		h.Close()
		return nil, fmt.Errorf("link notifications: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(au, p.done, netlink.AddrSubscribeOptions{}); err != nil {
		close(p.done)
		h.Close()
		return nil, fmt.Errorf("address notifications: %w", err)
	}
	p.refresh()
	p.wg.Add(1)
	go p.follow(lu, au)
	return p, nil
}

// follow refreshes the port on every notification about its netdev.
func (p *port) follow(lu <-chan netlink.LinkUpdate, au <-chan netlink.AddrUpdate) {
	defer p.wg.Done()
	for {
		select {
		case u, ok := <-lu:
			if !ok {
				return
			}
			if int(u.Index) == p.index {
				p.refresh()
			}
		case u, ok := <-au:
			if !ok {
				return
			}
			if u.LinkIndex == p.index {
				p.refresh()
			}
		case <-p.done:
			return
		}
	}
}

// refresh reads the netdev's state, MTU and addresses.
func (p *port) refresh() {
	state, mtu := portDown, 0
	var gids []netip.Addr
	if l, err := p.h.LinkByIndex(p.index); err == nil {
		a := l.Attrs()
		mtu = a.MTU
		up := a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown)
		as, _ := p.h.AddrList(l, netlink.FAMILY_ALL) // an error leaves no GIDs: DOWN
		for _, x := range as {
			if ip, ok := netip.AddrFromSlice(x.IP); ok {
				gids = append(gids, ip.Unmap())
			}
		}
		has := slices.Contains(gids, p.addr)
		if !has { // an address inside a prefix of the netdev (127.0.0.2 on lo)
			for _, x := range as {
				if x.IPNet != nil && x.IPNet.Contains(net.IP(p.addr.AsSlice())) {
					has = true
				}
			}
			if has {
				gids = append(gids, p.addr)
			}
		}
		if up && has {
			state = portActive
		}
	}
	slices.SortFunc(gids, func(a, b netip.Addr) int { return a.Compare(b) })
	p.mu.Lock()
	changed := state != p.state
	p.state, p.mtu, p.gids = state, mtu, gids
	p.mu.Unlock()
	if changed {
		p.log.Info("port state", "netdev", p.name, "state", state, "addr", p.addr)
	}
}

// status is the port as the control protocol reports it: state, MTU and the GIDs as
// RoCEv2 writes them (IPv4-mapped IPv6 for IPv4).
func (p *port) status() (name, state string, mtu int, gids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gids {
		gids = append(gids, gid(g))
	}
	return p.name, p.state, p.mtu, gids
}

// gid writes an address as its RoCEv2 GID.
func gid(a netip.Addr) string {
	if a.Is4() {
		return netip.AddrFrom16(a.As16()).String() // ::ffff:a.b.c.d
	}
	return a.String()
}

func (p *port) close() {
	close(p.done)
	p.wg.Wait()
	p.h.Close()
}
