//go:build linux

package steer

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// newSteerer starts a Steerer on addr (port 0) in mode; ModeBPF skips,
// loudly, only when the kernel refuses BPF for lack of privilege or support.
func newSteerer(tb testing.TB, addr string, mode Mode, cfg Config) *Steerer {
	tb.Helper()
	cfg.Addr = netip.AddrPortFrom(netip.MustParseAddr(addr), 0)
	cfg.Mode = mode
	s, err := New(cfg)
	if err != nil {
		if mode == ModeBPF && (errors.Is(err, unix.EPERM) || errors.Is(err, ebpf.ErrNotSupported)) {
			tb.Skipf("SKIP (privileged): SK_REUSEPORT steering needs CAP_BPF and kernel support: %v", err)
		}
		if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EAFNOSUPPORT) {
			tb.Skipf("SKIP: no %s on this host: %v", addr, err)
		}
		tb.Fatal(err)
	}
	if s.Mode() != mode {
		tb.Fatalf("mode %v, want %v", s.Mode(), mode)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// attach does what the daemon and a process do: Add, pass the descriptors
// over a unix socket with SendFiles, receive them with RecvFiles and Join.
func attach(tb testing.TB, s *Steerer) (Slot, rocev2.Link) {
	tb.Helper()
	slot, files, err := s.Add()
	if err != nil {
		tb.Fatal(err)
	}
	dc, pc := unixPair(tb, unix.SOCK_SEQPACKET)
	defer dc.Close()
	defer pc.Close()
	if err := SendFiles(dc, []byte("grant"), files...); err != nil {
		tb.Fatal(err)
	}
	for _, f := range files {
		f.Close() // the daemon keeps no copy
	}
	msg := make([]byte, 16)
	n, got, err := RecvFiles(pc, msg)
	if err != nil || string(msg[:n]) != "grant" || len(got) != len(files) {
		tb.Fatalf("RecvFiles: %q, %d files, %v", msg[:n], len(got), err)
	}
	l, err := Join(got, nil)
	for _, f := range got {
		f.Close()
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return slot, l
}

// unixPair returns both ends of a unix socketpair of type typ.
func unixPair(tb testing.TB, typ int) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
	}
	return cs[0], cs[1]
}

// packet returns a RoCEv2 UDP payload: a BTH for qpn (byte 4, the
// FECN/BECN/reserved byte, all ones, which steering must ignore) and an
// 8-byte tag.
func packet(qpn uint32, tag uint64) []byte {
	b := make([]byte, roce.BTHLen+8)
	bth := roce.BTH(b)
	bth.SetOpcode(roce.Opcode(0x04)) // RC SEND Only
	bth.SetPKey(0xFFFF)
	b[4] = 0xFF
	bth.SetDestQP(qpn)
	binary.BigEndian.PutUint64(b[roce.BTHLen:], tag)
	return b
}

// arrival is one datagram a link received.
type arrival struct {
	who  string
	tag  uint64
	size int
	from netip.AddrPort
}

// collect receives on l until it is closed and reports every datagram on ch.
func collect(l rocev2.Link, who string, ch chan<- arrival) {
	bufs := make([][]byte, l.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, rocev2.MaxPacket)
	}
	sizes := make([]int, len(bufs))
	from := make([]netip.AddrPort, len(bufs))
	for {
		n, err := l.Recv(bufs, sizes, from)
		if err != nil {
			return
		}
		for i := range n {
			a := arrival{who: who, size: sizes[i], from: from[i]}
			if sizes[i] >= roce.BTHLen+8 {
				a.tag = binary.BigEndian.Uint64(bufs[i][roce.BTHLen:])
			}
			ch <- a
		}
	}
}

// expect waits for one arrival and checks it.
func expect(tb testing.TB, ch <-chan arrival, who string, tag uint64, from netip.AddrPort) {
	tb.Helper()
	select {
	case a := <-ch:
		if a.who != who || a.tag != tag || a.from != from {
			tb.Fatalf("got tag %#x at %s from %v, want tag %#x at %s from %v", a.tag, a.who, a.from, tag, who, from)
		}
	case <-time.After(5 * time.Second):
		tb.Fatalf("tag %#x for %s did not arrive", tag, who)
	}
}

// sender is a plain UDP socket standing for a remote RoCEv2 peer.
type sender struct {
	c *net.UDPConn
}

func newSender(tb testing.TB, ip string) *sender {
	tb.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &sender{c: c}
}

func (s *sender) addr() netip.AddrPort {
	a := s.c.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

func (s *sender) send(tb testing.TB, to netip.AddrPort, b []byte) {
	tb.Helper()
	if _, err := s.c.WriteToUDPAddrPort(b, to); err != nil {
		tb.Fatal(err)
	}
}
