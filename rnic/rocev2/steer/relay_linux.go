//go:build linux

package steer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// relayHdrLen is the header the daemon puts before each relayed datagram:
// the source IP as 16 bytes (IPv4-mapped for IPv4), the source UDP port big
// endian, 2 zero bytes.
const relayHdrLen = 20

// ErrDaemonGone is returned (wrapping rocev2.ErrLinkClosed, so a RoCEv2
// endpoint stops receiving) by a relay link whose daemon end has closed.
var ErrDaemonGone = errors.New("steer: the daemon closed the relay")

func putRelayHdr(h *[relayHdrLen]byte, from netip.AddrPort) {
	*h = [relayHdrLen]byte{}
	a := from.Addr().As16()
	copy(h[:16], a[:])
	binary.BigEndian.PutUint16(h[16:], from.Port())
}

func relayHdrAddr(h *[relayHdrLen]byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(h[:16])).Unmap(), binary.BigEndian.Uint16(h[16:]))
}

// relayOut is the daemon's end of one process's relay socket (a unix
// SOCK_SEQPACKET pair: messages keep their boundaries, and each end sees
// the other close) with one batch of datagrams being queued for sendmmsg.
type relayOut struct {
	fd   int
	hdr  [][relayHdrLen]byte
	iov  []unix.Iovec
	msgs []unix.Mmsghdr
	n    int
}

// newRelayOut creates the socketpair: the daemon keeps the relayOut and
// passes the returned file (the process's end) on.
func newRelayOut(sndbuf, batch int) (*relayOut, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("steer: relay socketpair: %w", err)
	}
	// The daemon may raise the bound beyond wmem_max when it has
	// CAP_NET_ADMIN; otherwise the kernel caps SO_SNDBUF.
	if unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf) != nil {
		_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
	}
	o := &relayOut{
		fd:   fds[0],
		hdr:  make([][relayHdrLen]byte, batch),
		iov:  make([]unix.Iovec, 2*batch),
		msgs: make([]unix.Mmsghdr, batch),
	}
	return o, os.NewFile(uintptr(fds[1]), "relay"), nil
}

// queue adds one datagram to the batch, flushing a full batch first. It
// reports how many datagrams were sent and dropped by that flush.
func (o *relayOut) queue(b []byte, from netip.AddrPort) (sent, dropped int) {
	if o.n == len(o.msgs) {
		sent, dropped = o.flush()
	}
	i := o.n
	putRelayHdr(&o.hdr[i], from)
	o.iov[2*i].Base = &o.hdr[i][0]
	o.iov[2*i].SetLen(relayHdrLen)
	o.iov[2*i+1].Base = unsafe.SliceData(b)
	o.iov[2*i+1].SetLen(len(b))
	o.msgs[i] = unix.Mmsghdr{}
	o.msgs[i].Hdr.Iov = &o.iov[2*i]
	o.msgs[i].Hdr.SetIovlen(2)
	o.n++
	return sent, dropped
}

// flush sends the queued batch without blocking: a process whose queue is
// full (EAGAIN) or that is gone (EPIPE, ECONNREFUSED) loses the rest of the
// batch, as a NIC drops when its receive ring is full.
func (o *relayOut) flush() (sent, dropped int) {
	msgs := o.msgs[:o.n]
	o.n = 0
	for len(msgs) > 0 {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(o.fd), uintptr(unsafe.Pointer(&msgs[0])),
			uintptr(len(msgs)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, 0, 0)
		switch e {
		case 0:
			sent += int(r)
			msgs = msgs[r:]
		case unix.EINTR:
		case unix.EAGAIN, unix.EPIPE, unix.ECONNREFUSED, unix.ECONNRESET, unix.ENOTCONN:
			return sent, dropped + len(msgs)
		default: // a datagram the socket refuses (EMSGSIZE): skip it
			dropped++
			msgs = msgs[1:]
		}
	}
	return sent, dropped
}

func (o *relayOut) close() {
	if o.fd >= 0 {
		unix.Close(o.fd)
		o.fd = -1
	}
}

// relayIn is the daemon's link in ModeRelay: it receives every datagram on
// the group's address, forwards the processes' ones and returns the rest.
type relayIn struct {
	s       *Steerer
	udp     rocev2.Link // the Steerer's src
	to      []Slot      // destination of each datagram of the batch being routed
	touched []*relayOut
}

func newRelayIn(s *Steerer) *relayIn {
	return &relayIn{s: s, udp: s.src, touched: make([]*relayOut, 0, s.cfg.MaxProcs)}
}

func (r *relayIn) Send(bufs [][]byte, dst netip.AddrPort) error { return r.udp.Send(bufs, dst) }
func (r *relayIn) LocalAddr() netip.AddrPort                    { return r.udp.LocalAddr() }
func (r *relayIn) BatchSize() int                               { return r.udp.BatchSize() }
func (r *relayIn) Close() error                                 { return r.udp.Close() }

// Recv returns the datagrams for the daemon (QP1, unmapped QPNs), after
// forwarding those of the processes; it waits until there is at least one
// for the daemon.
func (r *relayIn) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	for {
		n, err := r.udp.Recv(bufs, sizes, from)
		if err != nil || n == 0 {
			return n, err
		}
		if own := r.route(bufs, sizes, from, n); own > 0 {
			return own, nil
		}
	}
}

// route forwards the processes' datagrams of bufs[:n] and moves the
// daemon's to the front, returning how many those are.
func (r *relayIn) route(bufs [][]byte, sizes []int, from []netip.AddrPort, n int) int {
	s := r.s
	if cap(r.to) < n {
		r.to = make([]Slot, n)
	}
	r.to = r.to[:n]
	var sent, dropped int
	s.mu.RLock()
	for i := range n {
		b := bufs[i][:sizes[i]]
		r.to[i] = DaemonSlot
		if len(b) < 8 {
			s.short.Add(1)
			continue
		}
		slot, ok := s.qpns[roce.BTH(b).DestQP()]
		if !ok {
			s.dflt.Add(1)
			continue
		}
		m := s.slots[slot]
		if m == nil || m.relay == nil {
			s.fallbackN.Add(1)
			continue
		}
		r.to[i] = slot
		if m.relay.n == 0 {
			r.touched = append(r.touched, m.relay)
		}
		a, d := m.relay.queue(b, from[i])
		sent, dropped = sent+a, dropped+d
	}
	for _, o := range r.touched {
		a, d := o.flush()
		sent, dropped = sent+a, dropped+d
	}
	r.touched = r.touched[:0]
	s.mu.RUnlock()
	if sent > 0 {
		s.steered.Add(uint64(sent))
	}
	if dropped > 0 {
		s.relayDropped.Add(uint64(dropped))
	}
	// The forwarded datagrams are in the kernel now: their buffers are free.
	own := 0
	for i := range n {
		if r.to[i] != DaemonSlot {
			continue
		}
		if own != i {
			sizes[own] = copy(bufs[own][:cap(bufs[own])], bufs[i][:sizes[i]])
			from[own] = from[i]
		}
		own++
	}
	return own
}

// RelayLink is a process's rocev2.Link in ModeRelay: it receives what the
// daemon relays over the process's end of the relay socket, and sends from
// its own UDP socket on the group's IP and an ephemeral port (LocalAddr).
type RelayLink struct {
	conn  *net.UnixConn
	rc    syscall.RawConn
	out   *rocev2.UDPLink
	batch int

	hdr  [][relayHdrLen]byte
	iov  []unix.Iovec
	msgs []unix.Mmsghdr

	recvAt     netip.AddrPort // the device's address peers send to (RecvAddr)
	recvFn     func(fd uintptr) bool
	rN, rGot   int
	rErr       unix.Errno
	daemonGone bool
}

// NewRelayLink makes a relay link of the process's end of the relay socket
// and its UDP send socket, as the daemon passed them (Join calls it). The
// link works on duplicates of the descriptors: the caller closes the files.
func NewRelayLink(relay, udp *os.File, o *rocev2.UDPOptions) (*RelayLink, error) {
	fc, err := net.FileConn(relay)
	if err != nil {
		return nil, fmt.Errorf("steer: relay socket: %w", err)
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("steer: relay socket is a %T, not a unix socket", fc)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	out, err := rocev2.NewUDPLinkFile(udp, o)
	if err != nil {
		conn.Close()
		return nil, err
	}
	b := out.BatchSize()
	l := &RelayLink{conn: conn, rc: rc, out: out, batch: b,
		hdr: make([][relayHdrLen]byte, b), iov: make([]unix.Iovec, 2*b), msgs: make([]unix.Mmsghdr, b)}
	l.recvFn = l.doRecv
	return l, nil
}

// Send implements rocev2.Link: straight out of the process's UDP socket.
func (l *RelayLink) Send(bufs [][]byte, dst netip.AddrPort) error { return l.out.Send(bufs, dst) }

// LocalAddr implements rocev2.Link: the send socket's address (the group's
// IP, an ephemeral port), which the ICRC of outgoing packets covers.
func (l *RelayLink) LocalAddr() netip.AddrPort { return l.out.LocalAddr() }

// BatchSize implements rocev2.Link.
func (l *RelayLink) BatchSize() int { return l.batch }

// Pending implements rocev2.PendingLink: a relayed datagram waits (SIOCINQ).
func (l *RelayLink) Pending() bool {
	n := 0
	_ = l.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// SetRecvAddr names the device's address (the group's IP and port), which peers send
// to and the ICRC of a relayed packet covers; the process learns it from the daemon.
// Call it before the link is used.
func (l *RelayLink) SetRecvAddr(a netip.AddrPort) { l.recvAt = a }

// RecvAddr implements rocev2.RecvAddrLink: the address of SetRecvAddr, else LocalAddr.
func (l *RelayLink) RecvAddr() netip.AddrPort {
	if l.recvAt.IsValid() {
		return l.recvAt
	}
	return l.LocalAddr()
}

// Close implements rocev2.Link.
func (l *RelayLink) Close() error {
	err := l.conn.Close()
	if e := l.out.Close(); err == nil {
		err = e
	}
	return err
}

// Recv implements rocev2.Link: one recvmmsg scatters each relayed
// datagram's header into the link's header buffer and its payload straight
// into bufs[i].
func (l *RelayLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	for {
		n := min(len(bufs), l.batch)
		for i := range n {
			l.iov[2*i].Base = &l.hdr[i][0]
			l.iov[2*i].SetLen(relayHdrLen)
			l.iov[2*i+1].Base = unsafe.SliceData(bufs[i][:cap(bufs[i])])
			l.iov[2*i+1].SetLen(cap(bufs[i]))
			l.msgs[i] = unix.Mmsghdr{}
			l.msgs[i].Hdr.Iov = &l.iov[2*i]
			l.msgs[i].Hdr.SetIovlen(2)
		}
		l.rN = n
		if err := l.rc.Read(l.recvFn); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0, rocev2.ErrLinkClosed
			}
			return 0, err
		}
		if l.rGot < 0 {
			return 0, fmt.Errorf("steer: relay recvmmsg: %w", l.rErr)
		}
		got := 0
		for i := range l.rGot {
			ln := int(l.msgs[i].Len)
			if ln == 0 { // SOCK_SEQPACKET end of file: the daemon closed its end
				l.daemonGone = true
				break
			}
			if ln < relayHdrLen {
				continue
			}
			if got != i {
				copy(bufs[got][:cap(bufs[got])], bufs[i][:ln-relayHdrLen])
				l.hdr[got] = l.hdr[i]
			}
			sizes[got] = ln - relayHdrLen
			from[got] = relayHdrAddr(&l.hdr[got])
			got++
		}
		if got > 0 {
			return got, nil
		}
		if l.daemonGone {
			return 0, fmt.Errorf("%w: %w", rocev2.ErrLinkClosed, ErrDaemonGone)
		}
	}
}

func (l *RelayLink) doRecv(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&l.msgs[0])), uintptr(l.rN), 0, 0, 0)
		switch e {
		case 0:
			l.rGot = int(r)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			l.rGot, l.rErr = -1, e
			return true
		}
	}
}
