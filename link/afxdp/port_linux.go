//go:build linux

package afxdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/inetsum"
)

const (
	ethLen    = 14
	etherIPv4 = 0x0800
	etherIPv6 = 0x86DD
)

// Port is the AF_XDP datapath on one netdev (see the package comment).
type Port struct {
	socks    []*xsk // one per bound queue; socks[0] (Options.Queue) transmits
	local    netip.Addr
	mac      [6]byte
	ifindex  int
	mtu      int
	mode     Mode
	zc       bool
	maxFrame int // longest frame sent: MTU + Ethernet header, at most a UMEM frame without multi-buffer
	txCap    int // bytes of a frame sent in one UMEM frame
	maxRx    int // longest frame received: MTU + Ethernet header (multi-buffer), else one UMEM frame less headroom
	sg       bool
	txOff    uint64 // where a frame sent starts in its UMEM frame: after the TX metadata area, if any
	txcsum   bool   // transmit checksums through TX metadata
	keep     int64
	dropRx   func([]byte) bool
	dropTx   func([]byte) bool
	tap      Tap

	xsks  *ebpf.Map
	ports *ebpf.Map
	prog  *ebpf.Program
	xlink link.Link
	neigh *neighbours
	ns    netns.NsHandle // the netdev's network namespace (Open's)

	steerMu sync.Mutex                          // Steer/Unsteer
	recv    atomic.Pointer[map[uint32]Receiver] // copy on write
	closed  atomic.Bool
	rxWG    sync.WaitGroup

	smu sync.Mutex // the TX and completion rings of socks[0]
	tx  Tx

	rxPackets, txPackets, rxDropped, rxInjected, txInjected, txDropped atomic.Uint64
	rxMulti, rxTooLong, txMulti                                        atomic.Uint64
}

// Open attaches the port to o.Interface (see the package comment for
// privileges and the network namespace).
func Open(o Options) (p *Port, err error) {
	if !o.Addr.IsValid() || o.Addr.IsUnspecified() {
		return nil, fmt.Errorf("afxdp: local address %v: must be a unicast address of the netdev", o.Addr)
	}
	if o.Frames <= 0 {
		o.Frames = 2048
	}
	half := 1
	for half*2 <= o.Frames/2 {
		half *= 2
	}
	half = max(half, 64)
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("afxdp: netlink: %w", err)
	}
	dev, err := nl.LinkByName(o.Interface)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("afxdp: netdev %q: %w", o.Interface, err)
	}
	attrs := dev.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		nl.Close()
		return nil, fmt.Errorf("%w: %s is not an Ethernet device", ErrNotSupported, o.Interface)
	}
	p = &Port{local: o.Addr.Unmap(), ifindex: attrs.Index, mtu: attrs.MTU, maxFrame: FrameSize,
		keep: int64(half - half/8), dropRx: o.DropRx, dropTx: o.DropTx, tap: o.Tap}
	p.tx.p = p
	p.ns = netns.None()
	if attrs.MTU > 0 {
		p.maxFrame = min(FrameSize, ethLen+attrs.MTU)
	}
	copy(p.mac[:], attrs.HardwareAddr)
	p.recv.Store(&map[uint32]Receiver{})
	defer func() {
		if err != nil {
			p.release()
			p = nil
		}
	}()
	if p.ns, err = netns.Get(); err != nil {
		nl.Close()
		return p, fmt.Errorf("afxdp: network namespace: %w", err)
	}
	if p.neigh, err = newNeighbours(nl, attrs.Index, p.local, p.sendResolved); err != nil {
		nl.Close()
		return p, err
	}
	queues := []int{o.Queue}
	if o.AllQueues { // o.Queue first: it transmits
		for q := range attrs.NumRxQueues {
			if q != o.Queue {
				queues = append(queues, q)
			}
		}
	}
	p.sg = !o.SingleBuffer
	txMeta := !o.NoTxChecksum
	for _, q := range queues {
		s, err := openXSK(attrs.Index, q, half, o.ZeroCopy, p.sg, txMeta)
		if s != nil {
			p.socks = append(p.socks, s)
		}
		if err != nil {
			return p, fmt.Errorf("afxdp: AF_XDP socket on %s queue %d: %w", o.Interface, q, err)
		}
		p.zc = s.zc
		p.sg = p.sg && s.sg
		txMeta = txMeta && s.txMeta
	}
	p.txCap = FrameSize
	if txMeta {
		p.txOff = txMetaLen
		p.txCap = FrameSize - txMetaLen
		p.maxFrame = min(p.maxFrame, p.txCap)
		// Copy mode: the kernel honours the checksum request for every netdev
		// (the netdev's own offload, else in software). Zero-copy: only a
		// driver with the tx-checksum xsk feature does.
		p.txcsum = !p.zc || o.DriverTxChecksum
	}
	if p.sg && attrs.MTU > 0 && ethLen+attrs.MTU > p.txCap {
		// multi-buffer transmission: a frame longer than a UMEM frame is
		// built in tx.stage and sent in several (XDP_PKT_CONTD)
		p.maxFrame = min(maxChain, ethLen+attrs.MTU)
		p.tx.stage = make([]byte, p.maxFrame)
	}
	p.maxRx = FrameSize - copyHeadroom
	if p.zc {
		p.maxRx = FrameSize
	}
	if p.sg {
		p.maxRx = maxChain
		if attrs.MTU > 0 {
			p.maxRx = min(maxChain, ethLen+attrs.MTU)
		}
	}
	if err = p.attach(o.Mode); err != nil {
		return p, fmt.Errorf("afxdp: XDP program on %s: %w", o.Interface, err)
	}
	for i := range p.socks {
		p.rxWG.Add(1)
		go p.rxLoop(i)
	}
	return p, nil
}

// attach creates the XSK and steering maps, loads the program and attaches
// it in the requested mode.
func (p *Port) attach(mode Mode) error {
	var err error
	n := 64
	for _, s := range p.socks {
		n = max(n, s.queue+1)
	}
	p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(n)})
	if err != nil {
		return fmt.Errorf("XSK map: %w", err)
	}
	for _, s := range p.socks {
		if err = p.xsks.Put(uint32(s.queue), uint32(s.fd)); err != nil {
			return fmt.Errorf("XSK map update: %w", err)
		}
	}
	p.ports, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_ports", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: MaxSteer})
	if err != nil {
		return fmt.Errorf("steering map: %w", err)
	}
	spec := &ebpf.ProgramSpec{
		Name: "softrnic_steer", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: redirectProgram(p.xsks, p.ports, p.local),
	}
	if p.sg {
		// multi-buffer aware (xdp.frags): it reads only the headers, which are in
		// the first buffer, and lets the driver and generic XDP pass it packets
		// of several buffers, which the sockets receive with XDP_USE_SG
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	p.prog, err = ebpf.NewProgram(spec)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if mode == ModeAuto || mode == ModeDriver {
		p.xlink, err = link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: p.ifindex, Flags: link.XDPDriverMode})
		if err == nil {
			p.mode = ModeDriver
			return nil
		}
		if mode == ModeDriver {
			return err
		}
	}
	p.xlink, err = link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: p.ifindex, Flags: link.XDPGenericMode})
	p.mode = ModeGeneric
	return err
}

// Steer makes the program redirect packets to the port's address with IP
// protocol proto (ProtoTCP or ProtoUDP) and destination port to the
// socket, and the port hand them to r. A pair already steered is taken
// over by r.
func (p *Port) Steer(proto uint8, port uint16, r Receiver) error {
	p.steerMu.Lock()
	defer p.steerMu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	k := steerKey(proto, port)
	old := *p.recv.Load()
	if _, ok := old[k]; !ok && len(old) >= MaxSteer {
		return ErrSteerFull
	}
	m := make(map[uint32]Receiver, len(old)+1)
	for a, b := range old {
		m[a] = b
	}
	m[k] = r
	p.recv.Store(&m) // the receiver first, then the program's entry
	if err := p.ports.Put(k, uint32(1)); err != nil {
		delete(m, k)
		return fmt.Errorf("afxdp: steering map update: %w", err)
	}
	return nil
}

// Unsteer stops steering (proto, port): its packets go to the kernel again.
func (p *Port) Unsteer(proto uint8, port uint16) {
	p.steerMu.Lock()
	defer p.steerMu.Unlock()
	if p.closed.Load() {
		return
	}
	k := steerKey(proto, port)
	_ = p.ports.Delete(k)
	old := *p.recv.Load()
	m := make(map[uint32]Receiver, len(old))
	for a, b := range old {
		if a != k {
			m[a] = b
		}
	}
	p.recv.Store(&m)
}

// rxLoop reads socket i's RX ring and hands frames to receivers until
// Close.
func (p *Port) rxLoop(i int) {
	defer p.rxWG.Done()
	s := p.socks[i]
	ready := func(uintptr) bool { return s.rx.ready() > 0 || p.closed.Load() }
	var ended []Receiver // receivers given frames in this batch
	for {
		if err := s.rc.Read(ready); err != nil || p.closed.Load() {
			return
		}
		recv := *p.recv.Load()
		n := s.rx.ready()
		s.rxCount.Add(uint64(n))
		s.fmu.Lock()
		for range n {
			d := s.rx.desc(s.rx.local)
			addr, ln, more := d.Addr, uint64(d.Len), d.Options&unix.XDP_PKT_CONTD != 0
			s.rx.local++
			valid := addr+ln <= uint64(len(s.umem))
			switch {
			case s.chainLen == 0 && !s.chainBad && !more:
				// a packet in one buffer, handed over in place
				if valid && p.dispatch(s, i, s.umem[addr:addr+ln], addr, recv, &ended) {
					continue // kept
				}
			case !valid || s.chainBad || s.chainLen+int(ln) > len(s.chain):
				s.chainBad = true
			default:
				s.chainLen += copy(s.chain[s.chainLen:], s.umem[addr:addr+ln])
			}
			if !more && (s.chainLen > 0 || s.chainBad) {
				// the last buffer of a packet of several: hand over the copy
				if s.chainBad {
					p.rxTooLong.Add(1)
				} else {
					p.rxMulti.Add(1)
					p.dispatch(s, i, s.chain[:s.chainLen], noAddr, recv, &ended)
				}
				s.chainLen, s.chainBad = 0, false
			}
			*s.fill.addr(s.fill.local) = addr &^ (FrameSize - 1)
			s.fill.local++
		}
		s.rx.release()
		s.fill.publish()
		s.fmu.Unlock()
		p.rxPackets.Add(uint64(n))
		for _, r := range ended {
			r.EndBatch()
		}
		ended = ended[:0]
	}
}

// dispatch parses f far enough to find its steering pair and offers it to
// the receiver; it reports whether the receiver kept it.
func (p *Port) dispatch(s *xsk, i int, f []byte, addr uint64, recv map[uint32]Receiver, ended *[]Receiver) bool {
	if p.tap != nil {
		p.tap.Frame(f, false)
	}
	if p.dropRx != nil && p.dropRx(f) {
		p.rxInjected.Add(1)
		return false
	}
	proto, l4, ok := parseL3(f, p.local)
	if !ok || len(f) < l4+4 {
		p.rxDropped.Add(1)
		return false
	}
	r := recv[steerKey(proto, binary.BigEndian.Uint16(f[l4+2:]))]
	if r == nil {
		p.rxDropped.Add(1)
		return false
	}
	seen := false
	for _, e := range *ended {
		if e == r {
			seen = true
			break
		}
	}
	if !seen {
		*ended = append(*ended, r)
	}
	if addr == noAddr {
		// a multi-buffer packet copied out of the UMEM: valid during the call only
		r.Frame(RxFrame{Data: f, L3: ethLen, L4: l4, sock: i, addr: noAddr})
		return false
	}
	if s.kept.Load() >= p.keep {
		// the receiver holds its share of the frames: it cannot keep more
		p.rxDropped.Add(1)
		return false
	}
	if r.Frame(RxFrame{Data: f, L3: ethLen, L4: l4, sock: i, addr: addr}) {
		s.kept.Add(1)
		return true
	}
	return false
}

// noAddr marks an RxFrame that is not in the UMEM (a multi-buffer packet's
// copy): it cannot be kept.
const noAddr = ^uint64(0)

// parseL3 checks the Ethernet and IP headers of f (to local, of local's
// family, IPv4 unfragmented) and returns the IP protocol and the offset of
// the transport header.
func parseL3(f []byte, local netip.Addr) (proto uint8, l4 int, ok bool) {
	if len(f) < ethLen+20 {
		return 0, 0, false
	}
	ip := f[ethLen:]
	switch et := binary.BigEndian.Uint16(f[12:]); {
	case et == etherIPv4 && local.Is4():
		ihl := int(ip[0]&0x0F) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[0]>>4 != 4 || ihl < 20 || tot < ihl || tot > len(ip) || binary.BigEndian.Uint16(ip[6:])&0x3FFF != 0 ||
			[4]byte(ip[16:20]) != local.As4() {
			return 0, 0, false
		}
		return ip[9], ethLen + ihl, true
	case et == etherIPv6 && local.Is6():
		if len(ip) < 40 || ip[0]>>4 != 6 || 40+int(binary.BigEndian.Uint16(ip[4:])) > len(ip) || [16]byte(ip[24:40]) != local.As16() {
			return 0, 0, false
		}
		return ip[6], ethLen + 40, true
	}
	return 0, 0, false
}

// Release gives back a frame a receiver kept.
func (p *Port) Release(f RxFrame) {
	if f.addr == noAddr {
		return
	}
	s := p.socks[f.sock]
	s.fmu.Lock()
	if !p.closed.Load() {
		*s.fill.addr(s.fill.local) = f.addr &^ (FrameSize - 1)
		s.fill.local++
		s.fill.publish()
	}
	s.fmu.Unlock()
	s.kept.Add(-1)
}

// Neighbour returns the MAC address of dst's next hop without blocking; see
// NeighState for what to do when it is not known.
func (p *Port) Neighbour(dst netip.Addr) ([6]byte, NeighState) { return p.neigh.lookup(dst.Unmap()) }

// Defer queues a copy of a complete frame for dst (whose Neighbour answer
// was NeighPending); the port sends it once the next hop is resolved,
// writing its MAC into bytes 0-5. It reports false when the frame was
// dropped (bounded queues; counted in NeighDropped).
func (p *Port) Defer(dst netip.Addr, frame []byte) bool { return p.neigh.defer_(dst.Unmap(), frame) }

// sendResolved transmits frames that waited for their neighbour.
func (p *Port) sendResolved(frames [][]byte) {
	t := p.Tx()
	defer t.Done()
	for _, f := range frames {
		b := t.NextLen(len(f))
		if b == nil {
			break
		}
		t.Queue(copy(b, f))
	}
}

// Tx is a transmit batch: it holds the port's send lock from Port.Tx to
// Done. Next (or NextLen) returns a buffer to build a frame in, Queue or
// QueueChecksum queues it.
type Tx struct {
	p      *Port
	queued int
	stage  []byte // a frame longer than a UMEM frame is built here (multi-buffer)
	staged bool   // the buffer handed out is stage
}

// Tx starts a transmit batch. It blocks only on another batch (never on
// neighbour resolution).
func (p *Port) Tx() *Tx {
	p.smu.Lock()
	return &p.tx
}

// Next returns a free UMEM frame to build a frame of at most
// min(MaxFrame, FrameCap) bytes in, or nil (counted in TxDropped) when the
// port is closed or no frame frees up after kicking the kernel: the caller
// drops the frame, as a full socket buffer would.
func (t *Tx) Next() []byte { return t.NextLen(0) }

// NextLen is Next for a frame of n bytes (at most MaxFrame): a frame longer
// than one UMEM frame (FrameCap) is built in a staging buffer and Queue copies
// it into several UMEM frames (multi-buffer transmission).
func (t *Tx) NextLen(n int) []byte {
	p := t.p
	t.staged = false
	if p.closed.Load() || n > p.maxFrame {
		p.txDropped.Add(1)
		return nil
	}
	s := p.socks[0]
	if n > p.txCap {
		t.staged = true
		return t.stage[:n]
	}
	if (len(s.txFree) == 0 || s.tx.free() == 0) && !s.makeRoom() {
		p.txDropped.Add(1)
		return nil
	}
	a := s.txFree[len(s.txFree)-1] + p.txOff
	return s.umem[a : a+uint64(min(p.maxFrame, p.txCap))]
}

// Queue queues the frame Next returned, n bytes long.
func (t *Tx) Queue(n int) { t.queue(n, -1, 0) }

// QueueChecksum queues the frame Next returned, n bytes long, whose
// transport checksum is still to be computed (RFC 1071): the 16-bit sum from
// byte start to the end of the frame goes, complemented, into the field at
// start+offset, which holds the pseudo-header sum meanwhile (a partial
// checksum, as the kernel's CHECKSUM_PARTIAL). The port asks the kernel for
// it through TX metadata when it can (TxChecksum), else computes it here.
func (t *Tx) QueueChecksum(n, start, offset int) { t.queue(n, start, offset) }

func (t *Tx) queue(n, start, offset int) {
	p := t.p
	s := p.socks[0]
	var f []byte
	if t.staged {
		f = t.stage[:n]
	} else {
		a := s.txFree[len(s.txFree)-1] + p.txOff
		f = s.umem[a : a+uint64(n)]
	}
	meta := false
	if start >= 0 {
		if start+offset+2 > n {
			p.txDropped.Add(1)
			return // the frame stays free
		}
		if p.txcsum && p.tap == nil {
			meta = true
		} else {
			// in software (also when a tap records the frame: it sees the
			// checksum the wire carries)
			binary.BigEndian.PutUint16(f[start+offset:], ^inetsum.Fold(inetsum.Add(0, f[start:])))
		}
	}
	if p.dropTx != nil && p.dropTx(f) {
		p.txInjected.Add(1)
		return // the frame stays free
	}
	if p.tap != nil {
		p.tap.Frame(f, true)
	}
	// the frame's pieces: one UMEM frame, or (staged) as many as it takes
	pieces := 1
	if t.staged {
		pieces = (n + p.txCap - 1) / p.txCap
		if !s.room(pieces) {
			p.txDropped.Add(1)
			return
		}
		p.txMulti.Add(1)
	}
	for i := range pieces {
		base := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		a := base + p.txOff
		l := n
		if t.staged {
			l = copy(s.umem[a:a+uint64(p.txCap)], f[i*p.txCap:])
		}
		var opts uint32
		if i == 0 && meta {
			// struct xsk_tx_metadata: flags, csum_start, csum_offset
			m := s.umem[base : base+txMetaLen]
			binary.NativeEndian.PutUint64(m[0:], unix.XDP_TXMD_FLAGS_CHECKSUM)
			binary.NativeEndian.PutUint16(m[8:], uint16(start))
			binary.NativeEndian.PutUint16(m[10:], uint16(offset))
			opts = unix.XDP_TX_METADATA
		}
		if i < pieces-1 {
			opts |= unix.XDP_PKT_CONTD
		}
		d := s.tx.desc(s.tx.local)
		d.Addr, d.Len, d.Options = a, uint32(l), opts
		s.tx.local++
	}
	t.staged = false
	t.queued++
}

// Done transmits the batch and releases the send lock.
func (t *Tx) Done() {
	p := t.p
	if t.queued > 0 && !p.closed.Load() {
		s := p.socks[0]
		s.tx.publish()
		s.kick()
		s.reclaim()
		p.txPackets.Add(uint64(t.queued))
	}
	t.queued = 0
	p.smu.Unlock()
}

// Addr is the port's IP address.
func (p *Port) Addr() netip.Addr { return p.local }

// MAC is the netdev's hardware address.
func (p *Port) MAC() [6]byte { return p.mac }

// MTU is the netdev's MTU as read at Open.
func (p *Port) MTU() int { return p.mtu }

// MaxFrame is the longest frame the port sends: the MTU plus the Ethernet
// header; with multi-buffer (up to 64 KiB) in several UMEM frames, else at
// most one (FrameCap).
func (p *Port) MaxFrame() int { return p.maxFrame }

// FrameCap is the longest frame sent in one UMEM frame (FrameSize less the TX
// metadata area).
func (p *Port) FrameCap() int { return p.txCap }

// MaxRxFrame is the longest frame the port receives: with multi-buffer the
// MTU plus the Ethernet header (packets of several UMEM frames), else one
// UMEM frame less the kernel's headroom in copy mode.
func (p *Port) MaxRxFrame() int { return p.maxRx }

// MultiBuffer reports whether the sockets are bound with XDP_USE_SG.
func (p *Port) MultiBuffer() bool { return p.sg }

// TxChecksum reports whether Tx.QueueChecksum has the kernel (or the
// netdev) compute checksums through TX metadata rather than the port.
func (p *Port) TxChecksum() bool { return p.txcsum }

// Mode reports the attach mode in use (ModeDriver or ModeGeneric).
func (p *Port) Mode() Mode { return p.mode }

// ZeroCopy reports whether the sockets are bound in zero-copy mode.
func (p *Port) ZeroCopy() bool { return p.zc }

// Queues returns the receive queues bound, the transmitting one first.
func (p *Port) Queues() []int {
	q := make([]int, len(p.socks))
	for i, s := range p.socks {
		q[i] = s.queue
	}
	return q
}

// QueueRxPackets returns the frames read from each bound queue (in the
// order of Queues).
func (p *Port) QueueRxPackets() []uint64 {
	q := make([]uint64, len(p.socks))
	for i, s := range p.socks {
		q[i] = s.rxCount.Load()
	}
	return q
}

// KeepLimit is how many frames receivers may keep per socket.
func (p *Port) KeepLimit() int { return int(p.keep) }

// Stats returns the port's counters.
func (p *Port) Stats() Stats {
	s := Stats{
		RxPackets: p.rxPackets.Load(), TxPackets: p.txPackets.Load(), RxDropped: p.rxDropped.Load(),
		RxInjectedDrops: p.rxInjected.Load(), TxInjectedDrops: p.txInjected.Load(), TxDropped: p.txDropped.Load(),
		RxMultiBuffer: p.rxMulti.Load(), RxTooLong: p.rxTooLong.Load(), TxMultiBuffer: p.txMulti.Load(),
	}
	if p.neigh != nil {
		p.neigh.stats(&s)
	}
	for _, x := range p.socks {
		ks := x.stats()
		s.KernelRxDropped += ks.Rx_dropped
		s.KernelRxRingFull += ks.Rx_ring_full
		s.KernelFillRingEmpty += ks.Rx_fill_ring_empty_descs
	}
	return s
}

// Close detaches the XDP program, stops the receive goroutines and the
// resolver and releases the sockets, rings and UMEM. Frames receivers
// still keep become invalid: receivers stop using the port first.
func (p *Port) Close() error {
	p.steerMu.Lock()
	if p.closed.Swap(true) {
		p.steerMu.Unlock()
		return nil
	}
	p.steerMu.Unlock()
	if p.xlink != nil {
		_ = p.xlink.Close()
		p.xlink = nil
	}
	for _, s := range p.socks {
		if s.file != nil {
			_ = s.file.Close() // wakes rxLoop
		}
	}
	p.rxWG.Wait()
	if p.neigh != nil {
		p.neigh.close()
		p.neigh = nil
	}
	p.smu.Lock()
	for _, s := range p.socks {
		s.fmu.Lock()
	}
	p.release()
	for _, s := range p.socks {
		s.fmu.Unlock()
	}
	p.smu.Unlock()
	return nil
}

// release frees what Open acquired (idempotent; callers exclude users).
func (p *Port) release() {
	if p.xlink != nil {
		_ = p.xlink.Close()
		p.xlink = nil
	}
	if p.prog != nil {
		_ = p.prog.Close()
	}
	if p.xsks != nil {
		_ = p.xsks.Close()
	}
	if p.ports != nil {
		_ = p.ports.Close()
	}
	p.prog, p.xsks, p.ports = nil, nil, nil
	for _, s := range p.socks {
		s.close()
	}
	if p.neigh != nil {
		p.neigh.close()
		p.neigh = nil
	}
	if p.ns.IsOpen() {
		_ = p.ns.Close()
	}
}

// Socket creates a socket (socket(2) arguments; SOCK_CLOEXEC is added) in
// the netdev's network namespace, from any goroutine: the userspace TCP
// stack reserves its ports in the kernel with it.
func (p *Port) Socket(domain, typ, proto int) (int, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	defer orig.Close()
	if err := netns.Set(p.ns); err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	fd, serr := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if netns.Set(orig) == nil {
		runtime.UnlockOSThread() // else the thread dies with the goroutine
	}
	return fd, serr
}
