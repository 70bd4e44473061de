package rocev2

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/softrnic/softrnic/roce"
)

// Faults are the fault-injection rates of a MemLink, each the probability
// (0..1) that a sent packet is dropped, delivered twice, held back and
// delivered after the next packet (reordered), or has one byte flipped.
type Faults struct {
	Drop, Duplicate, Reorder, Corrupt float64
	Seed                              uint64 // PRNG seed (0 picks 1)
	// Filter, if set, sees every packet before the faults; returning false
	// drops it. Tests use it to lose one specific packet.
	Filter func(pkt []byte) bool
}

// MemNet is an in-memory network of MemLinks addressed by netip.AddrPort.
// Delivery is asynchronous through a bounded queue per link; a full queue
// drops, like a NIC ring.
type MemNet struct {
	mu    sync.Mutex
	links map[netip.AddrPort]*MemLink
}

// NewMemNet returns an empty in-memory network.
func NewMemNet() *MemNet { return &MemNet{links: make(map[netip.AddrPort]*MemLink)} }

type memPkt struct {
	buf  [MaxPacket]byte
	n    int
	from netip.AddrPort
}

// MemLink is a Link on a MemNet.
type MemLink struct {
	net    *MemNet
	addr   netip.AddrPort
	in     chan *memPkt
	free   chan *memPkt
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex // faults state (sender side)
	f    Faults
	rng  *rand.Rand
	held *memPkt
	hdst *MemLink

	st MemStats
}

// MemStats counts what a MemLink did to the packets it sent.
type MemStats struct {
	Sent, Dropped, Duplicated, Reordered, Corrupted, Overflow uint64
}

// Stats returns the link's counters.
func (l *MemLink) Stats() MemStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

const memQueue = 2048

// ErrAddrInUse is returned by MemNet.NewLink for a taken address.
var ErrAddrInUse = errors.New("rocev2: address in use")

// NewLink attaches a link with address addr and the given send-side faults. Like
// ListenUDP it refuses UDP ports 0xC000-0xFFFF (ErrEntropyPort).
func (n *MemNet) NewLink(addr netip.AddrPort, f Faults) (*MemLink, error) {
	if addr.Port() >= roce.EntropyPortMin {
		return nil, ErrEntropyPort
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.links[addr]; ok {
		return nil, ErrAddrInUse
	}
	seed := f.Seed
	if seed == 0 {
		seed = 1
	}
	l := &MemLink{net: n, addr: addr, in: make(chan *memPkt, memQueue), free: make(chan *memPkt, memQueue+64),
		closed: make(chan struct{}), f: f, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range memQueue + 64 {
		l.free <- new(memPkt)
	}
	n.links[addr] = l
	return l, nil
}

// SetFaults replaces the link's fault configuration.
func (l *MemLink) SetFaults(f Faults) {
	l.mu.Lock()
	l.f = f
	l.mu.Unlock()
}

// LocalAddr implements Link.
func (l *MemLink) LocalAddr() netip.AddrPort { return l.addr }

// BatchSize implements Link.
func (l *MemLink) BatchSize() int { return 64 }

// Close implements Link: the address is released and Recv returns ErrLinkClosed.
func (l *MemLink) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.net.mu.Lock()
		delete(l.net.links, l.addr)
		l.net.mu.Unlock()
	})
	return nil
}

// Send implements Link: each packet is copied, subjected to the faults, and
// queued at dst (dropped when dst is unknown or its queue is full).
func (l *MemLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	select {
	case <-l.closed:
		return ErrLinkClosed
	default:
	}
	l.net.mu.Lock()
	d := l.net.links[dst]
	l.net.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range bufs {
		l.st.Sent++
		if d == nil || len(b) > MaxPacket {
			l.st.Dropped++
			continue
		}
		if l.f.Filter != nil && !l.f.Filter(b) {
			l.st.Dropped++
			continue
		}
		if l.f.Drop > 0 && l.rng.Float64() < l.f.Drop {
			l.st.Dropped++
			continue
		}
		copies := 1
		if l.f.Duplicate > 0 && l.rng.Float64() < l.f.Duplicate {
			copies = 2
			l.st.Duplicated++
		}
		for range copies {
			p := d.get()
			if p == nil {
				l.st.Overflow++
				continue
			}
			p.n = copy(p.buf[:], b)
			p.from = l.addr
			if l.f.Corrupt > 0 && l.rng.Float64() < l.f.Corrupt && p.n > 0 {
				p.buf[l.rng.IntN(p.n)] ^= byte(1 + l.rng.IntN(255))
				l.st.Corrupted++
			}
			if l.f.Reorder > 0 && l.held == nil && l.rng.Float64() < l.f.Reorder {
				l.held, l.hdst = p, d
				l.st.Reordered++
				continue
			}
			l.deliver(d, p)
			if l.held != nil {
				l.deliver(l.hdst, l.held)
				l.held, l.hdst = nil, nil
			}
		}
	}
	return nil
}

func (d *MemLink) get() *memPkt {
	select {
	case p := <-d.free:
		return p
	default:
		return nil
	}
}

func (l *MemLink) deliver(d *MemLink, p *memPkt) {
	select {
	case <-d.closed:
		d.free <- p
	case d.in <- p:
	default:
		l.st.Overflow++
		d.free <- p
	}
}

// Recv implements Link.
func (l *MemLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	var p *memPkt
	select {
	case p = <-l.in:
	case <-l.closed:
		return 0, ErrLinkClosed
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n][:cap(bufs[n])], p.buf[:p.n])
		from[n] = p.from
		l.free <- p
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case p = <-l.in:
		default:
			return n, nil
		}
	}
}
