package rocev2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

func TestAddrParseString(t *testing.T) {
	for _, c := range []struct {
		in, out string
		want    Addr
		link    string
	}{
		{"10.0.0.2:7471", "10.0.0.2:7471", Addr{IP: netip.MustParseAddr("10.0.0.2"), Port: 7471}, "10.0.0.2:4791"},
		{"10.0.0.2:7471@4792", "10.0.0.2:7471@4792", Addr{IP: netip.MustParseAddr("10.0.0.2"), Port: 7471, UDPPort: 4792}, "10.0.0.2:4792"},
		{"10.0.0.2:7471@4791", "10.0.0.2:7471", Addr{IP: netip.MustParseAddr("10.0.0.2"), Port: 7471, UDPPort: 4791}, "10.0.0.2:4791"},
		{"[fd00::2]:7471@5000", "[fd00::2]:7471@5000", Addr{IP: netip.MustParseAddr("fd00::2"), Port: 7471, UDPPort: 5000}, "[fd00::2]:5000"},
		{"[::ffff:10.0.0.3]:1", "10.0.0.3:1", Addr{IP: netip.MustParseAddr("10.0.0.3"), Port: 1}, "10.0.0.3:4791"},
	} {
		a, err := ParseAddr(c.in)
		if err != nil || a != c.want || a.String() != c.out || a.LinkAddr().String() != c.link || a.Network() != "rocev2" {
			t.Errorf("%q: %+v %v → %q link %v", c.in, a, err, a.String(), a.LinkAddr())
		}
	}
	for _, bad := range []string{"", "10.0.0.2", "host:7471", "10.0.0.2:7471@", "10.0.0.2:7471@0", "10.0.0.2:7471@70000", "10.0.0.2:x"} {
		if _, err := ParseAddr(bad); !errors.Is(err, ErrBadAddr) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestPeerLinkAddr: Annex A17.3 — a request from port 0 or 0xC000-0xFFFF (flow
// entropy, as kernel and hardware RoCEv2 send) is answered on 4791; any other port
// is a softrnic endpoint's own; Config.PeerPort overrides both.
func TestPeerLinkAddr(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.9")
	e := &Endpoint{cfg: (&Config{}).norm()}
	for _, c := range []struct{ src, want uint16 }{{0, 4791}, {0xC000, 4791}, {0xE123, 4791}, {0xFFFF, 4791}, {4791, 4791}, {4792, 4792}, {0xBFFF, 0xBFFF}} {
		if got := e.peerLinkAddr(netip.AddrPortFrom(ip, c.src)); got != netip.AddrPortFrom(ip, c.want) {
			t.Errorf("from port %#x: answered at %v, want %d", c.src, got, c.want)
		}
	}
	e.cfg.PeerPort = 6000
	if got := e.peerLinkAddr(netip.AddrPortFrom(ip, 4792)); got.Port() != 6000 {
		t.Errorf("PeerPort override: %v", got)
	}
	if got := e.dialLinkAddr(Addr{IP: ip, Port: 1}); got.Port() != 6000 {
		t.Errorf("dial with PeerPort: %v", got)
	}
	if got := e.dialLinkAddr(Addr{IP: ip, Port: 1, UDPPort: 7000}); got.Port() != 7000 {
		t.Errorf("dial with an explicit UDP port and PeerPort: %v", got)
	}
}

func TestListenUDPPorts(t *testing.T) {
	for _, p := range []uint16{0xC000, 0xD00D, 0xFFFF} {
		l, err := ListenUDP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p), nil)
		if !errors.Is(err, ErrEntropyPort) {
			if l != nil {
				l.Close()
			}
			t.Errorf("port %#x: %v", p, err)
		}
	}
	if _, err := NewMemNet().NewLink(netip.MustParseAddrPort("10.0.0.1:50000"), Faults{}); !errors.Is(err, ErrEntropyPort) {
		t.Errorf("MemNet entropy port: %v", err)
	}
	// Port 0 picks a free port below 0xC000, every time.
	var ls []*UDPLink
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range 40 {
		l, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		if p := l.LocalAddr().Port(); p == 0 || p >= roce.EntropyPortMin {
			t.Fatalf("port 0 gave %d", p)
		}
	}
	// A taken port: the cause is reachable.
	_, err := ListenUDP(ls[0].LocalAddr(), nil)
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second bind of %v: %v", ls[0].LocalAddr(), err)
	}
}

// udpEndpoint opens an endpoint on a UDP link at addr (skipping when 127.0.0.x:4791 is
// taken by another test binary: it tries other loopback addresses).
func udpEndpoint(t *testing.T, addr string) *side {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	var l *UDPLink
	var err error
	for range 20 {
		if l, err = ListenUDP(ap, nil); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 2)}), ap.Port())
	}
	if err != nil {
		t.Fatalf("no UDP link on %v: %v", addr, err)
	}
	d, _ := rnic.Open(rnic.Config{})
	s := &side{dev: d, link: nil}
	s.pd, _ = d.AllocPD()
	s.scq, _ = d.CreateCQ(256)
	s.rcq, _ = d.CreateCQ(256)
	s.ep = NewEndpoint(d, l, nil)
	t.Cleanup(func() { _ = s.ep.Close(); _ = d.Close() })
	return s
}

func (s *side) newQP(t *testing.T) *rnic.QP {
	t.Helper()
	qp, err := s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// cmExchange connects a client QP on cli to a listener on srv over the CM, dialing
// srv's address as text, sends a message each way and checks the addresses both
// ends report.
func cmExchange(t *testing.T, cli, srv *side) {
	t.Helper()
	l, err := Listen(srv.ep, ":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sqp, cqp := srv.newQP(t), cli.newQP(t)
	defer sqp.Destroy()
	defer cqp.Destroy()
	accepted := make(chan *Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
			accepted <- nil
			return
		}
		if ra := r.RemoteAddr(); ra.IP != cli.ep.LocalAddr().Addr() || ra.UDPPort != cli.ep.LocalAddr().Port() {
			t.Errorf("request from %v, client endpoint at %v", ra, cli.ep.LocalAddr())
		}
		c, err := r.Accept(sqp, ConnParam{PrivateData: []byte("srv")})
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	target := l.Addr().String() // "ip:port" or "ip:port@udp"
	cc, err := Dial(ctx, cli.ep, cqp, target, nil, ConnParam{PrivateData: []byte("cli")})
	if err != nil {
		t.Fatalf("dial %s: %v", target, err)
	}
	sc := <-accepted
	if sc == nil {
		t.FailNow()
	}
	if cc.RemoteAddr() != l.Addr() && !(cc.RemoteAddr().UDPPort == roce.UDPPort && l.Addr().UDPPort == roce.UDPPort) {
		t.Errorf("client's RemoteAddr %+v, listener %+v", cc.RemoteAddr(), l.Addr())
	}
	if sc.RemoteAddr().IP != cli.ep.LocalAddr().Addr() || sc.RemoteAddr().UDPPort != cli.ep.LocalAddr().Port() ||
		sc.RemoteAddr().Port != cc.LocalAddr().Port || sc.LocalAddr().Port != l.Port() {
		t.Errorf("server conn %v ↔ %v; client %v ↔ %v", sc.LocalAddr(), sc.RemoteAddr(), cc.LocalAddr(), cc.RemoteAddr())
	}
	for i, pair := range [][2]*side{{cli, srv}, {srv, cli}} {
		from, to := pair[0], pair[1]
		fqp, tqp := cqp, sqp
		if i == 1 {
			fqp, tqp = sqp, cqp
		}
		smr, sbuf := from.reg(t, 3000, allAccess)
		rmr, rbuf := to.reg(t, 3000, allAccess)
		fill(sbuf, byte(i+1))
		postRecv(t, tqp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 3000)}})
		post(t, fqp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 3000)}})
		if c := wait(t, to.rcq, 1)[0]; c.Status != 0 || c.ByteLen != 3000 {
			t.Fatalf("direction %d: %+v", i, c)
		}
		if c := wait(t, from.scq, 1)[0]; c.Status != 0 {
			t.Fatalf("direction %d send: %+v", i, c)
		}
		if !bytes.Equal(rbuf, sbuf) {
			t.Fatalf("direction %d: data", i)
		}
	}
	cqp.Disconnect()
	select {
	case <-sqp.Done():
	case <-ctx.Done():
		t.Fatal("server QP not disconnected")
	}
	if err := sc.Err(); !errors.Is(err, ErrPeerDisconnected) {
		t.Errorf("server conn ended with %v", err)
	}
}

// TestEndpointsOnOneIP: RoCEv2 endpoints sharing an IP, on different UDP ports,
// connect in both directions through the CM (the passive side answers where the
// REQ came from), and so do one on 4791 and one on another port.
func TestEndpointsOnOneIP(t *testing.T) {
	t.Run("two-ports", func(t *testing.T) {
		a, b := udpEndpoint(t, "127.0.0.1:0"), udpEndpoint(t, "127.0.0.1:0")
		if a.ep.LocalAddr().Port() == b.ep.LocalAddr().Port() {
			t.Fatal("same port")
		}
		cmExchange(t, a, b)
		cmExchange(t, b, a)
	})
	t.Run("4791-and-other", func(t *testing.T) {
		a := udpEndpoint(t, "127.0.0.1:4791")
		b := udpEndpoint(t, netip.AddrPortFrom(a.ep.LocalAddr().Addr(), 0).String())
		if a.ep.LocalAddr().Port() != roce.UDPPort {
			t.Fatalf("%v", a.ep.LocalAddr())
		}
		cmExchange(t, a, b)
		cmExchange(t, b, a)
	})
}

func TestZeroConfig(t *testing.T) {
	d := DefaultConfig()
	for _, c := range []*Config{nil, {}, {PeerPort: 4791}} {
		n := c.norm()
		n.PeerPort, n.Logger = 0, d.Logger
		if n != *d {
			t.Errorf("%+v normalizes to %+v, want the defaults %+v", c, n, *d)
		}
	}
	if d.Timeout != 14 || d.RetryCnt != 7 || d.RNRRetry != 7 || d.MinRNRTimer != 12 || d.MaxRdAtomic != 128 ||
		d.MaxDestRd != 128 || d.Window != 512 || d.AckEvery != 64 || d.PKey != 0xFFFF || d.MTU != roce.MTU1024 {
		t.Fatalf("defaults %+v", d)
	}
	// Explicit "none"/"infinite" values reach the wire as IBTA encodes them.
	p := (&Config{Timeout: ACKTimeoutInfinite, RetryCnt: NoRetry, RNRRetry: NoRetry, MinRNRTimer: RNRTimerLongest}).norm()
	if w := p.params(); w.Timeout != 0 || w.RetryCnt != 0 || w.RNRRetry != 0 || w.MinRNRTimer != 0 {
		t.Fatalf("explicit values %+v", w)
	}
	if n := p.norm(); n != p {
		t.Fatal("normalizing is not idempotent")
	}
	cm := (&CMConfig{}).norm()
	if cm.ResponseTimeout != 20 || cm.MaxRetries != 15 || cm.Backlog != 128 || cm.MaxConns != DefaultMaxConns ||
		cm.AcceptTimeout != DefaultAcceptTimeout || cm.FirstMessageTimeout != DefaultFirstMessageTimeout {
		t.Fatalf("CM defaults %+v", cm)
	}
	if n := (&CMConfig{MaxRetries: CMNoRetry, Backlog: Unlimited, FirstMessageTimeout: NoTimeout}).norm(); n.MaxRetries != 0 ||
		n.Backlog != Unlimited || n.FirstMessageTimeout != NoTimeout {
		t.Fatalf("explicit CM values %+v", n)
	}
}

// TestZeroConfigTimesOut: a non-nil Config with only PeerPort set (issue 9: it used
// to mean an infinite ACK timeout) gives up on a dead peer after 1+7 timeouts.
func TestZeroConfigTimesOut(t *testing.T) {
	cfg := &Config{PeerPort: 4791, Timeout: 8} // 1 ms, to keep the test short; retries default
	cli, _ := newPair(t, &pairOpts{cfg: cfg, cliF: Faults{Drop: 1}})
	smr, _ := cli.reg(t, 10, allAccess)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusRetryExcErr {
		t.Fatalf("%+v", c)
	}
	if n := cli.link.Stats().Sent; n != 8 {
		t.Fatalf("sent %d packets, want 1 + 7 retries", n)
	}
}

func TestErrorsWrap(t *testing.T) {
	rej := &RejectError{Reason: roce.RejStaleConn}
	if !errors.Is(rej, ErrRejected) || !errors.Is(rej, ErrStaleConn) || errors.Is(&RejectError{Reason: 28}, ErrStaleConn) {
		t.Fatal("RejectError")
	}
	wrapped := fmt.Errorf("dial: %w", rej)
	var re *RejectError
	if !errors.As(wrapped, &re) || re.Reason != roce.RejStaleConn {
		t.Fatal("errors.As through wrapping")
	}
	// Dial's context error is reachable.
	cli, _ := newPair(t, &pairOpts{noConnect: true, cliF: Faults{Drop: 1}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Dial(ctx, cli.ep, cli.qp, "10.0.0.2:7174", testCM, ConnParam{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled dial: %v", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, cli.ep, cli.qp, "10.0.0.2:7174", testCM, ConnParam{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial past its deadline: %v", err)
	}
	if _, err := Dial(ctx, cli.ep, cli.qp, "10.0.0.2", testCM, ConnParam{}); !errors.Is(err, ErrBadAddr) {
		t.Fatalf("bad address: %v", err)
	}
}
