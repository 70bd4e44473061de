//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	neighTTL     = 30 * time.Second // re-read a destination's route after this
	neighTimeout = 3 * time.Second  // resolution of an unknown peer: the kernel's 3 solicitations 1 s apart
	neighRetry   = time.Second      // after a failed resolution, refuse this long
	// Bounds on what waits for resolution: frames per destination (a
	// RoCEv2 RC window, 128 packets as rxe's RXE_MAX_UNACKED_PSNS, so the
	// first burst to a peer is not cut down to a retransmission after the
	// ACK timeout), frames in all (2 MiB of 4 KiB frames at most),
	// destinations being resolved.
	neighPerDst     = 128
	neighTotal      = 512
	neighMaxPending = 256
)

type dstState uint8

const (
	dstPending dstState = iota
	dstOK
	dstFailed
)

// dstEntry is what the port knows about one destination address.
type dstEntry struct {
	state      dstState
	refreshing bool // dstOK past exp: its route is being re-read
	mac        [6]byte
	hop        netip.Addr // next hop (the destination or its gateway); invalid until the route is read
	exp        time.Time  // dstOK: re-read the route; dstFailed: refuse until
	deadline   time.Time  // dstPending: give up then
	pending    [][]byte   // complete frames waiting for the MAC (bytes 0-5)
}

// neighbours resolves destinations to MAC addresses from the kernel's
// tables without blocking its callers (see the package comment).
type neighbours struct {
	h       *netlink.Handle // RTM_GETROUTE, the initial neighbour dump
	ifindex int
	family  int
	probe   *net.UDPConn // makes the kernel resolve unknown next hops
	events  *os.File     // netlink socket subscribed to RTMGRP_NEIGH
	send    func(frames [][]byte)

	mu                                sync.Mutex
	hops                              map[netip.Addr][6]byte // the kernel's usable entries on ifindex
	dsts                              map[netip.Addr]*dstEntry
	npending                          int // destinations in dstPending
	nframes                           int // frames waiting in all
	queued, dropped, failed, resolved uint64

	req  chan netip.Addr // destinations for the resolver
	done chan struct{}
	wg   sync.WaitGroup
}

// newNeighbours subscribes to the kernel's neighbour events, reads its
// table for ifindex and starts the resolver. send transmits frames whose
// MAC has been filled in; it is called from the resolver goroutine.
func newNeighbours(h *netlink.Handle, ifindex int, local netip.Addr, send func([][]byte)) (n *neighbours, err error) {
	network, family := "udp4", unix.AF_INET
	if local.Is6() {
		network, family = "udp6", unix.AF_INET6
	}
	n = &neighbours{h: h, ifindex: ifindex, family: family, send: send,
		hops: make(map[netip.Addr][6]byte), dsts: make(map[netip.Addr]*dstEntry),
		req: make(chan netip.Addr, neighMaxPending), done: make(chan struct{})}
	if n.probe, err = net.ListenUDP(network, &net.UDPAddr{IP: local.AsSlice()}); err != nil {
		return nil, fmt.Errorf("afxdp: probe socket: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		n.probe.Close()
		return nil, fmt.Errorf("afxdp: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_NEIGH}); err != nil {
		unix.Close(fd)
		n.probe.Close()
		return nil, fmt.Errorf("afxdp: netlink bind: %w", err)
	}
	n.events = os.NewFile(uintptr(fd), "netlink-neigh")
	// subscribed first, then dumped: no entry falls between the two
	if err := n.dump(); err != nil {
		n.events.Close()
		n.probe.Close()
		return nil, err
	}
	ev := make(chan neighEvent, 64)
	n.wg.Add(2)
	go n.readEvents(ev)
	go n.resolver(ev)
	return n, nil
}

// close stops the goroutines and drops what waits.
func (n *neighbours) close() {
	close(n.done)
	_ = n.events.Close() // wakes readEvents
	n.wg.Wait()
	_ = n.probe.Close()
	n.h.Close()
}

// usable reports whether a kernel neighbour state carries a valid MAC.
func usable(state int) bool {
	const ok = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	return state&ok != 0
}

// dump (re)reads the kernel's neighbour table for the link's netdev.
func (n *neighbours) dump() error {
	ns, err := n.h.NeighList(n.ifindex, n.family)
	if err != nil {
		return fmt.Errorf("afxdp: neighbour table: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.hops)
	for _, e := range ns {
		if a, ok := netip.AddrFromSlice(e.IP); ok && usable(e.State) && len(e.HardwareAddr) == 6 {
			n.hops[a.Unmap()] = [6]byte(e.HardwareAddr)
		}
	}
	return nil
}

// lookup returns the MAC for dst, or the state of its resolution; a miss
// starts one. It never blocks.
func (n *neighbours) lookup(dst netip.Addr) ([6]byte, NeighState) {
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.dsts[dst]
	switch {
	case e == nil:
	case e.state == dstOK:
		if now.After(e.exp) && !e.refreshing && n.request(dst) {
			e.refreshing = true
		}
		return e.mac, NeighOK
	case e.state == dstPending:
		return [6]byte{}, NeighPending
	case now.Before(e.exp):
		return [6]byte{}, NeighFailed
	}
	if n.npending >= neighMaxPending || !n.request(dst) {
		n.failed++
		return [6]byte{}, NeighFailed
	}
	if e == nil {
		e = &dstEntry{}
		n.dsts[dst] = e
	}
	*e = dstEntry{state: dstPending, deadline: now.Add(neighTimeout)}
	n.npending++
	return [6]byte{}, NeighPending
}

// request hands dst to the resolver (mu held); false when its queue is full.
func (n *neighbours) request(dst netip.Addr) bool {
	select {
	case n.req <- dst:
		return true
	default:
		return false
	}
}

// defer_ queues a copy of frame until dst is resolved; it reports false
// (and counts a drop) when dst is not being resolved or a bound is reached.
func (n *neighbours) defer_(dst netip.Addr, frame []byte) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.dsts[dst]
	if e == nil || e.state != dstPending || len(e.pending) >= neighPerDst || n.nframes >= neighTotal {
		n.dropped++
		return false
	}
	e.pending = append(e.pending, append([]byte(nil), frame...))
	n.nframes++
	n.queued++
	return true
}

// neighEvent is one kernel neighbour update, copied out of the netlink
// buffer: ip is invalid for "the table was re-read".
type neighEvent struct {
	ip  netip.Addr
	mac [6]byte
	ok  bool // a usable entry (else deleted or unusable)
}

// readEvents forwards the kernel's neighbour events for the netdev; on a
// lost event (ENOBUFS) it re-reads the table.
func (n *neighbours) readEvents(out chan<- neighEvent) {
	defer n.wg.Done()
	defer close(out)
	buf := make([]byte, 1<<16)
	for {
		k, err := n.events.Read(buf)
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				if n.dump() == nil {
					select {
					case out <- neighEvent{}: // "table reread": wake the resolver
					case <-n.done:
						return
					}
				}
				continue
			}
			return // closed
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:k])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != unix.RTM_NEWNEIGH && m.Header.Type != unix.RTM_DELNEIGH {
				continue
			}
			ne, err := netlink.NeighDeserialize(m.Data)
			if err != nil || ne.LinkIndex != n.ifindex {
				continue
			}
			a, ok := netip.AddrFromSlice(ne.IP)
			if !ok {
				continue
			}
			e := neighEvent{ip: a.Unmap(), ok: m.Header.Type == unix.RTM_NEWNEIGH && usable(ne.State) && len(ne.HardwareAddr) == 6}
			if e.ok {
				e.mac = [6]byte(ne.HardwareAddr)
			}
			select {
			case out <- e:
			case <-n.done:
				return
			}
		}
	}
}

// resolver owns resolution: it reads routes, probes, applies neighbour
// events and expires what waited too long.
func (n *neighbours) resolver(ev <-chan neighEvent) {
	defer n.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-n.done:
			return
		case dst := <-n.req:
			n.route(dst)
		case ne, ok := <-ev:
			if !ok {
				return
			}
			if ne.ip.IsValid() {
				n.mu.Lock()
				if ne.ok {
					n.hops[ne.ip] = ne.mac
				} else {
					delete(n.hops, ne.ip)
				}
				n.mu.Unlock()
			}
			n.settle()
		case <-timer.C:
		}
		// expire, and sleep until the next deadline
		next := n.expire()
		timer.Reset(next)
	}
}

// route reads dst's next hop from the kernel and probes it unless known.
func (n *neighbours) route(dst netip.Addr) {
	hop := dst
	if rs, err := n.h.RouteGet(dst.AsSlice()); err == nil && len(rs) > 0 && rs[0].Gw != nil {
		if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok {
			hop = gw.Unmap()
		}
	}
	n.mu.Lock()
	e := n.dsts[dst]
	if e != nil {
		e.hop = hop
	}
	_, known := n.hops[hop]
	n.mu.Unlock()
	if e != nil && !known {
		// Any datagram makes the kernel resolve the next hop; port 9
		// (discard) keeps it away from the peer's services.
		_, _ = n.probe.WriteToUDPAddrPort([]byte{0}, netip.AddrPortFrom(dst, 9))
	}
	n.settle()
}

// settle completes every destination whose next hop is now known, and
// transmits the frames that waited for it.
func (n *neighbours) settle() {
	now := time.Now()
	var out [][]byte
	n.mu.Lock()
	for _, e := range n.dsts {
		if !e.hop.IsValid() || (e.state != dstPending && !e.refreshing) {
			continue
		}
		mac, ok := n.hops[e.hop]
		if !ok {
			continue
		}
		if e.state == dstPending {
			n.npending--
			n.resolved++
		}
		e.state, e.refreshing, e.mac, e.exp = dstOK, false, mac, now.Add(neighTTL)
		for _, f := range e.pending {
			copy(f[0:6], mac[:])
		}
		out = append(out, e.pending...)
		n.nframes -= len(e.pending)
		e.pending = nil
	}
	n.mu.Unlock()
	if len(out) > 0 {
		n.send(out)
	}
}

// expire fails the resolutions past their deadline (dropping their
// frames), forgets stale entries, and returns how long to sleep.
func (n *neighbours) expire() time.Duration {
	now := time.Now()
	next := time.Hour
	n.mu.Lock()
	defer n.mu.Unlock()
	for dst, e := range n.dsts {
		switch {
		case e.state == dstPending && !now.Before(e.deadline):
			n.npending--
			n.failed++
			n.dropped += uint64(len(e.pending))
			n.nframes -= len(e.pending)
			*e = dstEntry{state: dstFailed, exp: now.Add(neighRetry)}
		case e.state == dstPending:
			next = min(next, e.deadline.Sub(now))
		case e.refreshing && now.Sub(e.exp) > neighTimeout:
			// the route was re-read but the next hop is gone from the
			// kernel's table: resolve afresh on the next lookup
			delete(n.dsts, dst)
		case e.refreshing:
			next = min(next, e.exp.Add(neighTimeout).Sub(now)+time.Millisecond)
		case e.state == dstOK && now.Sub(e.exp) > neighTTL:
			delete(n.dsts, dst) // unused for a whole TTL
		case e.state == dstOK:
			next = min(next, e.exp.Add(neighTTL).Sub(now)+time.Millisecond)
		case e.state == dstFailed && now.After(e.exp):
			delete(n.dsts, dst) // bounded: failed entries live a second
		case e.state == dstFailed:
			next = min(next, e.exp.Sub(now)+time.Millisecond)
		}
	}
	return next
}

// stats copies the counters.
func (n *neighbours) stats(s *Stats) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s.NeighQueued, s.NeighDropped, s.NeighFailed, s.NeighResolved = n.queued, n.dropped, n.failed, n.resolved
}
