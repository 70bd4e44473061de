//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/internal/inetsum"
	"github.com/softrnic/softrnic/internal/memcopy"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

const (
	ethLen    = 14
	etherIPv4 = 0x0800
	etherIPv6 = 0x86DD
)

// ErrAddrFamily is returned by Send for a destination of the other IP
// version than the link's address.
var ErrAddrFamily = errors.New("rocev2/xdp: destination address family differs from the link's")

// Link is a rocev2.Link over an AF_XDP port (see the package comment).
type Link struct {
	port   *afxdp.Port
	own    bool // the link opened the port and closes it
	local  netip.AddrPort
	lip    [4]byte
	lip6   [16]byte
	v6     bool
	mac    [6]byte
	batch  int
	tos    uint8
	ttl    uint8
	strict bool
	// maxFrame is the longest frame sent: the netdev's MTU (read when the
	// port opened) plus the Ethernet header, at most a UMEM frame.
	maxFrame int

	closed atomic.Bool
	done   chan struct{} // closed by Close: wakes Recv

	// frames the port handed over, waiting for Recv (a ring of fixed size)
	qmu   sync.Mutex
	q     []rxEntry
	qhead int
	qn    int
	wake  chan struct{} // one token: frames arrived

	rmu  sync.Mutex // Recv
	take []rxEntry

	// copies holds the link's own buffers for packets that arrived in several
	// UMEM buffers (the port hands those over as a copy it keeps only during
	// Frame): at most maxCopies, made as needed
	cmu    sync.Mutex
	copies [][]byte
	ncopy  int

	dmu    sync.Mutex // deferred frames are built in dframe
	dframe []byte

	rxPackets, txPackets, rxDropped, rxFull, icrcErrors, icrcRestamped, icrcZeroID, txDropped atomic.Uint64
}

var _ rocev2.Link = (*Link)(nil)

// New opens an AF_XDP link (see the package comment for privileges and the
// network namespace).
func New(o Options) (l *Link, err error) {
	if !o.Addr.Addr().IsValid() || o.Addr.Addr().IsUnspecified() {
		return nil, rocev2.ErrUnspecifiedAddr
	}
	if o.Addr.Port() == 0 {
		o.Addr = netip.AddrPortFrom(o.Addr.Addr(), roce.UDPPort)
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.TTL == 0 {
		o.TTL = 64
	}
	p, own := o.Port, false
	if p == nil {
		p, err = afxdp.Open(afxdp.Options{Interface: o.Interface, Addr: o.Addr.Addr(), Queue: o.Queue, AllQueues: o.AllQueues,
			Frames: o.Frames, Mode: o.Mode, ZeroCopy: o.ZeroCopy, Tap: o.Tap})
		if err != nil {
			return nil, err
		}
		own = true
	} else if p.Addr() != o.Addr.Addr().Unmap() {
		return nil, errors.New("rocev2/xdp: Options.Addr is not the port's address")
	}
	l = &Link{
		port: p, own: own,
		local: netip.AddrPortFrom(o.Addr.Addr().Unmap(), o.Addr.Port()),
		batch: o.Batch, tos: o.TOS, ttl: o.TTL, strict: o.StrictICRC,
		maxFrame: p.MaxFrame(), mac: p.MAC(),
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		q:      make([]rxEntry, p.KeepLimit()*len(p.Queues())),
		take:   make([]rxEntry, 0, o.Batch),
		dframe: make([]byte, afxdp.FrameSize),
	}
	l.v6 = l.local.Addr().Is6()
	if l.v6 {
		l.lip6 = l.local.Addr().As16()
	} else {
		l.lip = l.local.Addr().As4()
	}
	if err := p.Steer(afxdp.ProtoUDP, l.local.Port(), l); err != nil {
		if own {
			p.Close()
		}
		return nil, err
	}
	return l, nil
}

// Port is the AF_XDP port the link runs on.
func (l *Link) Port() *afxdp.Port { return l.port }

// Mode reports the attach mode in use (ModeDriver or ModeGeneric).
func (l *Link) Mode() Mode { return l.port.Mode() }

// ZeroCopy reports whether the socket is bound in zero-copy mode.
func (l *Link) ZeroCopy() bool { return l.port.ZeroCopy() }

// LocalAddr implements rocev2.Link.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// BatchSize implements rocev2.Link.
func (l *Link) BatchSize() int { return l.batch }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	ps := l.port.Stats()
	return Stats{
		RxPackets: l.rxPackets.Load(), TxPackets: l.txPackets.Load(), RxDropped: l.rxDropped.Load(),
		ICRCErrors: l.icrcErrors.Load(), ICRCRestamped: l.icrcRestamped.Load(), ICRCZeroID: l.icrcZeroID.Load(),
		TxDropped: l.txDropped.Load(), RxQueueFull: l.rxFull.Load(),
		KernelRxDropped: ps.KernelRxDropped, KernelRxRingFull: ps.KernelRxRingFull, KernelFillRingEmpty: ps.KernelFillRingEmpty,
	}
}

// Close stops steering the link's port, unblocks Recv, gives back the
// frames it held and closes the port if the link opened it. It implements
// rocev2.Link.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.port.Unsteer(afxdp.ProtoUDP, l.local.Port())
	close(l.done)
	l.rmu.Lock() // Recv has returned
	l.qmu.Lock()
	for ; l.qn > 0; l.qn-- {
		l.release(l.q[l.qhead])
		l.qhead = (l.qhead + 1) % len(l.q)
	}
	l.qmu.Unlock()
	l.rmu.Unlock()
	if l.own {
		return l.port.Close()
	}
	return nil
}

// rxEntry is a frame waiting for Recv: the port's (returned with
// Port.Release) or a copy in one of the link's buffers.
type rxEntry struct {
	f    afxdp.RxFrame
	copy []byte // the link's buffer holding f.Data, or nil
}

// maxCopies bounds the link's buffers for multi-buffer packets (each of the
// port's MaxRxFrame bytes): two RC windows of 128 packets (rxe's
// RXE_MAX_UNACKED_PSNS), 2.3 MiB on a 9000-byte MTU.
const maxCopies = 256

// release gives back what e holds.
func (l *Link) release(e rxEntry) {
	if e.copy == nil {
		l.port.Release(e.f)
		return
	}
	l.cmu.Lock()
	l.copies = append(l.copies, e.copy)
	l.cmu.Unlock()
}

// copyBuf returns a free buffer of the link's, or nil when all are in use.
func (l *Link) copyBuf() []byte {
	l.cmu.Lock()
	defer l.cmu.Unlock()
	if n := len(l.copies); n > 0 {
		b := l.copies[n-1]
		l.copies = l.copies[:n-1]
		return b
	}
	if l.ncopy == maxCopies {
		return nil
	}
	l.ncopy++
	return make([]byte, l.port.MaxRxFrame())
}

// Frame implements afxdp.Receiver: it keeps the frame for Recv (a packet that
// arrived in several UMEM buffers, path MTU 4096 on a jumbo-frame netdev, as a
// copy in a buffer of its own), or drops it when the link holds its share
// already.
func (l *Link) Frame(f afxdp.RxFrame) bool {
	e := rxEntry{f: f}
	if !f.Keepable() {
		if e.copy = l.copyBuf(); e.copy == nil || len(f.Data) > len(e.copy) {
			if e.copy != nil {
				l.release(e)
			}
			l.rxFull.Add(1)
			return false
		}
		e.f.Data = e.copy[:copy(e.copy, f.Data)]
	}
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.qn == len(l.q) || l.closed.Load() {
		if e.copy != nil {
			l.release(e)
		}
		l.rxFull.Add(1)
		return false
	}
	l.q[(l.qhead+l.qn)%len(l.q)] = e
	l.qn++
	return e.copy == nil
}

// EndBatch implements afxdp.Receiver: it wakes Recv.
func (l *Link) EndBatch() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Recv implements rocev2.Link: it waits for frames from the port, copies
// up to len(bufs) packets' UDP payloads out of the UMEM and gives the
// frames back.
func (l *Link) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	l.rmu.Lock()
	defer l.rmu.Unlock()
	for {
		if l.closed.Load() {
			return 0, rocev2.ErrLinkClosed
		}
		take := l.take[:0]
		l.qmu.Lock()
		for l.qn > 0 && len(take) < min(len(bufs), cap(take)) {
			take = append(take, l.q[l.qhead])
			l.qhead = (l.qhead + 1) % len(l.q)
			l.qn--
		}
		l.qmu.Unlock()
		n := 0
		for _, e := range take {
			if l.input(e.f.Data, bufs[n], &sizes[n], &from[n]) {
				n++
			} else {
				l.rxDropped.Add(1)
			}
			l.release(e)
		}
		if n > 0 {
			l.rxPackets.Add(uint64(n))
			return n, nil
		}
		if len(take) > 0 {
			continue
		}
		select {
		case <-l.wake:
		case <-l.done:
		}
	}
}

// input checks an Ethernet frame and copies its UDP payload into buf.
func (l *Link) input(f []byte, buf []byte, size *int, from *netip.AddrPort) bool {
	if len(f) < ethLen+20+8 {
		return false
	}
	if et := binary.BigEndian.Uint16(f[12:]); l.v6 {
		return et == etherIPv6 && l.input6(f[ethLen:], buf, size, from)
	} else if et != etherIPv4 {
		return false
	}
	ip, udp, pl, err := roce.SplitIPPacket(f[ethLen:])
	if err != nil || ip[0]>>4 != 4 || [4]byte(ip[16:20]) != l.lip ||
		binary.BigEndian.Uint16(udp[2:]) != l.local.Port() || binary.BigEndian.Uint16(ip[6:])&0x3FFF != 0 ||
		len(pl) > cap(buf) {
		return false
	}
	buf = buf[:len(pl)]
	memcopy.Copy(buf, pl)
	src := [4]byte(ip[12:16])
	sport := binary.BigEndian.Uint16(udp[0:])
	*size = len(pl)
	*from = netip.AddrPortFrom(netip.AddrFrom4(src), sport)
	// The transport verifies the ICRC assuming IHL 5, DF, ID 0; check any
	// other header here against the real bytes (IBTA A17.3.3).
	if len(pl) < roce.BTHLen+roce.ICRCLen || (ip[0] == 0x45 && binary.BigEndian.Uint16(ip[4:]) == 0 && ip[6] == 0x40 && ip[7] == 0) {
		return true
	}
	ib := pl[:len(pl)-roce.ICRCLen]
	got := binary.LittleEndian.Uint32(pl[len(ib):])
	canon := roce.ICRCv4(src, l.lip, 0, true, sport, l.local.Port(), ib)
	if crc, err := roce.ICRC(ip, udp, ib); err == nil && crc == got {
		binary.LittleEndian.PutUint32(buf[len(ib):], canon)
		l.icrcRestamped.Add(1)
		return true
	}
	if got == canon && !l.strict {
		// computed for ID 0 but sent with another: a UDP GSO sender
		l.icrcZeroID.Add(1)
		return true
	}
	l.icrcErrors.Add(1)
	return false
}

// input6 checks an IPv6 packet and copies its UDP payload into buf. The
// transport verifies IPv6 ICRCs exactly: the fields it cannot know (traffic
// class, flow label, hop limit) are masked.
func (l *Link) input6(p []byte, buf []byte, size *int, from *netip.AddrPort) bool {
	ip, udp, pl, err := roce.SplitIPPacket(p)
	if err != nil || ip[0]>>4 != 6 || [16]byte(ip[24:40]) != l.lip6 ||
		binary.BigEndian.Uint16(udp[2:]) != l.local.Port() || len(pl) > cap(buf) {
		return false
	}
	*size = memcopy.Copy(buf[:len(pl)], pl)
	*from = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), binary.BigEndian.Uint16(udp[0:]))
	return true
}

// Send implements rocev2.Link: each buffer becomes one Ethernet/IP/UDP
// frame in a TX frame of the UMEM; the batch is kicked with one sendto.
// It never waits for neighbour resolution (see the package comment).
func (l *Link) Send(bufs [][]byte, dst netip.AddrPort) error {
	if l.closed.Load() {
		return rocev2.ErrLinkClosed
	}
	da := dst.Addr().Unmap()
	if da.Is6() != l.v6 {
		l.txDropped.Add(uint64(len(bufs)))
		return ErrAddrFamily
	}
	mac, st := l.port.Neighbour(da)
	switch st {
	case afxdp.NeighFailed:
		l.txDropped.Add(uint64(len(bufs)))
		return ErrNoNeighbour
	case afxdp.NeighPending:
		l.dmu.Lock()
		defer l.dmu.Unlock()
		for _, b := range bufs {
			if n := l.build(l.dframe, mac, b, dst); n > 0 && l.port.Defer(da, l.dframe[:n]) {
				l.txPackets.Add(1)
			} else if n == 0 {
				l.txDropped.Add(1)
			}
		}
		return nil
	}
	t := l.port.Tx()
	defer t.Done()
	hl := 28
	if l.v6 {
		hl = 48
	}
	for i, b := range bufs {
		f := t.NextLen(ethLen + hl + len(b))
		if f == nil {
			l.txDropped.Add(uint64(len(bufs) - i))
			break // like a full socket buffer: the transport retransmits
		}
		n := l.build(f, mac, b, dst)
		if n == 0 {
			l.txDropped.Add(1)
			continue
		}
		t.Queue(n)
		l.txPackets.Add(1)
	}
	return nil
}

// build writes the Ethernet/IP/UDP frame carrying b to dst into f and
// returns its length, or 0 when it does not fit the MTU or b is shorter
// than an ICRC.
func (l *Link) build(f []byte, mac [6]byte, b []byte, dst netip.AddrPort) int {
	hl := 28
	if l.v6 {
		hl = 48
	}
	if ethLen+hl+len(b) > l.maxFrame || ethLen+hl+len(b) > len(f) || len(b) < roce.ICRCLen {
		return 0
	}
	copy(f[0:6], mac[:])
	copy(f[6:12], l.mac[:])
	if l.v6 {
		binary.BigEndian.PutUint16(f[12:], etherIPv6)
		h := roce.AppendIPv6UDP(f[ethLen:ethLen], l.lip6, dst.Addr().As16(), l.tos, l.ttl, 0, l.local.Port(), dst.Port(), len(b)-roce.ICRCLen)
		n := ethLen + len(h) + copy(f[ethLen+len(h):], b)
		udp6Checksum(f[ethLen:n])
		return n
	}
	binary.BigEndian.PutUint16(f[12:], etherIPv4)
	h := roce.AppendIPv4UDP(f[ethLen:ethLen], l.lip, dst.Addr().Unmap().As4(), l.tos, l.ttl, 0, l.local.Port(), dst.Port(), len(b)-roce.ICRCLen)
	return ethLen + len(h) + copy(f[ethLen+len(h):], b)
}

// udp6Checksum fills in the UDP checksum of an IPv6 packet without
// extension headers (RFC 8200 §8.1: mandatory over IPv6; a kernel UDP
// socket drops datagrams with checksum 0). The ICRC masks the field.
func udp6Checksum(p []byte) {
	u := p[40:]
	u[6], u[7] = 0, 0
	s := uint64(len(u)) + 17
	s = inetsum.Add(s, p[8:40]) // source and destination addresses
	c := ^inetsum.Fold(inetsum.Add(s, u))
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(u[6:], c)
}
