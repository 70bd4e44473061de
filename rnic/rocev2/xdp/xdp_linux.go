//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	frameSize    = 4096
	ethLen       = 14
	copyHeadroom = 256 // XDP_PACKET_HEADROOM in front of received frames
	etherIPv4    = 0x0800
	etherIPv6    = 0x86DD
)

// ErrAddrFamily is returned by Send for a destination of the other IP
// version than the link's address.
var ErrAddrFamily = errors.New("rocev2/xdp: destination address family differs from the link's")

// Link is a rocev2.Link over an AF_XDP socket (see the package comment).
type Link struct {
	socks []*xsk // one per bound queue; socks[0] (Options.Queue) transmits
	// wait is what Recv blocks on: the socket, or with several sockets an
	// epoll instance holding them all
	wait   syscall.RawConn
	epfile *os.File
	local  netip.AddrPort
	lip    [4]byte
	lip6   [16]byte
	v6     bool
	mac    [6]byte
	batch  int
	tos    uint8
	ttl    uint8
	mode   Mode
	zc     bool
	strict bool
	// maxFrame is the longest frame sent: the netdev's MTU (read at New)
	// plus the Ethernet header, at most a UMEM frame.
	maxFrame int

	xsks  *ebpf.Map
	prog  *ebpf.Program
	xlink link.Link
	neigh *neighbours

	closed atomic.Bool
	rmu    sync.Mutex // Recv (and Close, before unmapping)
	recvFn func(fd uintptr) bool
	rReady bool
	rNext  int // socket Recv looks at first (round robin)

	smu sync.Mutex // Send (and Close, before unmapping)

	rxPackets, txPackets, rxDropped, icrcErrors, icrcRestamped, icrcZeroID, txDropped atomic.Uint64
}

var _ rocev2.Link = (*Link)(nil)

// New opens an AF_XDP link on o.Interface (see the package comment for
// privileges and the network namespace).
func New(o Options) (l *Link, err error) {
	if !o.Addr.Addr().IsValid() || o.Addr.Addr().IsUnspecified() {
		return nil, rocev2.ErrUnspecifiedAddr
	}
	if o.Addr.Port() == 0 {
		o.Addr = netip.AddrPortFrom(o.Addr.Addr(), roce.UDPPort)
	}
	if o.Frames <= 0 {
		o.Frames = 2048
	}
	half := 1
	for half*2 <= o.Frames/2 {
		half *= 2
	}
	if half < 64 {
		half = 64
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	if o.TTL == 0 {
		o.TTL = 64
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	dev, err := nl.LinkByName(o.Interface)
	if err != nil {
		nl.Close()
		return nil, err
	}
	attrs := dev.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		nl.Close()
		return nil, fmt.Errorf("%w: %s is not an Ethernet device", ErrNotSupported, o.Interface)
	}
	l = &Link{
		local: netip.AddrPortFrom(o.Addr.Addr().Unmap(), o.Addr.Port()),
		batch: o.Batch, tos: o.TOS, ttl: o.TTL, strict: o.StrictICRC,
		maxFrame: frameSize,
	}
	if attrs.MTU > 0 {
		l.maxFrame = min(frameSize, ethLen+attrs.MTU)
	}
	l.v6 = l.local.Addr().Is6()
	if l.v6 {
		l.lip6 = l.local.Addr().As16()
	} else {
		l.lip = l.local.Addr().As4()
	}
	copy(l.mac[:], attrs.HardwareAddr)
	defer func() {
		if err != nil {
			l.release()
			l = nil
		}
	}()
	if l.neigh, err = newNeighbours(nl, attrs.Index, l.local.Addr()); err != nil {
		nl.Close()
		return l, err
	}
	queues := []int{o.Queue}
	if o.AllQueues { // o.Queue first: it transmits
		for q := range attrs.NumRxQueues {
			if q != o.Queue {
				queues = append(queues, q)
			}
		}
	}
	for _, q := range queues {
		s, err := openXSK(attrs.Index, q, half, o.ZeroCopy)
		if s != nil {
			l.socks = append(l.socks, s)
		}
		if err != nil {
			return l, fmt.Errorf("rocev2/xdp: AF_XDP socket on %s queue %d: %w", o.Interface, q, err)
		}
		l.zc = s.zc
	}
	if err = l.setupWait(); err != nil {
		return l, err
	}
	if err = l.attach(attrs.Index, o.Mode); err != nil {
		return l, fmt.Errorf("rocev2/xdp: XDP program on %s: %w", o.Interface, err)
	}
	return l, nil
}

func setsockopt(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// xsk is one AF_XDP socket with its own UMEM and rings.
type xsk struct {
	fd     int
	queue  int
	file   *os.File
	rc     syscall.RawConn
	umem   []byte
	fill   ring
	comp   ring
	rx     ring
	tx     ring
	txFree []uint64 // free TX frames
	zc     bool
}

// openXSK creates a socket, registers its UMEM (2·half frames), maps the
// four rings (half entries each), fills the fill ring with the first half
// of the frames and binds to ifindex/queue.
func openXSK(ifindex, queue, half int, zc bool) (s *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s = &xsk{fd: fd, queue: queue}
	s.umem, err = unix.Mmap(-1, 0, 2*half*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return s, err
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: frameSize}
	if err := setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return s, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	n := int32(half)
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := setsockopt(fd, unix.SOL_XDP, opt, unsafe.Pointer(&n), 4); err != nil {
			return s, fmt.Errorf("ring size option %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return s, fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	if s.fill, err = mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, half, 8); err != nil {
		return s, err
	}
	if s.comp, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, half, 8); err != nil {
		return s, err
	}
	dsz := unsafe.Sizeof(unix.XDPDesc{})
	if s.rx, err = mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, half, dsz); err != nil {
		return s, err
	}
	if s.tx, err = mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, half, dsz); err != nil {
		return s, err
	}
	for i := range half {
		*s.fill.addr(s.fill.local) = uint64(i * frameSize)
		s.fill.local++
	}
	s.fill.publish()
	s.txFree = make([]uint64, 0, half)
	for i := half; i < 2*half; i++ {
		s.txFree = append(s.txFree, uint64(i*frameSize))
	}
	sa := &unix.SockaddrXDP{Ifindex: uint32(ifindex), QueueID: uint32(queue), Flags: unix.XDP_COPY}
	if zc {
		sa.Flags = unix.XDP_ZEROCOPY
		if unix.Bind(fd, sa) == nil {
			s.zc = true
		} else {
			sa.Flags = unix.XDP_COPY
		}
	}
	if !s.zc {
		if err := unix.Bind(fd, sa); err != nil {
			return s, fmt.Errorf("bind: %w", err)
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return s, err
	}
	// The runtime poller waits for the socket (xsk_poll reports EPOLLIN
	// when the RX ring has entries), so a blocked Recv holds no thread and
	// Close unblocks it.
	s.file = os.NewFile(uintptr(fd), "xsk")
	if s.rc, err = s.file.SyscallConn(); err != nil {
		return s, err
	}
	return s, nil
}

// close releases the socket, rings and UMEM (callers exclude Send/Recv).
func (s *xsk) close() {
	if s.file != nil {
		_ = s.file.Close()
	} else if s.fd >= 0 {
		_ = unix.Close(s.fd)
	}
	s.fd = -1
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		r.unmap()
	}
	if s.umem != nil {
		_ = unix.Munmap(s.umem)
		s.umem = nil
	}
}

// setupWait chooses what Recv blocks on: the only socket, or an epoll
// instance (itself pollable by the runtime) watching every socket.
func (l *Link) setupWait() error {
	l.recvFn = func(uintptr) bool {
		l.rReady = false
		for _, s := range l.socks {
			if s.rx.ready() > 0 {
				l.rReady = true
				break
			}
		}
		return l.rReady || l.closed.Load()
	}
	if len(l.socks) == 1 {
		l.wait = l.socks[0].rc
		return nil
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	for _, s := range l.socks {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			unix.Close(ep)
			return err
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return err
	}
	l.epfile = os.NewFile(uintptr(ep), "xsk-epoll")
	l.wait, err = l.epfile.SyscallConn()
	return err
}

// attach creates the XSK map with each socket at the key of its queue,
// loads the redirect program and attaches it in the requested mode.
func (l *Link) attach(ifindex int, mode Mode) error {
	var err error
	n := 64
	for _, s := range l.socks {
		n = max(n, s.queue+1)
	}
	l.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(n)})
	if err != nil {
		return fmt.Errorf("XSK map: %w", err)
	}
	for _, s := range l.socks {
		if err = l.xsks.Put(uint32(s.queue), uint32(s.fd)); err != nil {
			return fmt.Errorf("XSK map update: %w", err)
		}
	}
	l.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "softrnic_roce", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: redirectProgram(l.xsks, l.local),
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if mode == ModeAuto || mode == ModeDriver {
		l.xlink, err = link.AttachXDP(link.XDPOptions{Program: l.prog, Interface: ifindex, Flags: link.XDPDriverMode})
		if err == nil {
			l.mode = ModeDriver
			return nil
		}
		if mode == ModeDriver {
			return err
		}
	}
	l.xlink, err = link.AttachXDP(link.XDPOptions{Program: l.prog, Interface: ifindex, Flags: link.XDPGenericMode})
	l.mode = ModeGeneric
	return err
}

// Mode reports the attach mode in use (ModeDriver or ModeGeneric).
func (l *Link) Mode() Mode { return l.mode }

// ZeroCopy reports whether the socket is bound in zero-copy mode.
func (l *Link) ZeroCopy() bool { return l.zc }

// LocalAddr implements rocev2.Link.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// BatchSize implements rocev2.Link.
func (l *Link) BatchSize() int { return l.batch }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	s := Stats{
		RxPackets: l.rxPackets.Load(), TxPackets: l.txPackets.Load(), RxDropped: l.rxDropped.Load(),
		ICRCErrors: l.icrcErrors.Load(), ICRCRestamped: l.icrcRestamped.Load(), ICRCZeroID: l.icrcZeroID.Load(), TxDropped: l.txDropped.Load(),
	}
	for _, x := range l.socks {
		if x.rc == nil {
			continue
		}
		var ks unix.XDPStatistics
		_ = x.rc.Control(func(fd uintptr) {
			_ = getsockopt(int(fd), unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks))
		})
		s.KernelRxDropped += ks.Rx_dropped
		s.KernelRxRingFull += ks.Rx_ring_full
		s.KernelFillRingEmpty += ks.Rx_fill_ring_empty_descs
	}
	return s
}

// Close detaches the XDP program, unblocks Recv and releases the socket,
// rings and UMEM. It implements rocev2.Link.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.xlink != nil {
		_ = l.xlink.Close()
		l.xlink = nil
	}
	// wake a Recv blocked in the poller
	if l.epfile != nil {
		_ = l.epfile.Close()
	}
	for _, s := range l.socks {
		if s.file != nil {
			_ = s.file.Close()
		}
	}
	l.rmu.Lock()
	l.smu.Lock()
	l.release()
	l.smu.Unlock()
	l.rmu.Unlock()
	return nil
}

// release frees what New acquired (idempotent; callers exclude Send/Recv).
func (l *Link) release() {
	if l.xlink != nil {
		_ = l.xlink.Close()
		l.xlink = nil
	}
	if l.prog != nil {
		_ = l.prog.Close()
		l.prog = nil
	}
	if l.xsks != nil {
		_ = l.xsks.Close()
		l.xsks = nil
	}
	if l.epfile != nil {
		_ = l.epfile.Close()
	}
	for _, s := range l.socks {
		s.close()
	}
	if l.neigh != nil {
		l.neigh.close()
		l.neigh = nil
	}
}

// Recv implements rocev2.Link: it waits for the RX ring, copies up to
// len(bufs) packets' UDP payloads out of the UMEM and returns their frames
// to the fill ring.
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
		if err := l.wait.Read(l.recvFn); err != nil {
			if l.closed.Load() || errors.Is(err, os.ErrClosed) {
				return 0, rocev2.ErrLinkClosed
			}
			return 0, err
		}
		if l.closed.Load() {
			return 0, rocev2.ErrLinkClosed
		}
		n := 0
		for k := range len(l.socks) {
			if n == len(bufs) {
				break
			}
			s := l.socks[(l.rNext+k)%len(l.socks)]
			avail := min(s.rx.ready(), uint32(len(bufs)-n))
			if avail == 0 {
				continue
			}
			for range avail {
				d := s.rx.desc(s.rx.local)
				addr, ln := d.Addr, uint64(d.Len)
				s.rx.local++
				if addr+ln <= uint64(len(s.umem)) && l.input(s.umem[addr:addr+ln], bufs[n], &sizes[n], &from[n]) {
					n++
				} else {
					l.rxDropped.Add(1)
				}
				*s.fill.addr(s.fill.local) = addr &^ (frameSize - 1)
				s.fill.local++
			}
			s.rx.release()
			s.fill.publish()
		}
		l.rNext++
		if n > 0 {
			l.rxPackets.Add(uint64(n))
			return n, nil
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
	copy(buf, pl)
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
	*size = copy(buf[:len(pl)], pl)
	*from = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), binary.BigEndian.Uint16(udp[0:]))
	return true
}

// Send implements rocev2.Link: each buffer becomes one Ethernet/IPv4/UDP
// frame in a TX frame of the UMEM; the batch is kicked with one sendto.
func (l *Link) Send(bufs [][]byte, dst netip.AddrPort) error {
	if l.closed.Load() {
		return rocev2.ErrLinkClosed
	}
	var dip [4]byte
	var dip6 [16]byte
	if da := dst.Addr().Unmap(); l.v6 && da.Is6() {
		dip6 = da.As16()
	} else if !l.v6 && da.Is4() {
		dip = da.As4()
	} else {
		l.txDropped.Add(uint64(len(bufs)))
		return ErrAddrFamily
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	if l.closed.Load() {
		return rocev2.ErrLinkClosed
	}
	mac, err := l.neigh.lookup(dst.Addr().Unmap())
	if err != nil {
		l.txDropped.Add(uint64(len(bufs)))
		return err
	}
	s := l.socks[0]
	queued := 0
	for i, b := range bufs {
		hl := 28
		if l.v6 {
			hl = 48
		}
		if ethLen+hl+len(b) > l.maxFrame || len(b) < roce.ICRCLen {
			l.txDropped.Add(1)
			continue
		}
		if len(s.txFree) == 0 || s.tx.free() == 0 {
			if !s.makeRoom() {
				l.txDropped.Add(uint64(len(bufs) - i))
				break // like a full socket buffer: the transport retransmits
			}
		}
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		f := s.umem[addr : addr+frameSize]
		copy(f[0:6], mac[:])
		copy(f[6:12], l.mac[:])
		var n int
		if l.v6 {
			binary.BigEndian.PutUint16(f[12:], etherIPv6)
			h := roce.AppendIPv6UDP(f[ethLen:ethLen], l.lip6, dip6, l.tos, l.ttl, 0, l.local.Port(), dst.Port(), len(b)-roce.ICRCLen)
			n = ethLen + len(h) + copy(f[ethLen+len(h):], b)
			udp6Checksum(f[ethLen:n])
		} else {
			binary.BigEndian.PutUint16(f[12:], etherIPv4)
			h := roce.AppendIPv4UDP(f[ethLen:ethLen], l.lip, dip, l.tos, l.ttl, 0, l.local.Port(), dst.Port(), len(b)-roce.ICRCLen)
			n = ethLen + len(h) + copy(f[ethLen+len(h):], b)
		}
		d := s.tx.desc(s.tx.local)
		d.Addr, d.Len, d.Options = addr, uint32(n), 0
		s.tx.local++
		queued++
	}
	if queued > 0 {
		s.tx.publish()
		s.kick()
		s.reclaim()
		l.txPackets.Add(uint64(queued))
	}
	return nil
}

// kick asks the kernel to transmit the TX ring (copy mode transmits in the
// system call, a bounded number of frames per call). It reports false on
// an error other than a transient one (e.g. the netdev is down).
func (s *xsk) kick() bool {
	for range 64 {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if atomic.LoadUint32(s.tx.cons) == s.tx.local {
			return true
		}
		switch e {
		case 0:
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			runtime.Gosched()
		default:
			return false
		}
	}
	return true
}

// reclaim moves completed TX frames back to the free list.
func (s *xsk) reclaim() {
	n := s.comp.ready()
	for range n {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.local)&^(frameSize-1))
		s.comp.local++
	}
	if n > 0 {
		s.comp.release()
	}
}

// makeRoom publishes what is queued, kicks and reclaims until a TX frame
// and a TX ring slot are free.
func (s *xsk) makeRoom() bool {
	for range 1000 {
		s.tx.publish()
		ok := s.kick()
		s.reclaim()
		if len(s.txFree) > 0 && s.tx.free() > 0 {
			return true
		}
		if !ok {
			return false
		}
		runtime.Gosched()
	}
	return false
}

// udp6Checksum fills in the UDP checksum of an IPv6 packet without
// extension headers (RFC 8200 §8.1: mandatory over IPv6; a kernel UDP
// socket drops datagrams with checksum 0). The ICRC masks the field.
func udp6Checksum(p []byte) {
	u := p[40:]
	u[6], u[7] = 0, 0
	s := uint64(len(u)) + 17
	s = sum16(s, p[8:40]) // source and destination addresses
	s = sum16(s, u)
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(u[6:], c)
}

// sum16 adds b to the one's-complement sum s as big-endian 16-bit words.
func sum16(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>48 + v>>32&0xFFFF + v>>16&0xFFFF + v&0xFFFF
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}
