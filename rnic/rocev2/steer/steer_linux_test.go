//go:build linux

package steer

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

var modes = []struct {
	name string
	ip   string
	mode Mode
}{
	{"bpf/ipv4", "127.0.0.1", ModeBPF},
	{"bpf/ipv6", "::1", ModeBPF},
	{"relay/ipv4", "127.0.0.1", ModeRelay},
	{"relay/ipv6", "::1", ModeRelay},
}

func TestSteer(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { testSteer(t, m.ip, m.mode) })
	}
}

// testSteer runs three processes' links (in this test process) beside the
// daemon's and checks where each QPN lands as the map changes.
func testSteer(t *testing.T, ip string, mode Mode) {
	s := newSteerer(t, ip, mode, Config{})
	ch := make(chan arrival, 64)
	go collect(s.Link(), "daemon", ch)
	slots := map[string]Slot{}
	links := map[string]rocev2.Link{}
	for _, name := range []string{"p1", "p2", "p3"} {
		slots[name], links[name] = attach(t, s)
		go collect(links[name], name, ch)
	}
	for _, m := range []struct {
		who   string
		first uint32
		n     int
	}{{"p1", 0x100, 16}, {"p2", 0x200, 1}, {"p3", 0xFFFFF0, 16}} {
		if err := s.Map(slots[m.who], m.first, m.n); err != nil {
			t.Fatal(err)
		}
	}
	snd := newSender(t, ip)
	to, from := s.LocalAddr(), snd.addr()
	var tag uint64
	check := func(qpn uint32, who string) {
		t.Helper()
		tag++
		snd.send(t, to, packet(qpn, tag))
		expect(t, ch, who, tag, from)
	}
	stats := func(want Stats) {
		t.Helper()
		got, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("stats %+v, want %+v", got, want)
		}
	}

	check(0x100, "p1")
	check(0x10F, "p1")
	check(0x200, "p2")
	check(0xFFFFF0, "p3")
	check(0xFFFFFF, "p3")
	check(1, "daemon") // QP1: the CM's MADs
	check(0x110, "daemon")
	check(0x1FF, "daemon")
	snd.send(t, to, []byte{0x04, 0, 0xFF, 0xFF}) // too short for a DestQP
	select {
	case a := <-ch:
		if a.who != "daemon" || a.size != 4 || a.from != from {
			t.Fatalf("short packet: %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("short packet did not arrive")
	}
	stats(Stats{Steered: 5, Default: 3, Short: 1})

	if err := s.Unmap(0x100, 8); err != nil {
		t.Fatal(err)
	}
	check(0x100, "daemon")
	check(0x107, "daemon")
	check(0x108, "p1")

	if err := s.Remove(slots["p2"]); err != nil {
		t.Fatal(err)
	}
	if o := s.Owner(0x200); o != DaemonSlot {
		t.Fatalf("Owner(0x200) = %d after Remove", o)
	}
	check(0x200, "daemon")
	stats(Stats{Steered: 6, Default: 6, Short: 1})

	// p3 exits without telling the daemon: its socket closes.
	links["p3"].Close()
	if mode == ModeBPF {
		check(0xFFFFF5, "daemon") // the kernel dropped it from the sockarray
		stats(Stats{Steered: 6, Default: 6, Short: 1, Fallback: 1})
	} else {
		tag++
		snd.send(t, to, packet(0xFFFFF5, tag))
		waitStats(t, s, func(st Stats) bool { return st.RelayDropped == 1 })
		stats(Stats{Steered: 6, Default: 6, Short: 1, RelayDropped: 1})
	}
	check(0x10A, "p1") // the others are unaffected (and nothing stray arrived)
	if err := s.Remove(slots["p3"]); err != nil {
		t.Fatal(err)
	}
	check(0xFFFFF5, "daemon")

	// A process sends straight from its own socket: the peer sees the
	// link's LocalAddr as the source (ModeBPF: the group's address).
	l := links["p1"]
	if mode == ModeBPF && l.LocalAddr() != to {
		t.Fatalf("process link LocalAddr %v, want the group's %v", l.LocalAddr(), to)
	}
	if mode == ModeRelay && (l.LocalAddr().Addr() != to.Addr() || l.LocalAddr().Port() == to.Port()) {
		t.Fatalf("relay link LocalAddr %v, want %v and an ephemeral port", l.LocalAddr(), to.Addr())
	}
	if err := l.Send([][]byte{packet(7, 0xABC)}, from); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	snd.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, src, err := snd.c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	if src != l.LocalAddr() || n != len(packet(7, 0)) {
		t.Fatalf("peer got %d bytes from %v, want %d from %v", n, src, len(packet(7, 0)), l.LocalAddr())
	}
}

// waitStats polls the counters until ok (the relay drops asynchronously).
func waitStats(t *testing.T, s *Steerer, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v never matched", st)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSteerErrors(t *testing.T) {
	for _, m := range modes {
		if m.ip != "127.0.0.1" {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			s := newSteerer(t, m.ip, m.mode, Config{MaxProcs: 2, MaxQPNs: 100})
			a, files, err := s.Add()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				f.Close()
			}
			for _, c := range []struct {
				slot  Slot
				first uint32
				n     int
				want  error
			}{
				{a, 0, 1, ErrReservedQPN},
				{a, 1, 1, ErrReservedQPN},
				{a, 0xFFFFFF, 2, ErrReservedQPN},
				{a, 0x10, 0, ErrReservedQPN},
				{DaemonSlot, 0x10, 1, ErrNoSlot},
				{2, 0x10, 1, ErrNoSlot},
				{3, 0x10, 1, ErrNoSlot},
				{a, 0x10, 101, ErrFull},
			} {
				if err := s.Map(c.slot, c.first, c.n); !errors.Is(err, c.want) {
					t.Errorf("Map(%d, %#x, %d) = %v, want %v", c.slot, c.first, c.n, err, c.want)
				}
			}
			if err := s.Map(a, 0x10, 100); err != nil {
				t.Fatal(err)
			}
			if err := s.Map(a, 0x80, 1); !errors.Is(err, ErrFull) {
				t.Errorf("Map beyond MaxQPNs = %v", err)
			}
			if err := s.Unmap(0x70, 20); err != nil { // 0x70..0x73 mapped, the rest not
				t.Fatal(err)
			}
			if err := s.Map(a, 0x73, 1); err != nil {
				t.Fatal(err)
			}
			b, files, err := s.Add()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				f.Close()
			}
			if err := s.Map(b, 0x20, 1); !errors.Is(err, ErrQPNInUse) {
				t.Errorf("Map of a QPN of another slot = %v", err)
			}
			if _, _, err := s.Add(); !errors.Is(err, ErrFull) {
				t.Errorf("Add beyond MaxProcs = %v", err)
			}
			if err := s.Remove(a); err != nil {
				t.Fatal(err)
			}
			if err := s.Remove(a); !errors.Is(err, ErrNoSlot) {
				t.Errorf("second Remove = %v", err)
			}
			if err := s.Map(b, 0x20, 1); err != nil {
				t.Errorf("Map after the owner's Remove: %v", err)
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.MapFull != 2 {
				t.Errorf("MapFull = %d, want 2", st.MapFull)
			}
			if c, _, err := s.Add(); err != nil || c != a {
				t.Errorf("Add after Remove = %d, %v; want the freed slot %d", c, err, a)
			}
			s.Close()
			if _, _, err := s.Add(); !errors.Is(err, ErrClosed) {
				t.Errorf("Add after Close = %v", err)
			}
			if err := s.Map(b, 0x30, 1); !errors.Is(err, ErrClosed) {
				t.Errorf("Map after Close = %v", err)
			}
		})
	}
}

func TestNewRefusesWildcard(t *testing.T) {
	for _, a := range []string{"0.0.0.0:4791", "[::]:4791"} {
		if _, err := New(Config{Addr: netip.MustParseAddrPort(a), Mode: ModeRelay}); !errors.Is(err, rocev2.ErrUnspecifiedAddr) {
			t.Errorf("New(%s) = %v", a, err)
		}
	}
	if _, err := New(Config{Mode: ModeRelay}); !errors.Is(err, rocev2.ErrUnspecifiedAddr) {
		t.Errorf("New without an address = %v", err)
	}
	if s, err := New(Config{Addr: netip.MustParseAddrPort("[fe80::1%lo]:0"), Mode: ModeRelay}); err == nil {
		s.Close()
		t.Error("New with a scoped address succeeded")
	}
}

// TestSteerNonLinear sends with MSG_ZEROCOPY, which on loopback leaves the
// payload in page fragments (only the UDP header in the skb's linear data),
// so the program must copy DestQP out with bpf_skb_load_bytes instead of
// reading it in place.
func TestSteerNonLinear(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newSteerer(t, m.ip, m.mode, Config{})
			ch := make(chan arrival, 16)
			go collect(s.Link(), "daemon", ch)
			slot, l := attach(t, s)
			go collect(l, "p1", ch)
			if err := s.Map(slot, 0x123456, 1); err != nil {
				t.Fatal(err)
			}
			snd := newSender(t, m.ip)
			rc, err := snd.c.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1) })
			if serr != nil {
				t.Skipf("SKIP: no SO_ZEROCOPY for UDP on this kernel: %v", serr)
			}
			to, from := s.LocalAddr(), snd.addr()
			for i, c := range []struct {
				qpn uint32
				who string
			}{{0x123456, "p1"}, {0x123457, "daemon"}, {1, "daemon"}} {
				pk := append(packet(c.qpn, uint64(i+1)), make([]byte, 3000)...)
				var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: to.Addr().As16(), Port: int(to.Port())}
				if to.Addr().Is4() {
					sa = &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}
				}
				rc.Write(func(fd uintptr) bool {
					serr = unix.Sendmsg(int(fd), pk, nil, sa, unix.MSG_ZEROCOPY)
					return serr != unix.EAGAIN
				})
				if serr != nil {
					t.Fatal(serr)
				}
				expect(t, ch, c.who, uint64(i+1), from)
			}
		})
	}
}

// TestCloseAfterLinkClose: the daemon's engine closes its link before the
// daemon closes the Steerer; neither reports an error.
func TestCloseAfterLinkClose(t *testing.T) {
	for _, m := range modes {
		if m.ip != "127.0.0.1" {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			s := newSteerer(t, m.ip, m.mode, Config{})
			if err := s.Link().Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close after the link's Close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// TestAddressInUse: a second Steerer on the same address fails instead of
// joining (ModeBPF: and taking over) the first one's group.
func TestAddressInUse(t *testing.T) {
	for _, m := range modes {
		if m.ip != "127.0.0.1" {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			s := newSteerer(t, m.ip, m.mode, Config{})
			for _, mode := range []Mode{ModeBPF, ModeRelay, ModeAuto} {
				s2, err := New(Config{Addr: s.LocalAddr(), Mode: mode})
				if err == nil {
					s2.Close()
					t.Fatalf("second Steerer (%v) on %v started", mode, s.LocalAddr())
				}
				if !errors.Is(err, unix.EADDRINUSE) {
					t.Errorf("second Steerer (%v): %v, want EADDRINUSE", mode, err)
				}
			}
		})
	}
}
