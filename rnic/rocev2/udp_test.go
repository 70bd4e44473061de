package rocev2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// udpPair connects two endpoints over loopback UDP sockets.
func udpPair(t testing.TB, addr string, opt *UDPOptions, cfg *Config) (cli, srv *side) {
	t.Helper()
	return udpPairDev(t, addr, opt, cfg, rnic.Config{})
}

// udpPairDev is udpPair with devices opened with dcfg.
func udpPairDev(t testing.TB, addr string, opt *UDPOptions, cfg *Config, dcfg rnic.Config) (cli, srv *side) {
	t.Helper()
	mk := func() *side {
		d, _ := rnic.Open(dcfg)
		s := &side{dev: d}
		s.pd, _ = d.AllocPD()
		s.scq, _ = d.CreateCQ(1 << 16)
		s.rcq, _ = d.CreateCQ(1 << 16)
		var err error
		s.qp, err = d.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: rnic.QPCap{MaxSendWR: 1024}})
		if err != nil {
			t.Fatal(err)
		}
		l, err := ListenUDP(netip.MustParseAddrPort(addr), opt)
		if err != nil {
			t.Skip("no UDP socket:", err)
		}
		s.ep = NewEndpoint(d, l, cfg)
		t.Cleanup(func() { _ = s.qp.Destroy(); _ = s.ep.Close(); _ = d.Close() })
		return s
	}
	cli, srv = mk(), mk()
	var err error
	cli.conn, err = cli.ep.Connect(cli.qp, ConnAttr{Remote: srv.ep.LocalAddr(), RemoteQPN: srv.qp.Num(), SendPSN: 100, RecvPSN: 200})
	if err != nil {
		t.Fatal(err)
	}
	srv.conn, err = srv.ep.Connect(srv.qp, ConnAttr{Remote: cli.ep.LocalAddr(), RemoteQPN: cli.qp.Num(), SendPSN: 200, RecvPSN: 100})
	if err != nil {
		t.Fatal(err)
	}
	return
}

func TestUDPLink(t *testing.T) {
	for _, tc := range []struct {
		addr string
		opt  UDPOptions
	}{
		{"127.0.0.1:0", UDPOptions{}},
		{"127.0.0.1:0", UDPOptions{GSO: true, GRO: true}},
		{"[::1]:0", UDPOptions{GSO: true, GRO: true}},
	} {
		t.Run(fmt.Sprintf("%s/gso=%v", tc.addr, tc.opt.GSO), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MTU = roce.MTU4096
			cfg.StrictICRC = !tc.opt.GSO
			cli, srv := udpPair(t, tc.addr, &tc.opt, cfg)
			const n = 1 << 20
			smr, sbuf := cli.reg(t, n, allAccess)
			rmr, rbuf := srv.reg(t, n, allAccess)
			wmr, wbuf := srv.reg(t, n, allAccess)
			dmr, dbuf := cli.reg(t, n, allAccess)
			fill(sbuf, 42)
			postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, n)}})
			post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 100000)}})
			if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || c.ByteLen != 100000 || !bytes.Equal(rbuf[:100000], sbuf[:100000]) {
				t.Fatalf("send: %+v", c)
			}
			// The race detector sees no ordering through a kernel socket, so
			// memory the peer wrote is only read after a completion on the
			// side that wrote it (the trailing SEND's receive).
			postRecv(t, srv.qp, &rnic.RecvWR{WRID: 2})
			post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, n)},
				RemoteAddr: wmr.Addr(), RKey: wmr.RKey()})
			post(t, cli.qp, &rnic.SendWR{WRID: 3, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{dmr.SGE(0, n)},
				RemoteAddr: wmr.Addr(), RKey: wmr.RKey()})
			post(t, cli.qp, &rnic.SendWR{WRID: 4, Opcode: rnic.OpSend, Flags: rnic.Signaled})
			cs := wait(t, cli.scq, 4)
			for _, c := range cs {
				if c.Status != 0 {
					t.Fatalf("%+v", cs)
				}
			}
			wait(t, srv.rcq, 1)
			if !bytes.Equal(wbuf, sbuf) || !bytes.Equal(dbuf, sbuf) {
				t.Fatal("data")
			}
			if l, ok := cli.ep.Link().(*UDPLink); ok {
				t.Logf("GSO %v GRO %v; ICRC errors %d/%d, ID-solved %d/%d", l.GSO(), l.GRO(), cli.ep.ICRCErrors.Load(),
					srv.ep.ICRCErrors.Load(), cli.ep.ICRCIDSolved.Load(), srv.ep.ICRCIDSolved.Load())
			}
			// GSO segments after the first carry IPv4 IDs 1, 2…: solved, not errors.
			if cli.ep.ICRCErrors.Load()+srv.ep.ICRCErrors.Load() != 0 {
				t.Fatal("ICRC errors over loopback UDP")
			}
			if !tc.opt.GSO && srv.ep.ICRCIDSolved.Load()+cli.ep.ICRCIDSolved.Load() != 0 {
				t.Fatal("non-zero IP IDs without GSO")
			}
		})
	}
}

func TestListenUDPNeedsAddress(t *testing.T) {
	for _, a := range []string{"0.0.0.0:0", "[::]:0"} {
		if l, err := ListenUDP(netip.MustParseAddrPort(a), nil); err != ErrUnspecifiedAddr {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: %v", a, err)
		}
	}
}

// TestUDPOffloadChoice: nil options choose GSO (over IPv4 each segment's ICRC is fixed
// for its IP ID) and GRO; explicit options are taken as given.
func TestUDPOffloadChoice(t *testing.T) {
	for _, tc := range []struct {
		addr             string
		opt              *UDPOptions
		wantGSO, wantGRO bool
	}{
		{"127.0.0.1:0", nil, true, true},
		{"127.0.0.1:0", &UDPOptions{}, false, false},
		{"127.0.0.1:0", &UDPOptions{GSO: true}, true, false},
		{"[::1]:0", nil, true, true},
		{"[::1]:0", &UDPOptions{GRO: true}, false, true},
	} {
		l, err := ListenUDP(netip.MustParseAddrPort(tc.addr), tc.opt)
		if err != nil {
			if tc.addr[0] == '[' {
				t.Skipf("no IPv6 loopback on this machine: %v", err)
			}
			t.Fatal(err)
		}
		gso, gro := l.GSO(), l.GRO()
		l.Close()
		if gso != tc.wantGSO || gro != tc.wantGRO {
			t.Errorf("%s %+v: GSO %v GRO %v, want GSO %v GRO %v", tc.addr, tc.opt, gso, gro, tc.wantGSO, tc.wantGRO)
		}
	}
}

// udpLinkPair opens two UDP links on 127.0.0.1 with options o, closed at the test's end.
func udpLinkPair(t *testing.T, o UDPOptions) (tx, rx *UDPLink) {
	t.Helper()
	tx, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &o)
	if err != nil {
		t.Skip("no UDP socket:", err)
	}
	t.Cleanup(func() { _ = tx.Close() })
	rx, err = ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rx.Close() })
	return tx, rx
}

// TestUDPGROSeveralDatagrams: with several coalesced datagrams waiting, Recv hands
// out every packet once, in order and with its size and bytes, also to a caller
// whose batch ends inside a datagram.
func TestUDPGROSeveralDatagrams(t *testing.T) {
	tx, rx := udpLinkPair(t, UDPOptions{GSO: true, GRO: true})
	if !rx.GRO() || !tx.GSO() {
		t.Skip("no UDP GSO/GRO")
	}
	// Runs of different sizes (each run's last packet shorter) so the kernel cannot
	// coalesce them into one datagram; the packets' bytes number them.
	var want [][]byte
	for run, size := range []int{1000, 1500, 700, 1200, 300} {
		var bufs [][]byte
		for k := range 5 {
			n := size
			if k == 4 {
				n = size / 2
			}
			b := bytes.Repeat([]byte{byte(len(want))}, n)
			b[0] = byte(run)
			bufs = append(bufs, b)
			want = append(want, b)
		}
		if err := tx.Send(bufs, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([][]byte, 3) // smaller than a datagram's segments
	for i := range bufs {
		bufs[i] = make([]byte, MaxPacket)
	}
	sizes := make([]int, len(bufs))
	from := make([]netip.AddrPort, len(bufs))
	for got := 0; got < len(want); {
		n, err := rx.Recv(bufs, sizes, from)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if from[i] != tx.LocalAddr() {
				t.Fatalf("packet %d from %v, want %v", got, from[i], tx.LocalAddr())
			}
			// the last 4 bytes are where an ICRC would be: Send fixes them for the
			// GSO segment's IP ID
			if sizes[i] != len(want[got]) || !bytes.Equal(bufs[i][:sizes[i]-roce.ICRCLen], want[got][:len(want[got])-roce.ICRCLen]) {
				t.Fatalf("packet %d: %d bytes starting %v, want %d starting %v", got, sizes[i], bufs[i][:2], len(want[got]), want[got][:2])
			}
			got++
		}
	}
}

// TestGSOIDDeltaTable: the link's per-length table gives roce.ICRCIPv4IDDelta for every
// ID of a GSO run, also when the length changes.
func TestGSOIDDeltaTable(t *testing.T) {
	var l UDPLink
	for _, n := range []int{4124, 36, 4124, 1052, 4124} {
		for id := 1; id < 64; id++ {
			if got, want := l.deltaFor(n, id), roce.ICRCIPv4IDDelta(uint16(id), n-roce.ICRCLen); got != want {
				t.Fatalf("length %d ID %d: %#x, want %#x", n, id, got, want)
			}
		}
	}
}

// TestUDPGatherSend: over a UDPLink, a request's payload goes from registered memory
// as an iovec of its own (sendParts) where one SGE holds it, and is copied where it
// crosses SGEs; WRITE and SEND messages whose packets mix the two, with pads, GSO runs
// and their ID fixes, arrive intact with no ICRC error (exact check without GSO).
func TestUDPGatherSend(t *testing.T) {
	for _, gso := range []bool{false, true} {
		t.Run(fmt.Sprintf("gso=%v", gso), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MTU = roce.MTU1024
			cfg.StrictICRC = !gso
			cli, srv := udpPair(t, "127.0.0.1:0", &UDPOptions{GSO: gso, GRO: gso}, cfg)
			if _, ok := cli.ep.Link().(gatherLink); !ok || cli.ep.gather == nil {
				t.Fatal("UDPLink is not a gatherLink")
			}
			sizes := []int{5000, 3001, 1024, 10003} // SGE boundaries inside and at packets
			total := 0
			for _, n := range sizes {
				total += n
			}
			smr, sbuf := cli.reg(t, total, allAccess)
			fill(sbuf, 9)
			var sgl []rnic.SGE
			off := 0
			for _, n := range sizes {
				sgl = append(sgl, smr.SGE(off, n))
				off += n
			}
			wmr, wbuf := srv.reg(t, total, allAccess)
			rmr, rbuf := srv.reg(t, total, allAccess)
			postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, total)}})
			post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: sgl,
				RemoteAddr: wmr.Addr(), RKey: wmr.RKey()})
			post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: sgl[1:]})
			for _, c := range wait(t, cli.scq, 2) {
				if c.Status != 0 {
					t.Fatalf("%+v", c)
				}
			}
			if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || int(c.ByteLen) != total-sizes[0] {
				t.Fatalf("receive %+v", c)
			}
			if !bytes.Equal(wbuf, sbuf) || !bytes.Equal(rbuf[:total-sizes[0]], sbuf[sizes[0]:]) {
				t.Fatal("data")
			}
			if e := cli.ep.ICRCErrors.Load() + srv.ep.ICRCErrors.Load(); e != 0 {
				t.Fatalf("%d ICRC errors", e)
			}
		})
	}
}

// TestUDPRecvEach: the receive loop that waits for the poller after a short batch
// (recvEach) gets every datagram of bursts sent with pauses between them, in order,
// with and without GRO, and returns ErrLinkClosed when the link is closed under it.
func TestUDPRecvEach(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			tx, rx := udpLinkPair(t, UDPOptions{GSO: gro, GRO: gro})
			var el eachLink = rx
			const total = 3000
			go func() {
				rnd := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
				for sent := 0; sent < total; {
					k := min(total-sent, 1+rnd.IntN(12))
					bufs := make([][]byte, k)
					for i := range bufs {
						bufs[i] = make([]byte, 200)
						binary.BigEndian.PutUint32(bufs[i], uint32(sent+i))
					}
					if err := tx.Send(bufs, rx.LocalAddr()); err != nil {
						return
					}
					sent += k
					if rnd.IntN(4) == 0 {
						time.Sleep(time.Duration(rnd.IntN(200)) * time.Microsecond) // let the receiver drain and wait
					}
				}
			}()
			bufs := make([][]byte, 8)
			for i := range bufs {
				bufs[i] = make([]byte, MaxPacket)
			}
			sizes := make([]int, len(bufs))
			from := make([]netip.AddrPort, len(bufs))
			next, batches := 0, 0
			all := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- el.recvEach(bufs, sizes, from, func(n int) {
					batches++
					for i := range n {
						if sizes[i] != 200 || from[i] != tx.LocalAddr() {
							t.Errorf("datagram %d: %d bytes from %v", next, sizes[i], from[i])
						}
						if got := int(binary.BigEndian.Uint32(bufs[i])); got != next {
							t.Errorf("datagram %d, want %d", got, next)
							next = got
						}
						next++
					}
					if next == total {
						close(all)
					}
				}, nil)
			}()
			select {
			case <-all:
			case <-time.After(20 * time.Second):
				t.Errorf("received %d of %d datagrams", next, total)
			}
			_ = rx.Close()
			select {
			case err := <-done:
				if !errors.Is(err, ErrLinkClosed) {
					t.Fatalf("recvEach after Close: %v, want ErrLinkClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("recvEach did not return after Close")
			}
			t.Logf("%d datagrams in %d batches", next, batches)
		})
	}
}
