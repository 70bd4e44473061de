package iwarp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// exercise runs a Send each way plus a Write and a Read each way (the client sends first,
// as a client-server responder must not transmit before the initiator's first FPDU).
func exercise(t *testing.T, cli, srv *side) {
	t.Helper()
	const n = 5000
	cmr, cbuf := cli.reg(t, 2*n, allAccess)
	smr, sbuf := srv.reg(t, 2*n, allAccess)
	fill(cbuf, 11)
	fill(sbuf, 12)
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{smr.SGE(n, n)}})
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, n)}})
	if c := wait(t, srv.rcq); c.Status != rnic.StatusSuccess || !bytes.Equal(sbuf[n:], cbuf[:n]) {
		t.Fatalf("send: %+v", c)
	}
	fill(sbuf[n:], 13)
	settle(t, cli, srv)
	for _, s := range [2][2]*side{{cli, srv}, {srv, cli}} {
		a, b := s[0], s[1]
		amr, abuf := a.reg(t, n, allAccess)
		bmr, bbuf := b.reg(t, n, allAccess)
		fill(abuf, 21)
		fill(bbuf, 22)
		settle(t, a, b)
		_ = a.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{amr.SGE(0, n/2)}, RemoteAddr: bmr.Addr(), RKey: bmr.RKey()})
		_ = a.qp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{amr.SGE(n/2, n/2)}, RemoteAddr: bmr.Addr() + n/2, RKey: bmr.RKey()})
		if c := wait(t, a.scq); c.Status != rnic.StatusSuccess || c.WRID != 3 {
			t.Fatalf("read: %+v", c)
		}
		settle(t, a, b)
		if !bytes.Equal(abuf, bbuf) {
			t.Fatal("write/read data mismatch")
		}
	}
}

func TestMPAMatrix(t *testing.T) {
	noLeak(t)
	type combo struct {
		irev, rrev   uint8
		icrc, rcrc   bool
		imark, rmark bool
		rtr          mpa.RTRType // 0: client-server
	}
	var combos []combo
	for _, revs := range [][2]uint8{{1, 1}, {1, 2}, {2, 2}} {
		for _, crc := range [][2]bool{{false, false}, {true, false}, {false, true}} {
			for _, mk := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				rtrs := []mpa.RTRType{0}
				if revs[0] == 2 {
					rtrs = append(rtrs, mpa.RTRWrite, mpa.RTRRead, mpa.RTRSend, mpa.RTRWrite|mpa.RTRRead|mpa.RTRSend)
				}
				for _, r := range rtrs {
					combos = append(combos, combo{irev: revs[0], rrev: revs[1], icrc: crc[0], rcrc: crc[1], imark: mk[0], rmark: mk[1], rtr: r})
				}
			}
		}
	}
	for _, c := range combos {
		name := fmt.Sprintf("rev%d-%d/crc%v-%v/markers%v-%v/rtr=%v", c.irev, c.rrev, c.icrc, c.rcrc, c.imark, c.rmark, c.rtr)
		t.Run(name, func(t *testing.T) {
			ic := &Config{MULPDU: 700, MPA: mpa.Config{Rev: c.irev, CRC: c.icrc, Markers: c.imark, P2P: c.rtr != 0, RTR: c.rtr}}
			rc := &Config{MULPDU: 900, MPA: mpa.Config{Rev: c.rrev, CRC: c.rcrc, Markers: c.rmark, RTR: mpa.RTRWrite | mpa.RTRRead | mpa.RTRSend}}
			cli, srv := newPair(t, &pairOpts{cli: ic, srv: rc})
			cp, sp := cli.conn.Params(), srv.conn.Params()
			if cp.CRC != (c.icrc || c.rcrc) || sp.CRC != cp.CRC {
				t.Fatalf("CRC: client %v server %v", cp.CRC, sp.CRC)
			}
			if cp.TxMarkers != c.rmark || cp.RxMarkers != c.imark || sp.TxMarkers != c.imark || sp.RxMarkers != c.rmark {
				t.Fatalf("markers: client %+v server %+v", cp, sp)
			}
			if cp.P2P != (c.rtr != 0) || (c.rtr != 0 && cp.RTR&c.rtr == 0) {
				t.Fatalf("p2p: client %+v", cp)
			}
			exercise(t, cli, srv)
		})
	}
}

// TestMarkersBulk moves 3 MiB each way with Markers and CRC in both directions and the
// largest FPDUs the loopback MSS allows, so mpa.Writer batches many Marker-split FPDUs
// into each vectored write and mpa.Reader strips them on the way in.
func TestMarkersBulk(t *testing.T) {
	noLeak(t)
	cfg := func() *Config {
		c := DefaultConfig()
		c.MPA.Markers = true
		return c
	}
	cli, srv := newPair(t, &pairOpts{cli: cfg(), srv: cfg()})
	if p := cli.conn.Params(); !p.TxMarkers || !p.RxMarkers || !p.CRC {
		t.Fatalf("params %+v", p)
	}
	const n = 3<<20 + 5
	smr, sbuf := srv.reg(t, n, allAccess)
	cmr, cbuf := cli.reg(t, n, allAccess)
	fill(cbuf, 3)
	for i := range 4 { // several WRs queued: their FPDUs share batches
		off, k := i*(n/4), n/4
		if i == 3 {
			k = n - off
		}
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cmr.SGE(off, k)}, RemoteAddr: smr.Addr() + uint64(off), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
	}
	settle(t, cli, srv)
	if !bytes.Equal(sbuf, cbuf) {
		t.Fatal("WRITE data differs")
	}
	rmr, rbuf := cli.reg(t, n, allAccess)
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 9, Opcode: rnic.OpRead, Flags: rnic.Signaled,
		SGL: []rnic.SGE{rmr.SGE(0, n)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
		t.Fatal(err)
	}
	expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
	if !bytes.Equal(rbuf, sbuf) {
		t.Fatal("READ data differs")
	}
	if s := cli.qp.Counters().Snapshot(); s.CRCErrors != 0 {
		t.Fatalf("counters %+v", s)
	}
}
