//go:build linux

package afxdp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
)

func ipv4Frame(dst [4]byte, proto uint8, frag uint16, l4 []byte) []byte {
	f := make([]byte, 14+20, 14+20+len(l4))
	binary.BigEndian.PutUint16(f[12:], etherIPv4)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8], ip[9] = 64, proto
	copy(ip[12:16], []byte{10, 0, 0, 2})
	copy(ip[16:20], dst[:])
	return append(f, l4...)
}

func TestParseL3(t *testing.T) {
	local := netip.MustParseAddr("10.0.0.1")
	udp := []byte{0x12, 0x34, 0x12, 0xB7, 0, 8, 0, 0}
	good := ipv4Frame(local.As4(), ProtoUDP, 0x4000, udp)
	if proto, l4, ok := parseL3(good, local); !ok || proto != ProtoUDP || l4 != 34 {
		t.Fatalf("good frame: %d %d %v", proto, l4, ok)
	}
	for name, f := range map[string][]byte{
		"fragment":    ipv4Frame(local.As4(), ProtoUDP, 0x2000, udp),
		"frag offset": ipv4Frame(local.As4(), ProtoUDP, 0x0001, udp),
		"other dst":   ipv4Frame([4]byte{10, 0, 0, 9}, ProtoUDP, 0, udp),
	} {
		if _, _, ok := parseL3(f, local); ok {
			t.Errorf("%s accepted", name)
		}
	}
	if _, _, ok := parseL3(good, netip.MustParseAddr("fd00::1")); ok {
		t.Error("IPv4 frame accepted by an IPv6 port")
	}
	for i := range len(good) - len(udp) {
		if _, _, ok := parseL3(good[:i], local); ok {
			t.Errorf("prefix %d accepted", i)
		}
	}
}

// counter is a Receiver that counts frames and keeps them if asked.
type counter struct {
	mu     sync.Mutex
	frames []RxFrame
	n      int
	keep   bool
	got    chan struct{}
}

func (c *counter) Frame(f RxFrame) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.keep {
		c.frames = append(c.frames, f)
	}
	return c.keep
}

func (c *counter) EndBatch() {
	select {
	case c.got <- struct{}{}:
	default:
	}
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestSteer: a steered UDP port reaches the receiver and not the kernel's
// socket on it; unsteered, the kernel's socket gets it again.
func TestSteer(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	var p *Port
	var ks *net.UDPConn
	dst := netip.AddrPortFrom(e.Addr[0], 5000)
	netnstest.In(t, e.NS[0], func() {
		var err error
		if p, err = Open(Options{Interface: e.Dev[0], Addr: e.Addr[0]}); err != nil {
			t.Fatal(err)
		}
		if ks, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)); err != nil {
			t.Fatal(err)
		}
	})
	defer p.Close()
	defer ks.Close()
	var src *net.UDPConn
	netnstest.In(t, e.NS[1], func() {
		var err error
		if src, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst)); err != nil {
			t.Fatal(err)
		}
	})
	defer src.Close()
	kernelGets := func() bool {
		_ = ks.SetReadDeadline(time.Now().Add(2 * time.Second))
		b := make([]byte, 64)
		n, err := ks.Read(b)
		return err == nil && string(b[:n]) == "x"
	}
	// not steered: the kernel (ARP passes too, or nothing would arrive)
	if _, err := src.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !kernelGets() {
		t.Fatal("unsteered datagram did not reach the kernel socket")
	}
	c := &counter{got: make(chan struct{}, 1)}
	if err := p.Steer(ProtoUDP, 5000, c); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.got:
	case <-time.After(5 * time.Second):
		t.Fatalf("steered datagram did not reach the receiver: %+v", p.Stats())
	}
	if c.count() != 1 {
		t.Fatalf("receiver got %d frames", c.count())
	}
	p.Unsteer(ProtoUDP, 5000)
	if _, err := src.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !kernelGets() {
		t.Fatal("after Unsteer the datagram did not reach the kernel socket")
	}
	if c.count() != 1 {
		t.Fatalf("receiver got %d frames after Unsteer", c.count())
	}
}

// TestKeepLimit: a receiver that keeps every frame and releases none gets
// at most KeepLimit of them; the rest are dropped and counted, and after
// it releases them frames flow again.
func TestKeepLimit(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	var p *Port
	netnstest.In(t, e.NS[0], func() {
		var err error
		if p, err = Open(Options{Interface: e.Dev[0], Addr: e.Addr[0], Frames: 256}); err != nil {
			t.Fatal(err)
		}
	})
	defer p.Close()
	c := &counter{keep: true, got: make(chan struct{}, 1)}
	if err := p.Steer(ProtoUDP, 5001, c); err != nil {
		t.Fatal(err)
	}
	var src *net.UDPConn
	netnstest.In(t, e.NS[1], func() {
		var err error
		if src, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(e.Addr[0], 5001))); err != nil {
			t.Fatal(err)
		}
	})
	defer src.Close()
	limit := p.KeepLimit()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().RxDropped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing dropped: %+v, kept %d of limit %d", p.Stats(), c.count(), limit)
		}
		_, _ = src.Write([]byte("y"))
		time.Sleep(time.Millisecond) // pace below the ring size
	}
	c.mu.Lock()
	kept := len(c.frames)
	for _, f := range c.frames {
		p.Release(f)
	}
	c.frames = nil
	c.keep = false
	c.mu.Unlock()
	if kept != limit {
		t.Fatalf("kept %d frames, limit %d", kept, limit)
	}
	before := c.count()
	_, _ = src.Write([]byte("z"))
	deadline = time.Now().Add(5 * time.Second)
	for c.count() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no frame after the release: %+v", p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}
