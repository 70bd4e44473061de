//go:build linux

package xdp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
	"github.com/vishvananda/netlink"
)

// netEnv is two network namespaces joined by a veth pair (internal/netnstest: addresses
// in 10.199.9.0/24 and fd00:199:9::/64 that exist only inside them), with namespace 0
// also holding otherAddr.
type netEnv struct {
	*netnstest.Env
	v6   bool       // openLink uses Addr6
	opts [2]Options // AF_XDP options of each side (Interface, Addr, Mode are set by openLink)
}

// newNetEnv creates the namespaces, the veth pair and the addresses; they disappear
// once the test's handles and the links' sockets in them are closed.
func newNetEnv(t testing.TB, mtu int) *netEnv { return newNetEnvQ(t, mtu, 1) }

// newNetEnvQ is newNetEnv with veths of the given number of queues.
func newNetEnvQ(t testing.TB, mtu, queues int) *netEnv {
	t.Helper()
	e := &netEnv{Env: netnstest.New(t, mtu, queues)}
	e.AddAddr(t, 0, netip.PrefixFrom(otherAddr, 24)) // see checkPass
	return e
}

// openLink opens an AF_XDP (xdp) or UDP link for side i of e.
func (e *netEnv) openLink(t testing.TB, i int, xdp bool, mode Mode, uo *rocev2.UDPOptions) rocev2.Link {
	t.Helper()
	var l rocev2.Link
	netnstest.In(t, e.NS[i], func() {
		a := netip.AddrPortFrom(e.Addr[i], roce.UDPPort)
		if e.v6 {
			a = netip.AddrPortFrom(e.Addr6[i], roce.UDPPort)
		}
		var err error
		if xdp {
			var x *Link
			o := e.opts[i]
			o.Interface, o.Addr, o.Mode = e.Dev[i], a, mode
			x, err = New(o)
			if err == nil {
				if _, bench := t.(*testing.B); !bench {
					t.Logf("%s: AF_XDP link mode %v zero-copy %v", e.Dev[i], x.Mode(), x.ZeroCopy())
				}
				l = x
			}
		} else {
			l, err = rocev2.ListenUDP(a, uo)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	return l
}

type side struct {
	dev  *rnic.Device
	pd   *rnic.PD
	scq  *rnic.CQ
	rcq  *rnic.CQ
	qp   *rnic.QP
	ep   *rocev2.Endpoint
	conn *rocev2.Conn
}

func newSide(t testing.TB, l rocev2.Link, cfg *rocev2.Config) *side {
	t.Helper()
	d, err := rnic.Open(rnic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: d}
	s.pd, _ = d.AllocPD()
	s.scq, _ = d.CreateCQ(1 << 16)
	s.rcq, _ = d.CreateCQ(1 << 16)
	s.qp, err = d.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: rnic.QPCap{MaxSendWR: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	s.ep = rocev2.NewEndpoint(d, l, cfg)
	t.Cleanup(func() {
		if x, ok := l.(*Link); ok && t.Failed() {
			t.Logf("%v AF_XDP stats at failure: %+v", l.LocalAddr(), x.Stats())
		}
		_ = s.qp.Destroy()
		_ = s.ep.Close()
		_ = d.Close()
	})
	return s
}

func connect(t testing.TB, a, b *side) {
	t.Helper()
	var err error
	a.conn, err = a.ep.Connect(a.qp, rocev2.ConnAttr{Remote: b.ep.LocalAddr(), RemoteQPN: b.qp.Num(), SendPSN: 0xFFFFF0, RecvPSN: 77})
	if err != nil {
		t.Fatal(err)
	}
	b.conn, err = b.ep.Connect(b.qp, rocev2.ConnAttr{Remote: a.ep.LocalAddr(), RemoteQPN: a.qp.Num(), SendPSN: 77, RecvPSN: 0xFFFFF0})
	if err != nil {
		t.Fatal(err)
	}
}

const allAccess = rnic.AccessLocalWrite | rnic.AccessRemoteWrite | rnic.AccessRemoteRead | rnic.AccessRemoteAtomic

func (s *side) reg(t testing.TB, n int) (*rnic.MR, []byte) {
	t.Helper()
	buf := make([]byte, n)
	mr, err := s.pd.RegMR(buf, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	return mr, buf
}

func wait(t testing.TB, cq *rnic.CQ, n int) []rnic.Completion {
	t.Helper()
	out := make([]rnic.Completion, 0, n)
	wc := make([]rnic.Completion, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(out) < n {
		k, err := cq.Wait(ctx, wc[:min(len(wc), n-len(out))])
		if err != nil {
			t.Fatalf("waiting for %d completions, got %d: %v (%+v)", n, len(out), err, out)
		}
		out = append(out, wc[:k]...)
	}
	for _, c := range out {
		if c.Status != 0 {
			t.Fatalf("completion %+v", c)
		}
	}
	return out
}

func post(t testing.TB, qp *rnic.QP, wr *rnic.SendWR) {
	t.Helper()
	if err := qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, qp *rnic.QP, wr *rnic.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wr); err != nil {
		t.Fatal(err)
	}
}

// exercise runs RC SEND, WRITE and READ of several sizes from a to b and
// checks the data.
func exercise(t *testing.T, a, b *side, seed byte) {
	for _, n := range []int{1, 100, 1023, 1024, 1025, 4096, 10000, 65536, 1 << 20} {
		smr, sbuf := a.reg(t, n)
		rmr, rbuf := b.reg(t, n)
		wmr, wbuf := b.reg(t, n)
		dmr, dbuf := a.reg(t, n)
		for i := range sbuf {
			sbuf[i] = byte(i*7+n) + seed
		}
		postRecv(t, b.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, n)}})
		post(t, a.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, n)}})
		if c := wait(t, b.rcq, 1)[0]; int(c.ByteLen) != n || !bytes.Equal(rbuf, sbuf) {
			t.Fatalf("SEND %d: %+v, data equal %v", n, c, bytes.Equal(rbuf, sbuf))
		}
		wait(t, a.scq, 1)
		// WRITE, READ it back, then a SEND: b reads its memory only after
		// that SEND's receive completion (the race detector sees no order
		// through the kernel).
		postRecv(t, b.qp, &rnic.RecvWR{WRID: 2})
		post(t, a.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, n)},
			RemoteAddr: wmr.Addr(), RKey: wmr.RKey()})
		post(t, a.qp, &rnic.SendWR{WRID: 3, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{dmr.SGE(0, n)},
			RemoteAddr: wmr.Addr(), RKey: wmr.RKey()})
		post(t, a.qp, &rnic.SendWR{WRID: 4, Opcode: rnic.OpSend, Flags: rnic.Signaled})
		wait(t, a.scq, 3)
		wait(t, b.rcq, 1)
		if !bytes.Equal(wbuf, sbuf) {
			t.Fatalf("WRITE %d: data differ", n)
		}
		if !bytes.Equal(dbuf, sbuf) {
			t.Fatalf("READ %d: data differ", n)
		}
	}
}

func TestNetnsRC(t *testing.T) {
	netnstest.RequirePriv(t)
	for _, tc := range []struct {
		name string
		xdpB bool
		mode Mode
		mtu  roce.MTU
		dev  int
		gso  bool // the UDP peer sends GSO super-datagrams: IP IDs 0, 1, 2…, ICRCs to match
		v6   bool
	}{
		{"v6/xdp-udp/auto/mtu1024", false, ModeAuto, roce.MTU1024, 1500, false, true},
		{"v6/xdp-udp-gso/auto/mtu2048", false, ModeAuto, roce.MTU2048, 3000, true, true},
		{"v6/xdp-xdp/generic/mtu1024", true, ModeGeneric, roce.MTU1024, 1500, false, true},
		{"xdp-udp/auto/mtu1024", false, ModeAuto, roce.MTU1024, 1500, false, false},
		{"xdp-udp/generic/mtu2048", false, ModeGeneric, roce.MTU2048, 3000, false, false},
		{"xdp-udp-gso/auto/mtu1024", false, ModeAuto, roce.MTU1024, 1500, true, false},
		{"xdp-xdp/auto/mtu1024", true, ModeAuto, roce.MTU1024, 1500, false, false},
		{"xdp-xdp/generic/mtu2048", true, ModeGeneric, roce.MTU2048, 3000, false, false},
		// path MTU 4096: packets longer than a UMEM frame, in several both ways
		// (XDP multi-buffer)
		{"xdp-udp/auto/mtu4096", false, ModeAuto, roce.MTU4096, 9000, false, false},
		{"xdp-xdp/auto/mtu4096", true, ModeAuto, roce.MTU4096, 9000, false, false},
		{"v6/xdp-xdp/generic/mtu4096", true, ModeGeneric, roce.MTU4096, 9000, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newNetEnv(t, tc.dev)
			e.v6 = tc.v6
			cfg := rocev2.DefaultConfig()
			cfg.MTU = tc.mtu
			cfg.Timeout = 15 // 134 ms: retries outlast -race and a busy shared machine
			cfgA := *cfg
			cfgA.StrictICRC = true // the AF_XDP link verifies every header exactly
			la := e.openLink(t, 0, true, tc.mode, nil)
			lb := e.openLink(t, 1, tc.xdpB, tc.mode, &rocev2.UDPOptions{GSO: tc.gso})
			if u, ok := lb.(*rocev2.UDPLink); ok && tc.gso && !u.GSO() {
				t.Skip("SKIP: no UDP GSO on this kernel")
			}
			a, b := newSide(t, la, &cfgA), newSide(t, lb, cfg)
			connect(t, a, b)
			exercise(t, a, b, 1)
			exercise(t, b, a, 2)
			for i, s := range []*side{a, b} {
				if n := s.ep.ICRCErrors.Load(); n != 0 {
					t.Errorf("side %d: %d ICRC errors", i, n)
				}
				if x, ok := s.ep.Link().(*Link); ok {
					st := x.Stats()
					t.Logf("side %d AF_XDP stats %+v", i, st)
					if st.RxPackets == 0 || st.TxPackets == 0 || st.ICRCErrors != 0 {
						t.Errorf("side %d: stats %+v", i, st)
					}
					// what rxe checks: every GSO segment's ICRC verifies with its real IP ID
					// (the UDP link fixes each for the ID the kernel gives it)
					if tc.gso && !tc.v6 && i == 0 && (st.ICRCRestamped == 0 || st.ICRCZeroID != 0) {
						t.Errorf("GSO peer: want segments whose ICRC verifies with their real non-zero IP ID and none with an ID-0 ICRC: %+v", st)
					}
					if !tc.gso && st.ICRCRestamped+st.ICRCZeroID != 0 {
						t.Errorf("side %d: non-canonical headers without GSO: %+v", i, st)
					}
					if ps := x.Port().Stats(); tc.mtu == roce.MTU4096 && (ps.TxMultiBuffer == 0 || i == 1 && ps.RxMultiBuffer == 0) {
						t.Errorf("side %d: path MTU 4096 without multi-buffer frames: %+v", i, ps)
					}
				}
			}
			// Other UDP traffic still reaches the kernel stack (and ARP did,
			// or no neighbour would have resolved).
			checkPass(t, e)
		})
	}
}

// otherAddr is a second address of namespace 0, not the link's.
var otherAddr = netip.MustParseAddr("10.199.9.3")

// checkPass sends UDP datagrams from namespace 1 to namespace 0 that the
// XDP program must pass to the kernel stack: to another port of the link's
// address, and to port 4791 of another address.
func checkPass(t *testing.T, e *netEnv) {
	t.Helper()
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(e.Addr[0], 5000), netip.AddrPortFrom(otherAddr, roce.UDPPort)} {
		var c *net.UDPConn
		netnstest.In(t, e.NS[0], func() {
			var err error
			if c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)); err != nil {
				t.Fatal(err)
			}
		})
		netnstest.In(t, e.NS[1], func() {
			s, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, _ = s.Write([]byte("not for the link"))
		})
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		c.Close()
		if err != nil || string(b[:n]) != "not for the link" {
			t.Errorf("UDP to %v not passed to the kernel: %q %v", dst, b[:n], err)
		}
	}
}

// TestLinkLifecycle checks that the program is attached while the link is
// open and detached by Close, that Close unblocks a waiting Recv, and that
// a bad interface fails cleanly.
func TestLinkLifecycle(t *testing.T) {
	netnstest.RequirePriv(t)
	e := newNetEnv(t, 1500)
	attached := func() bool {
		var on bool
		netnstest.In(t, e.NS[0], func() {
			l, err := netlink.LinkByName(e.Dev[0])
			if err != nil {
				t.Fatal(err)
			}
			on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		})
		return on
	}
	l := e.openLink(t, 0, true, ModeAuto, nil).(*Link)
	if !attached() {
		t.Fatal("no XDP program attached while the link is open")
	}
	done := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, rocev2.MaxPacket)}
		_, err := l.Recv(bufs, make([]int, 1), make([]netip.AddrPort, 1))
		done <- err
	}()
	if err := l.Send([][]byte{make([]byte, 40)}, netip.AddrPortFrom(e.Addr6[1], 4791)); !errors.Is(err, ErrAddrFamily) {
		t.Fatalf("IPv6 destination on an IPv4 link: %v", err)
	}
	// Nobody has 10.199.9.99: the first Send queues while the kernel
	// resolves, and once resolution has failed (3 s) Send refuses at once.
	bad := netip.MustParseAddrPort("10.199.9.99:4791")
	if err := l.Send([][]byte{make([]byte, 40)}, bad); err != nil {
		t.Fatalf("send to a peer being resolved: %v", err)
	}
	waitStats(t, l, func(s afxdp.Stats) bool { return s.NeighFailed == 1 && s.NeighDropped == 1 })
	if err := l.Send([][]byte{make([]byte, 40)}, bad); !errors.Is(err, ErrNoNeighbour) {
		t.Fatalf("unresolvable peer: %v", err)
	}
	if st := l.Stats(); st.TxDropped != 2 || st.TxPackets != 1 {
		t.Fatalf("stats after refused sends: %+v", st)
	}
	// longer than the netdev's MTU (1500) allows: dropped, counted
	if err := l.Send([][]byte{make([]byte, 1500-28+1)}, netip.AddrPortFrom(e.Addr[1], 4791)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.TxDropped != 3 || st.TxPackets != 1 {
		t.Fatalf("stats after an oversize send: %+v", st)
	}
	time.Sleep(50 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, rocev2.ErrLinkClosed) {
			t.Fatalf("Recv after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if err := l.Send([][]byte{make([]byte, 40)}, netip.AddrPortFrom(e.Addr[1], 4791)); !errors.Is(err, rocev2.ErrLinkClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if attached() {
		t.Fatal("XDP program still attached after Close")
	}
	netnstest.In(t, e.NS[0], func() {
		if _, err := New(Options{Interface: "nonexistent0", Addr: netip.AddrPortFrom(e.Addr[0], 0)}); err == nil {
			t.Fatal("New on a missing interface succeeded")
		}
		if _, err := New(Options{Interface: e.Dev[0], Addr: netip.MustParseAddrPort("0.0.0.0:4791")}); !errors.Is(err, rocev2.ErrUnspecifiedAddr) {
			t.Fatalf("wildcard address: %v", err)
		}
	})
}

// TestNetnsCM connects through the IB CM (REQ/REP/RTU as UD MADs to QP1)
// from an AF_XDP endpoint to a UDP-link endpoint and the other way round,
// then moves data over the connection.
func TestNetnsCM(t *testing.T) {
	netnstest.RequirePriv(t)
	for _, xdpDials := range []bool{true, false} {
		t.Run(fmt.Sprintf("xdp-dials=%v", xdpDials), func(t *testing.T) {
			e := newNetEnv(t, 1500)
			cfg := rocev2.DefaultConfig()
			cfg.Timeout = 15
			x := newSide(t, e.openLink(t, 0, true, ModeAuto, nil), cfg)
			u := newSide(t, e.openLink(t, 1, false, ModeAuto, nil), cfg)
			cli, srv := x, u
			if !xdpDials {
				cli, srv = u, x
			}
			l, err := rocev2.Listen(srv.ep, ":7174", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			type res struct {
				c   *rocev2.Conn
				err error
			}
			rc := make(chan res, 1)
			go func() {
				r, err := l.Accept(ctx)
				if err != nil {
					rc <- res{nil, err}
					return
				}
				c, err := r.Accept(srv.qp, rocev2.ConnParam{PrivateData: []byte("welcome"), IRD: 4, ORD: 4})
				rc <- res{c, err}
			}()
			cli.conn, err = rocev2.Dial(ctx, cli.ep, cli.qp, netip.AddrPortFrom(srv.ep.LocalAddr().Addr(), 7174).String(), nil,
				rocev2.ConnParam{PrivateData: []byte("hello"), IRD: 4, ORD: 4})
			r := <-rc
			if err != nil || r.err != nil {
				t.Fatal(err, r.err)
			}
			srv.conn = r.c
			if !bytes.HasPrefix(cli.conn.PrivateData(), []byte("welcome")) {
				t.Fatalf("reply private data %q", cli.conn.PrivateData())
			}
			exercise(t, cli, srv, 3)
			exercise(t, srv, cli, 4)
		})
	}
}

// TestNetnsMultiQueue runs RC traffic to an AllQueues link on a two-queue
// veth: from an AllQueues AF_XDP peer transmitting on queue 1 (a veth
// delivers on the receive queue of the sender's transmit queue) and from a
// UDP peer.
func TestNetnsMultiQueue(t *testing.T) {
	netnstest.RequirePriv(t)
	for _, peerXDP := range []bool{true, false} {
		t.Run(fmt.Sprintf("peer-xdp=%v", peerXDP), func(t *testing.T) {
			e := newNetEnvQ(t, 1500, 2)
			e.opts[0].AllQueues = true
			e.opts[1].Queue = 1
			e.opts[1].AllQueues = true
			cfg := rocev2.DefaultConfig()
			cfg.Timeout = 15
			la := e.openLink(t, 0, true, ModeAuto, nil).(*Link)
			if q := la.Port().Queues(); len(q) != 2 {
				t.Fatalf("queues %v bound on a two-queue veth", q)
			}
			a, b := newSide(t, la, cfg), newSide(t, e.openLink(t, 1, peerXDP, ModeAuto, nil), cfg)
			connect(t, a, b)
			exercise(t, a, b, 5)
			exercise(t, b, a, 6)
			per := la.Port().QueueRxPackets()
			if peerXDP && per[1] == 0 {
				t.Fatal("nothing arrived on queue 1")
			}
			t.Logf("packets per queue: %v", per)
		})
	}
}

// waitStats polls the link's port counters until ok holds (20 s at most):
// the resolver works asynchronously.
func waitStats(t testing.TB, l *Link, ok func(afxdp.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok(l.Port().Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("port stats never reached the expected state: %+v", l.Port().Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNeighbourResolutionDoesNotStall is issue 10 item 10: a peer whose
// MAC is unknown must not stall sends to other peers (the endpoint's
// receive goroutine sends ACKs through the same link). While 10.199.9.99
// is being resolved (it never answers, so resolution lasts 3 s), a packet
// to the resolved peer must go out and arrive; before the fix Send held
// the send lock while it polled the kernel for up to 3 s.
func TestNeighbourResolutionDoesNotStall(t *testing.T) {
	netnstest.RequirePriv(t)
	e := newNetEnv(t, 1500)
	a := e.openLink(t, 0, true, ModeAuto, nil).(*Link)
	defer a.Close()
	b := e.openLink(t, 1, false, ModeAuto, nil)
	defer b.Close()
	good := b.LocalAddr()
	// resolve the good peer first (this may wait for ARP, asynchronously)
	// waitArrive sends to the good peer until a packet arrives there (a lost packet is
	// sent again, logged; the test fails after ten tries rather than waiting for ever)
	waitArrive := func() {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			bufs := [][]byte{make([]byte, rocev2.MaxPacket)}
			_, err := b.Recv(bufs, make([]int, 1), make([]netip.AddrPort, 1))
			got <- err
		}()
		for try := 1; ; try++ {
			if err := a.Send([][]byte{make([]byte, 40)}, good); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				return
			case <-time.After(2 * time.Second):
				if try == 10 {
					t.Fatalf("nothing arrived at the good peer after %d sends: %+v", try, a.Port().Stats())
				}
				t.Logf("send %d to the good peer did not arrive within 2 s, sending again: %+v", try, a.Port().Stats())
			}
		}
	}
	waitArrive()
	st0 := a.Port().Stats() // a first send lost while the good peer resolved counts a drop too
	q0 := st0.NeighQueued
	sent := make(chan error, 1)
	go func() { sent <- a.Send([][]byte{make([]byte, 40)}, netip.MustParseAddrPort("10.199.9.99:4791")) }()
	if err := <-sent; err != nil {
		t.Fatalf("send to a peer being resolved: %v", err)
	}
	waitArrive()
	if st := a.Port().Stats(); st.NeighFailed != 0 || st.NeighQueued != q0+1 {
		t.Fatalf("the good peer's packet went out only after the bad peer's resolution ended: %+v", st)
	}
	waitStats(t, a, func(s afxdp.Stats) bool { return s.NeighFailed == 1 && s.NeighDropped == st0.NeighDropped+1 })
}
