//go:build linux

package netstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/safchain/ethtool"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"golang.org/x/sys/unix"
)

// lossy drops a fraction of frames with a seeded generator (tests only).
type lossy struct {
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
}

func newLossy(seed uint64, rate float64) *lossy {
	return &lossy{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rate: rate}
}

func (l *lossy) drop([]byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < l.rate
}

type rig struct {
	env  *netnstest.Env
	port *afxdp.Port
	st   *Stack
}

// newRig opens a port and a stack on side 0 of a fresh veth pair (MTU
// 1500); side 1 is the kernel's. loss (0..1) is dropped in each direction at
// the port.
func newRig(t testing.TB, loss float64, v6 bool) *rig {
	return newRigWith(t, rigOpts{mtu: 1500, loss: loss, v6: v6})
}

type rigOpts struct {
	mtu  int
	loss float64
	v6   bool
	port func(*afxdp.Options)
}

func newRigWith(t testing.TB, ro rigOpts) *rig {
	t.Helper()
	loss, v6 := ro.loss, ro.v6
	netnstest.RequirePriv(t)
	e := netnstest.New(t, ro.mtu, 1)
	r := &rig{env: e}
	addr := e.Addr[0]
	if v6 {
		addr = e.Addr6[0]
	}
	// The kernel peer keeps tx-checksumming on (veth's default): its segments
	// arrive with partial TCP checksums, which the stack completes (see the
	// package comment). GRO on, as a NIC has it.
	netnstest.In(t, e.NS[1], func() {
		et, err := ethtool.NewEthtool()
		if err != nil {
			t.Fatal(err)
		}
		defer et.Close()
		if err := et.Change(e.Dev[1], map[string]bool{"rx-gro": true}); err != nil {
			t.Fatalf("ethtool -K %s gro on: %v", e.Dev[1], err)
		}
	})
	o := afxdp.Options{Interface: e.Dev[0], Addr: addr}
	if loss > 0 {
		o.DropRx = newLossy(1, loss).drop
		o.DropTx = newLossy(2, loss).drop
	}
	if ro.port != nil {
		ro.port(&o)
	}
	netnstest.In(t, e.NS[0], func() {
		var err error
		if r.port, err = afxdp.Open(o); err != nil {
			t.Fatal(err)
		}
	})
	st, err := New(r.port, &Config{TimeWait: 100 * time.Millisecond})
	if err != nil {
		r.port.Close()
		t.Fatal(err)
	}
	r.st = st
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("port %+v", r.port.Stats())
			t.Logf("stack %+v", r.st.Stats())
		}
		_ = r.st.Close()
		_ = r.port.Close()
	})
	return r
}

// peer returns the kernel side's address of the rig's family.
func (r *rig) peer(v6 bool) netip.Addr {
	if v6 {
		return r.env.Addr6[1]
	}
	return r.env.Addr[1]
}

// kernelListen listens with kernel TCP in namespace 1.
func (r *rig) kernelListen(t testing.TB, v6 bool) net.Listener {
	t.Helper()
	var l net.Listener
	netnstest.In(t, r.env.NS[1], func() {
		var err error
		if l, err = net.Listen("tcp", netip.AddrPortFrom(r.peer(v6), 0).String()); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { l.Close() })
	return l
}

// kernelDial dials with kernel TCP from namespace 1.
func (r *rig) kernelDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	netnstest.In(t, r.env.NS[1], func() {
		var err error
		if c, err = net.DialTimeout("tcp", addr, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	return c
}

// echo serves one connection of l: it copies what it reads back.
func echo(l net.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		done <- err
	}()
	return done
}

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// roundTrip writes msg on c while reading as many bytes back, and compares.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		werr <- err
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echoed bytes differ")
	}
}

// TestEcho: 1 MiB echoed through a kernel TCP echo server (userspace
// dials) and through a userspace echo server (the kernel dials).
func TestEcho(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			r := newRig(t, 0, v6)
			msg := pattern(1<<20, 1)

			kl := r.kernelListen(t, v6)
			done := echo(kl)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c, msg)
			c.Close()
			if err := <-done; err != nil {
				t.Fatalf("kernel echo: %v", err)
			}

			ul, err := r.st.Listen("tcp", ":0")
			if err != nil {
				t.Fatal(err)
			}
			done = echo(ul)
			kc := r.kernelDial(t, ul.Addr().String())
			roundTrip(t, kc, msg)
			kc.Close()
			if err := <-done; err != nil {
				t.Fatalf("userspace echo: %v", err)
			}
			ul.Close()
			waitReservations(t, r.st, 0)
			// the kernel peer's checksums arrive partial (tx-checksumming on)
			if s := r.st.Stats(); s.ChecksumErrors != 0 || s.PartialChecksums == 0 {
				t.Errorf("checksum errors or no partial checksums completed: %+v", s)
			}
			// software TSO: the link cut gVisor's GSO packets into more frames
			if ps, ss := r.port.Stats(), r.st.Stats(); ps.TxPackets <= ss.SegmentsSent {
				t.Errorf("%d frames sent for %d gVisor segments: no GSO", ps.TxPackets, ss.SegmentsSent)
			}
		})
	}
}

// waitReservations waits until the stack holds n ports (after TIME-WAIT).
func waitReservations(t *testing.T, st *Stack, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.Stats().Reservations != n {
		if time.Now().After(deadline) {
			t.Fatalf("reservations %d, want %d", st.Stats().Reservations, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bulk sends n bytes one way from w to the reader side and checks them.
func bulk(t *testing.T, w, rd net.Conn, n int) {
	t.Helper()
	msg := pattern(n, uint64(n))
	want := sha256.Sum256(msg)
	_ = w.SetDeadline(time.Now().Add(120 * time.Second))
	_ = rd.SetDeadline(time.Now().Add(120 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := w.Write(msg)
		if err == nil {
			err = w.Close()
		}
		werr <- err
	}()
	h := sha256.New()
	got, err := io.Copy(h, rd)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if got != int64(n) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("received %d bytes, want %d; digest equal %v", got, n, bytes.Equal(h.Sum(nil), want[:]))
	}
}

// TestBulkLoss moves 1 MiB each way between the userspace stack and kernel
// TCP with 1% of frames dropped in each direction at the AF_XDP port (the
// host has no sch_netem): TCP must recover.
func TestBulkLoss(t *testing.T) {
	r := newRig(t, 0.01, false)
	kl := r.kernelListen(t, false)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := kl.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c net.Conn
	var err error
	// SYNs are dropped too: dial until one gets through
	for c == nil {
		c, err = r.st.DialContext(ctx, "tcp", kl.Addr().String())
		if err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	kc := <-accepted
	if kc == nil {
		t.Fatal("kernel accept failed")
	}
	bulk(t, c, kc, 1<<20) // userspace → kernel
	kc.Close()

	ul, err := r.st.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ul.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	kc = r.kernelDial(t, ul.Addr().String())
	uc := <-acc
	if uc == nil {
		t.Fatal("userspace accept failed")
	}
	bulk(t, kc, uc, 1<<20) // kernel → userspace
	uc.Close()
	ps, ss := r.port.Stats(), r.st.Stats()
	t.Logf("port %+v", ps)
	t.Logf("stack %+v", ss)
	if ps.RxInjectedDrops == 0 || ps.TxInjectedDrops == 0 {
		t.Fatalf("no loss was injected: %+v", ps)
	}
	if ss.Retransmits == 0 {
		t.Fatalf("no retransmission with 1%% loss: %+v", ss)
	}
}

// TestErrors: what the hooks refuse.
func TestErrors(t *testing.T) {
	r := newRig(t, 0, false)
	ctx := context.Background()
	for _, a := range []string{"localhost:80", "10.199.9.2", "[fd00::1]:80"} {
		if _, err := r.st.DialContext(ctx, "tcp", a); err == nil {
			t.Errorf("dial %q succeeded", a)
		}
	}
	if _, err := r.st.DialContext(ctx, "udp", "10.199.9.2:80"); err == nil {
		t.Error("udp dial succeeded")
	}
	if _, err := r.st.Listen("tcp", "10.199.9.2:0"); err == nil {
		t.Error("listen on the peer's address succeeded")
	}
	l, err := r.st.Listen("tcp", "10.199.9.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// the port is the kernel's too: the kernel cannot bind it
	var kerr error
	netnstest.In(t, r.env.NS[0], func() {
		var kl net.Listener
		kl, kerr = net.Listen("tcp", l.Addr().String())
		if kerr == nil {
			kl.Close()
		}
	})
	if kerr == nil {
		t.Error("the kernel could bind a port the stack holds")
	}
	// nobody listens: the kernel peer answers RST
	kl := r.kernelListen(t, false)
	addr := kl.Addr().String()
	kl.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.st.DialContext(cctx, "tcp", addr); !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("dial to a closed port: %v, want connection refused", err)
	}
	waitReservations(t, r.st, 1)
}

// TestMultiBuffer: packets longer than a receive buffer (3840 bytes in copy mode) arrive
// in several buffers and are handed over whole (XDP multi-buffer, the default):
//
//   - jumbo: on a veth of MTU 9000 the stack's MTU is the netdev's, and its segments
//     and the kernel peer's need three buffers each way;
//   - generic: in generic XDP mode (the kernel does not turn off a veth peer's GSO, as
//     it does for driver-mode XDP; a tap's writer, QEMU, sends GSO packets anyway) the
//     kernel peer's TCP super-packets of up to 64 KiB reach the socket unsegmented.
//
// 1 MiB echoes both ways; nothing is dropped.
func TestMultiBuffer(t *testing.T) {
	for _, tc := range []struct {
		name string
		mtu  int
		mode afxdp.Mode
	}{{"jumbo", 9000, afxdp.ModeDriver}, {"generic", 1500, afxdp.ModeGeneric}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRigWith(t, rigOpts{mtu: tc.mtu, port: func(o *afxdp.Options) { o.Mode = tc.mode }})
			if !r.port.MultiBuffer() || r.port.Mode() != tc.mode || r.port.MaxRxFrame() != 14+tc.mtu || r.port.MaxFrame() != 14+tc.mtu {
				t.Fatalf("multi-buffer %v, mode %v, MaxRxFrame %d, MaxFrame %d", r.port.MultiBuffer(), r.port.Mode(), r.port.MaxRxFrame(), r.port.MaxFrame())
			}
			msg := pattern(1<<20, 5)
			kl := r.kernelListen(t, false)
			done := echo(kl)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c, msg)
			c.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			ps, ss := r.port.Stats(), r.st.Stats()
			t.Logf("port %+v", ps)
			t.Logf("stack %+v", ss)
			if ps.RxMultiBuffer == 0 || ps.KernelRxDropped != 0 || ps.RxTooLong != 0 || tc.mtu > 4000 && ps.TxMultiBuffer == 0 {
				t.Fatalf("port %+v, stack %+v", ps, ss)
			}
		})
	}
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

// TestTxChecksum: the stack leaves TCP checksums partial and the port has them
// completed — through TX metadata (Linux 6.11+, copy mode: the kernel's skb is
// CHECKSUM_PARTIAL), else in software. With the AF_XDP side's veth not offloading
// checksums, the kernel completes them before the wire, so a packet socket on the
// peer sees every segment from the stack with a valid TCP checksum.
func TestTxChecksum(t *testing.T) {
	r := newRig(t, 0, false)
	if want := kernelAtLeast(6, 11); r.port.TxChecksum() != want {
		t.Fatalf("TxChecksum %v on a kernel with TX metadata %v", r.port.TxChecksum(), want)
	}
	netnstest.In(t, r.env.NS[0], func() {
		et, err := ethtool.NewEthtool()
		if err != nil {
			t.Fatal(err)
		}
		defer et.Close()
		if err := et.Change(r.env.Dev[0], map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
			t.Fatal(err)
		}
	})
	var ps int
	netnstest.In(t, r.env.NS[1], func() {
		var err error
		if ps, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP))); err != nil {
			t.Fatal(err)
		}
		ifi, err := net.InterfaceByName(r.env.Dev[1])
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(ps, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
			t.Fatal(err)
		}
	})
	defer unix.Close(ps)
	_ = unix.SetsockoptInt(ps, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	_ = unix.SetsockoptTimeval(ps, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000}) // the reader ends 200 ms after the last frame
	good, bad := make(chan int, 1), make(chan int, 1)
	go func() {
		g, b := 0, 0
		buf := make([]byte, 65536)
		for {
			n, _, err := unix.Recvfrom(ps, buf, 0)
			if err != nil {
				break
			}
			ip := buf[:n] // SOCK_RAW on AF_PACKET: from the Ethernet header
			if n < 14+40 || ip[14+9] != 6 || netip.AddrFrom4([4]byte(ip[14+12:14+16])) != r.env.Addr[0] {
				continue
			}
			if verifyTCP(ip[14:], 20) == csumOK {
				g++
			} else {
				b++
			}
		}
		good <- g
		bad <- b
	}()
	kl := r.kernelListen(t, false)
	done := echo(kl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, pattern(256<<10, 9))
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g, b := <-good, <-bad
	t.Logf("TX metadata %v: %d segments with a valid checksum, %d without", r.port.TxChecksum(), g, b)
	// (the packet socket may drop some of a burst; every one it sees counts)
	if g < 20 || b != 0 {
		t.Fatalf("%d valid, %d invalid TCP checksums", g, b)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
