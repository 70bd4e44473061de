//go:build linux

package rocev2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/memcopy"
	"github.com/softrnic/softrnic/internal/sockopt"
	"github.com/softrnic/softrnic/roce"
)

// UDPOptions configure a UDPLink. ListenUDP with nil options turns both offloads on
// where the kernel has them: GSO (over IPv4 each segment's ICRC is fixed for the IP ID
// the kernel gives it, so every peer's exact check passes, rxe's included; IPv6 has no
// ID) and GRO (eight 64 KiB receive buffers per link, 512 KiB; 1.5× the 64 KiB WRITE
// goodput over loopback: bench BenchmarkAttachedWrite, in-process-gro ÷ in-process).
// The zero UDPOptions turns both off, as NewUDPLinkFile with nil does: a socket of a
// steered SO_REUSEPORT group must not use GRO (rnic/rocev2/steer).
type UDPOptions struct {
	// Batch is the number of datagrams per sendmmsg/recvmmsg (default 64).
	Batch int
	// GSO sends runs of equal-sized packets to one destination as one UDP
	// GSO super-datagram (UDP_SEGMENT). The kernel gives the segments of an
	// IPv4 super-datagram the IP IDs 0, 1, 2…, and the link fixes each
	// segment's ICRC for its ID before the send (it was computed with ID 0),
	// so receivers that verify with the real ID (rxe) accept them. (A NIC
	// whose hardware segmentation numbered IDs otherwise would defeat that;
	// the kernel's software GSO and the usual NICs count up from the first.)
	GSO bool
	// GRO asks the kernel to coalesce received datagrams (UDP_GRO); they are
	// split again before the transport sees them.
	GRO bool
}

// UDPLink is a Link over a kernel UDP socket using sendmmsg/recvmmsg and,
// when enabled and offered by the kernel, UDP GSO and GRO.
type UDPLink struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	local netip.AddrPort
	batch int
	gso   bool
	gro   bool

	smu   sync.Mutex
	shdr  []unix.Mmsghdr
	siov  []unix.Iovec
	sname unix.RawSockaddrInet6
	sctl  []byte

	rhdr  []unix.Mmsghdr
	riov  []unix.Iovec
	rname []unix.RawSockaddrInet6
	rctl  []byte
	gbuf  [][]byte // GRO receive buffers
	// split GRO datagrams not yet handed out: pend of the datagram in gbuf[pendMsg],
	// then those after it up to pendN
	pend     []byte
	pendSeg  int
	pendFrom netip.AddrPort
	pendMsg  int
	pendN    int

	// preallocated syscall closures (a closure passed to RawConn escapes)
	sendFn, recvFn func(fd uintptr) bool
	sHdr           []unix.Mmsghdr
	sErr           syscall.Errno // first datagram the kernel refused in a sendmmsg
	idFix          []idFix       // ICRCs fixed for their GSO segment's IP ID, undone after the send
	each           eachArgs      // the recvEach in progress (one at a time: the endpoint's receive)
	idLen          int           // the packet length idDelta is for (0: none yet)
	idDelta        [64]uint32    // ICRC deltas of IP IDs 0…63 for packets of idLen bytes
	rN, rGot       int
}

// ErrUnspecifiedAddr is returned by ListenUDP for a wildcard address: the
// ICRC covers the source IP, so a link needs a specific one.
var ErrUnspecifiedAddr = errors.New("rocev2: a RoCE link needs a specific local IP address (the ICRC covers it)")

const udpSegment = 103 // UDP_SEGMENT
const udpGRO = 104     // UDP_GRO
const groBufLen = 65536

// sockBuf is the receive and send buffer size a UDPLink asks for. RoCEv2 has no flow
// control: what the receive buffer cannot hold is lost, and each loss costs a go-back-N
// resend (the requester's window adapts to it, window.go).
const sockBuf = 8 << 20

// setOptions sets a link's socket options on fd: DF, sockBuf buffers, and the offloads
// o asks for (recording which the kernel took). The buffers are forced past
// net.core.rmem_max and wmem_max (SO_RCVBUFFORCE, SO_SNDBUFFORCE, as wireguard-go does)
// where the process may (CAP_NET_ADMIN); otherwise the kernel caps them there.
func (l *UDPLink) setOptions(fd int, v4 bool, o *UDPOptions) {
	if v4 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	} else {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, sockBuf)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuf)
	}
	if o.GSO {
		l.gso = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, udpSegment, 0) == nil
	}
	if o.GRO {
		l.gro = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, udpGRO, 1) == nil
	}
}

// ListenUDP opens a UDP link on addr, with o's offloads (nil: chosen by the address
// family, see UDPOptions): port 4791 (roce.UDPPort) for a standard
// deployment, another port below 0xC000 to share the IP with other endpoints (peers
// reach it through an Addr with that UDPPort), or 0 for a free port below 0xC000.
// Ports 0xC000-0xFFFF are refused (ErrEntropyPort). The address must be a specific
// IP: the ICRC covers it. Errors wrap the cause (errors.Is(err, syscall.EADDRINUSE)). Outgoing packets have DF set and, on an unconnected IPv4
// socket, IP ID 0 (Linux ip_select_ident), which is what the ICRC assumes. The socket's
// buffers are 8 MiB each, past net.core.rmem_max and wmem_max where the process has
// CAP_NET_ADMIN (SO_RCVBUFFORCE); otherwise those limits cap them (Linux's default is
// 208 KiB), and an RC stream's window adapts to the losses that follow (Config.Window).
func ListenUDP(addr netip.AddrPort, o *UDPOptions) (*UDPLink, error) {
	if !addr.Addr().IsValid() || addr.Addr().IsUnspecified() {
		return nil, ErrUnspecifiedAddr
	}
	network := "udp4"
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		network = "udp6"
	}
	var opt UDPOptions
	if o != nil {
		opt = *o
	} else {
		opt.GSO, opt.GRO = true, true // the automatic choice (see UDPOptions)
	}
	if opt.Batch <= 0 {
		opt.Batch = 64
	}
	conn, err := listenUDP(network, addr)
	if err != nil {
		return nil, err
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rocev2: UDP socket: %w", err)
	}
	l := &UDPLink{conn: conn, rc: rc, batch: opt.Batch}
	l.local = conn.LocalAddr().(*net.UDPAddr).AddrPort()
	l.local = netip.AddrPortFrom(l.local.Addr().Unmap(), l.local.Port())
	_ = rc.Control(func(fd uintptr) { l.setOptions(int(fd), network == "udp4", &opt) })
	l.init(opt.Batch)
	return l, nil
}

// init allocates the link's syscall state for batches of n once its offloads are known
// (ListenUDP, NewUDPLinkFile).
func (l *UDPLink) init(n int) {
	l.shdr = make([]unix.Mmsghdr, n)
	l.siov = make([]unix.Iovec, 3*n) // up to 3 per packet (sendParts)
	l.sctl = make([]byte, n*unix.CmsgSpace(2))
	l.rhdr = make([]unix.Mmsghdr, n)
	l.riov = make([]unix.Iovec, n)
	l.rname = make([]unix.RawSockaddrInet6, n)
	if l.gro {
		g := min(n, 8)
		l.gbuf = make([][]byte, g)
		for i := range l.gbuf {
			l.gbuf[i] = make([]byte, groBufLen)
		}
		l.rctl = make([]byte, g*unix.CmsgSpace(4))
	}
	l.sendFn = l.doSend
	l.recvFn = l.doRecv
}

// GSO reports whether UDP GSO is in use.
func (l *UDPLink) GSO() bool { return l.gso }

// GRO reports whether UDP GRO is in use.
func (l *UDPLink) GRO() bool { return l.gro }

// Pending implements PendingLink: a datagram waits in the socket (SIOCINQ).
func (l *UDPLink) Pending() bool {
	n := 0
	_ = l.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// SocketDrops returns how many datagrams the kernel dropped on the link's socket since
// it opened, most for a full receive buffer (the socket's sk_drops, read with
// getsockopt SO_MEMINFO). A peer's RC stream sees each as a PSN gap: a NAK and a
// go-back-N resend (Endpoint.WindowCuts counts what that did to the sender's window).
func (l *UDPLink) SocketDrops() (uint64, error) {
	const skMeminfoDrops = 8 // SK_MEMINFO_DROPS (include/uapi/linux/sock_diag.h)
	var mi [skMeminfoDrops + 1]uint32
	var n uintptr
	var err error
	if cerr := l.rc.Control(func(fd uintptr) {
		n, err = sockopt.Get(int(fd), unix.SOL_SOCKET, unix.SO_MEMINFO, unsafe.Pointer(&mi), unsafe.Sizeof(mi))
	}); cerr != nil {
		return 0, fmt.Errorf("rocev2: SO_MEMINFO: %w", cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("rocev2: SO_MEMINFO: %w", err)
	}
	if n < unsafe.Sizeof(mi) {
		return 0, fmt.Errorf("rocev2: SO_MEMINFO: %d bytes", n)
	}
	return uint64(mi[skMeminfoDrops]), nil
}

// LocalAddr implements Link.
func (l *UDPLink) LocalAddr() netip.AddrPort { return l.local }

// BatchSize implements Link.
func (l *UDPLink) BatchSize() int { return l.batch }

// Close implements Link.
func (l *UDPLink) Close() error { return l.conn.Close() }

func (l *UDPLink) putName(dst netip.AddrPort) uint32 {
	a := dst.Addr()
	if l.local.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&l.sname))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Unmap().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], dst.Port())
		return unix.SizeofSockaddrInet4
	}
	l.sname = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&l.sname.Port))[:], dst.Port())
	return unix.SizeofSockaddrInet6
}

// Send transmits bufs to dst with sendmmsg, grouping runs of equal-sized
// packets into GSO super-datagrams when enabled.
func (l *UDPLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	return l.sendParts(bufs, nil, nil, dst)
}

// txParts are the packets of a send: packet k is head[k], then body[k] and tail[k]
// when those are given (gatherLink), each part an iovec.
type txParts struct{ head, body, tail [][]byte }

func (p *txParts) size(k int) int {
	n := len(p.head[k])
	if p.body != nil {
		n += len(p.body[k]) + len(p.tail[k])
	}
	return n
}

// icrc returns packet k's last 4 bytes, its ICRC field.
func (p *txParts) icrc(k int) []byte {
	b := p.head[k]
	if p.tail != nil && len(p.tail[k]) >= roce.ICRCLen {
		b = p.tail[k]
	}
	return b[len(b)-roce.ICRCLen:]
}

// sendParts implements gatherLink (Send with body and tail nil): as Send, each packet's
// parts its iovecs, so a GSO super-datagram is the run's parts in order.
func (l *UDPLink) sendParts(head, body, tail [][]byte, dst netip.AddrPort) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	p := txParts{head, body, tail}
	per := 1 // iovecs a packet may take
	if body != nil {
		per = 3
	}
	nl := l.putName(dst)
	var sendErr error
	for len(p.head) > 0 {
		nh, ni, nc := 0, 0, 0
		i := 0
		for i < len(p.head) && nh < len(l.shdr) && ni+per <= len(l.siov) {
			// a run of packets of the size of packet i (the last may be shorter)
			j := i + 1
			size := p.size(i)
			total := size
			if l.gso {
				for j < len(p.head) && ni+per*(j-i+1) <= len(l.siov) && j-i < 64 && total+p.size(j) <= groBufLen-512 &&
					p.size(j) <= size && p.size(j-1) == size {
					total += p.size(j)
					j++
				}
			}
			h := &l.shdr[nh]
			*h = unix.Mmsghdr{}
			h.Hdr.Name = (*byte)(unsafe.Pointer(&l.sname))
			h.Hdr.Namelen = nl
			h.Hdr.Iov = &l.siov[ni]
			n0 := ni
			for k := i; k < j; k++ {
				l.putIov(&ni, p.head[k], true)
				if p.body != nil {
					l.putIov(&ni, p.body[k], false)
					l.putIov(&ni, p.tail[k], false)
				}
			}
			h.Hdr.SetIovlen(ni - n0)
			if j-i > 1 {
				l.fixIDs(&p, i, j)
				c := l.sctl[nc : nc+unix.CmsgSpace(2)]
				ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
				ch.Level = unix.IPPROTO_UDP
				ch.Type = udpSegment
				ch.SetLen(unix.CmsgLen(2))
				binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(size))
				h.Hdr.Control = &c[0]
				h.Hdr.SetControllen(unix.CmsgSpace(2))
				nc += unix.CmsgSpace(2)
			}
			nh++
			i = j
		}
		err := l.sendmmsg(nh)
		l.unfixIDs()
		if err != nil {
			if errors.Is(err, ErrLinkClosed) {
				return err
			}
			if sendErr == nil {
				sendErr = err
			}
		}
		p.head = p.head[i:]
		if p.body != nil {
			p.body, p.tail = p.body[i:], p.tail[i:]
		}
	}
	return sendErr
}

// putIov sets the next send iovec to b; an empty b takes one only when always is set.
func (l *UDPLink) putIov(ni *int, b []byte, always bool) {
	if len(b) == 0 && !always {
		return
	}
	v := &l.siov[*ni]
	v.Base = nil
	if len(b) > 0 {
		v.Base = &b[0]
	}
	v.SetLen(len(b))
	*ni++
}

// idFix is one packet whose ICRC fixIDs changed.
type idFix struct {
	icrc  []byte // the packet's ICRC field
	delta uint32
}

// fixIDs makes the ICRCs of a GSO run, packets i to j-1 of p, right for the IP IDs the
// kernel gives its segments. A super-datagram from an unconnected IPv4 socket with DF
// leaves with ID 0 (ip_select_ident) and segmentation numbers the segments 0, 1, 2…
// (inet_gso_segment), while each packet's ICRC was computed with ID 0; segment k's is
// fixed by the difference ID k makes (roce.ICRCIPv4IDDelta), so a receiver that checks
// the real ID, as rxe does, accepts every segment. The packets are the caller's:
// unfixIDs restores them once the kernel has copied them. IPv6 has no ID.
func (l *UDPLink) fixIDs(p *txParts, i, j int) {
	if !l.local.Addr().Is4() {
		return
	}
	size := p.size(i)
	for k := 1; k < j-i; k++ {
		n := p.size(i + k)
		if n < roce.BTHLen+roce.ICRCLen {
			continue
		}
		var d uint32
		if n == size && k < len(l.idDelta) {
			d = l.deltaFor(n, k)
		} else { // a run's shorter last packet
			d = roce.ICRCIPv4IDDelta(uint16(k), n-roce.ICRCLen)
		}
		f := idFix{icrc: p.icrc(i + k), delta: d}
		binary.LittleEndian.PutUint32(f.icrc, binary.LittleEndian.Uint32(f.icrc)^f.delta)
		l.idFix = append(l.idFix, f)
	}
}

// deltaFor returns roce.ICRCIPv4IDDelta(id, n-roce.ICRCLen) for a packet of n bytes
// and id < 64 from a table kept for the last n: the delta is linear in the ID (XOR), so
// the table takes one multiplication per ID bit and XORs for the rest, where a GSO run
// of equal-sized packets would otherwise take a multiplication per packet.
func (l *UDPLink) deltaFor(n, id int) uint32 {
	if n != l.idLen {
		l.idLen = n
		for b := 1; b < len(l.idDelta); b <<= 1 {
			l.idDelta[b] = roce.ICRCIPv4IDDelta(uint16(b), n-roce.ICRCLen)
		}
		for k := 3; k < len(l.idDelta); k++ {
			if lo := k & -k; lo != k {
				l.idDelta[k] = l.idDelta[lo] ^ l.idDelta[k-lo]
			}
		}
	}
	return l.idDelta[id]
}

// unfixIDs gives the packets fixIDs changed their ICRCs for ID 0 back.
func (l *UDPLink) unfixIDs() {
	for _, f := range l.idFix {
		binary.LittleEndian.PutUint32(f.icrc, binary.LittleEndian.Uint32(f.icrc)^f.delta)
	}
	clear(l.idFix)
	l.idFix = l.idFix[:0]
}

func (l *UDPLink) doSend(fd uintptr) bool {
	for len(l.sHdr) > 0 {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&l.sHdr[0])), uintptr(len(l.sHdr)), 0, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			// A datagram the kernel refuses (e.g. EMSGSIZE, EHOSTUNREACH) is
			// skipped, like a lost packet; Send reports the first refusal.
			if l.sErr == 0 {
				l.sErr = e
			}
			l.sHdr = l.sHdr[1:]
			continue
		}
		l.sHdr = l.sHdr[r:]
	}
	return true
}

func (l *UDPLink) sendmmsg(n int) error {
	l.sHdr = l.shdr[:n]
	l.sErr = 0
	err := l.rc.Write(l.sendFn)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return ErrLinkClosed
		}
		return fmt.Errorf("rocev2: sendmmsg: %w", err)
	}
	if l.sErr != 0 {
		return fmt.Errorf("rocev2: sendmmsg: %w", os.NewSyscallError("sendmmsg", l.sErr))
	}
	return nil
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	if sa.Family == unix.AF_INET {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
}

// Recv receives datagrams with recvmmsg (straight into bufs without GRO;
// through 64 KiB buffers, split by the GRO segment size, with GRO).
func (l *UDPLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	if l.gro {
		return l.recvGRO(bufs, sizes, from, false)
	}
	got, err := l.recvmmsg(l.prepPlain(bufs))
	if err != nil {
		return 0, err
	}
	l.donePlain(got, sizes, from)
	return got, nil
}

// prepPlain sets the receive headers for datagrams straight into bufs (no GRO) and
// returns how many recvmmsg may fill.
func (l *UDPLink) prepPlain(bufs [][]byte) int {
	n := min(len(bufs), len(l.rhdr))
	for i := range n {
		l.riov[i].Base = &bufs[i][:cap(bufs[i])][0]
		l.riov[i].SetLen(cap(bufs[i]))
		l.rhdr[i] = unix.Mmsghdr{}
		l.rhdr[i].Hdr.Name = (*byte)(unsafe.Pointer(&l.rname[i]))
		l.rhdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		l.rhdr[i].Hdr.Iov = &l.riov[i]
		l.rhdr[i].Hdr.SetIovlen(1)
	}
	return n
}

// donePlain reports the sizes and sources of the got datagrams of a prepPlain receive.
func (l *UDPLink) donePlain(got int, sizes []int, from []netip.AddrPort) {
	for i := range got {
		sizes[i] = int(l.rhdr[i].Len)
		from[i] = sockaddrToAddrPort(&l.rname[i])
	}
}

// recvView implements viewLink: with GRO, each packet is handed out as a view of the
// datagram it came in (bufs[i] is replaced), where Recv copies it into bufs[i].
func (l *UDPLink) recvView(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	if l.gro {
		return l.recvGRO(bufs, sizes, from, true)
	}
	return l.Recv(bufs, sizes, from)
}

func (l *UDPLink) doRecv(fd uintptr) bool {
	got, ok := l.sysRecvmmsg(fd, l.rN)
	l.rGot = got
	return ok
}

// sysRecvmmsg receives into the first n headers of rhdr (prepPlain, prepGRO) with one
// recvmmsg(2) on fd, retried on EINTR: ok false when the socket was empty (EAGAIN);
// got -1 for another error (a socket error such as an ICMP report, which reporting
// clears), else the headers filled.
func (l *UDPLink) sysRecvmmsg(fd uintptr, n int) (got int, ok bool) {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&l.rhdr[0])), uintptr(n), 0, 0, 0)
		switch e {
		case 0:
			return int(r), true
		case unix.EINTR:
		case unix.EAGAIN:
			return 0, false
		default:
			return -1, true
		}
	}
}

func (l *UDPLink) recvmmsg(n int) (int, error) {
	l.rN = n
	err := l.rc.Read(l.recvFn)
	got := l.rGot
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, ErrLinkClosed
		}
		return 0, err
	}
	if got < 0 {
		return 0, nil
	}
	return got, nil
}

// recvGRO is Recv with GRO; view: recvView.
func (l *UDPLink) recvGRO(bufs [][]byte, sizes []int, from []netip.AddrPort, view bool) (int, error) {
	for {
		if out := l.takeGRO(bufs, sizes, from, view); out > 0 {
			return out, nil
		}
		// Every coalesced datagram waiting, up to the GRO buffers: one receive batch
		// then carries up to len(bufs) packets, so the transport's per-batch work (its
		// coalesced ACKs) is spread over more packets.
		got, err := l.recvmmsg(l.prepGRO())
		if err != nil {
			return 0, err
		}
		if got > 0 {
			l.startGRO(got)
		}
	}
}

// takeGRO hands out up to len(bufs) packets of the GRO datagrams received and not yet
// handed out (view: as views of the link's buffers) and returns how many.
func (l *UDPLink) takeGRO(bufs [][]byte, sizes []int, from []netip.AddrPort, view bool) int {
	out := 0
	for out < len(bufs) {
		if len(l.pend) == 0 {
			if l.pendMsg+1 >= l.pendN {
				break
			}
			l.pendMsg++
			l.nextGRO()
			continue
		}
		k := min(l.pendSeg, len(l.pend))
		if view {
			bufs[out], sizes[out] = l.pend[:k:k], k
		} else {
			sizes[out] = memcopy.Copy(bufs[out][:cap(bufs[out])], l.pend[:k])
		}
		from[out] = l.pendFrom
		l.pend = l.pend[k:]
		out++
	}
	return out
}

// prepGRO sets the receive headers for datagrams into the GRO buffers and returns how
// many recvmmsg may fill.
func (l *UDPLink) prepGRO() int {
	n := len(l.gbuf)
	cs := unix.CmsgSpace(4)
	for i := range n {
		l.riov[i].Base = &l.gbuf[i][0]
		l.riov[i].SetLen(groBufLen)
		l.rhdr[i] = unix.Mmsghdr{}
		l.rhdr[i].Hdr.Name = (*byte)(unsafe.Pointer(&l.rname[i]))
		l.rhdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		l.rhdr[i].Hdr.Iov = &l.riov[i]
		l.rhdr[i].Hdr.SetIovlen(1)
		l.rhdr[i].Hdr.Control = &l.rctl[i*cs]
		l.rhdr[i].Hdr.SetControllen(cs)
	}
	return n
}

// recvEach implements eachLink: it calls fn with each batch recvView would return,
// for as long as the link is open, from inside one RawConn.Read of the socket.
//
// That saves the system call that finds the socket empty after each batch: a read
// that starts a RawConn.Read clears the runtime poller's readiness
// (poll_runtime_pollReset), so each call must read before it may wait, or it could miss
// data that came in before it. Inside one RawConn.Read the readiness is kept, so after
// a recvmmsg that returned fewer datagrams than it had room for (the socket was empty
// when it ran) the loop waits for the poller at once: anything that arrived since left
// an edge-triggered event, which makes the wait return. It returns ErrLinkClosed once
// the link is closed; fn runs on the caller's goroutine, which must not close the link
// from inside fn (Close waits for the read in progress).
func (l *UDPLink) recvEach(bufs [][]byte, sizes []int, from []netip.AddrPort, fn func(n int), stop func() bool) error {
	e := &l.each
	e.bufs, e.sizes, e.from, e.fn, e.stop, e.stopped = bufs, sizes, from, fn, stop, false
	if e.read == nil {
		e.read = l.eachRead // made once: a Wait that drives the receive calls recvEach each time
	}
	err := l.rc.Read(e.read)
	stopped := e.stopped
	e.bufs, e.sizes, e.from, e.fn, e.stop = nil, nil, nil, nil, nil
	switch {
	case errors.Is(err, net.ErrClosed):
		return ErrLinkClosed
	case err == nil && stopped:
		return errRecvStopped
	}
	return err // eachRead returns true only when stopped: Read ends with an error otherwise
}

// eachArgs is a recvEach call's arguments, for eachRead.
type eachArgs struct {
	bufs    [][]byte
	sizes   []int
	from    []netip.AddrPort
	fn      func(n int)
	stop    func() bool
	stopped bool
	read    func(fd uintptr) bool
}

// stopNow asks the call's stop function, and records a stop.
func (e *eachArgs) stopNow() bool {
	e.stopped = e.stop != nil && e.stop()
	return e.stopped
}

// eachRead is recvEach's function for RawConn.Read: it receives and hands out batches
// until the socket is drained, then returns false (wait for the poller), unless the stop
// function says to stop.
func (l *UDPLink) eachRead(fd uintptr) bool {
	e := &l.each
	drained := false // the last recvmmsg filled fewer headers than it was given
	for {
		if l.gro {
			if n := l.takeGRO(e.bufs, e.sizes, e.from, true); n > 0 {
				e.fn(n)
				if e.stopNow() {
					return true
				}
				continue
			}
		}
		if drained {
			return e.stopNow() // false: wait for the poller; it calls this function again
		}
		asked := 0
		if l.gro {
			asked = l.prepGRO()
		} else {
			asked = l.prepPlain(e.bufs)
		}
		got, ok := l.sysRecvmmsg(fd, asked)
		if !ok {
			return e.stopNow()
		}
		if got <= 0 {
			continue
		}
		drained = got < asked
		if l.gro {
			l.startGRO(got)
			continue
		}
		l.donePlain(got, e.sizes, e.from)
		e.fn(got)
		if e.stopNow() {
			return true
		}
	}
}

func (l *UDPLink) setRecvDeadline(t time.Time) { _ = l.conn.SetReadDeadline(t) }

// startGRO starts handing out the got datagrams a prepGRO receive filled (takeGRO).
func (l *UDPLink) startGRO(got int) {
	l.pendMsg, l.pendN = 0, got
	l.nextGRO()
}

// nextGRO makes the received datagram in gbuf[pendMsg] the one recvGRO splits.
func (l *UDPLink) nextGRO() {
	i := l.pendMsg
	h := &l.rhdr[i]
	seg := int(h.Len)
	cs := unix.CmsgSpace(4)
	if h.Hdr.Controllen >= uint64(unix.CmsgLen(4)) {
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&l.rctl[i*cs]))
		if ch.Level == unix.IPPROTO_UDP && ch.Type == udpGRO {
			seg = int(binary.NativeEndian.Uint32(l.rctl[i*cs+unix.CmsgLen(0):]))
		}
	}
	if seg <= 0 {
		seg = int(h.Len)
	}
	l.pend = l.gbuf[i][:h.Len]
	l.pendSeg = seg
	l.pendFrom = sockaddrToAddrPort(&l.rname[i])
}
