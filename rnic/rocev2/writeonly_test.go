package rocev2

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// gsoLink is a link that says it sends with UDP GSO (as a UDPLink with GSO on does),
// so that the endpoint on it frames RC WRITEs as it does on such a link.
type gsoLink struct{ Link }

func (gsoLink) GSO() bool { return true }

// sentPkt is what a test keeps of a WRITE packet: its headers and payload length.
type sentPkt struct {
	h roce.Header
	n int
}

// recordWrites returns a sendWatch that records the WRITE packets sent through it (not
// ACKs or MADs), and the function that takes what it recorded so far.
func recordWrites() (*sendWatch, func() []sentPkt) {
	var pkts []sentPkt // under w.mu
	w := &sendWatch{}
	w.on = func(batch []roce.Packet) {
		for _, p := range batch {
			if p.Opcode().Info().Flags&roce.FlagWrite != 0 {
				pkts = append(pkts, sentPkt{p.Header(), len(p.Payload)})
			}
		}
	}
	return w, func() []sentPkt {
		w.mu.Lock()
		defer w.mu.Unlock()
		p := pkts
		pkts = nil
		return p
	}
}

// TestWriteFraming: over a link that sends with GSO an RC RDMA WRITE longer than the
// MTU leaves as one WRITE Only per packet, each with the RETH of its part
// (Config.WholeWrites); with WholeWrites, without GSO, or with Immediate data it is one
// WRITE First…Last message; the responder's memory (and a WRITE with Immediate's
// receive completion, the whole length) is the same either way.
func TestWriteFraming(t *testing.T) {
	const size = 4*1024 + 300 // MTU 1024: five packets, the last short
	for _, tc := range []struct {
		gso, whole bool
		op         rnic.Opcode
		only       bool // want WRITE Only per packet
	}{
		{gso: true, op: rnic.OpWrite, only: true},
		{gso: true, whole: true, op: rnic.OpWrite},
		{gso: false, op: rnic.OpWrite},
		{gso: true, op: rnic.OpWriteImm},
	} {
		t.Run(fmt.Sprintf("gso=%v/whole=%v/%v", tc.gso, tc.whole, tc.op), func(t *testing.T) {
			rec, take := recordWrites()
			cfg := testConfig()
			cfg.WholeWrites = tc.whole
			cli, srv := newPair(t, &pairOpts{cfg: cfg, cliWrap: func(l Link) Link {
				rec.Link = l
				if tc.gso {
					return gsoLink{rec}
				}
				return rec
			}})
			smr, sbuf := cli.reg(t, size, allAccess)
			wmr, wbuf := srv.reg(t, size+100, allAccess)
			fill(sbuf, 3)
			postRecv(t, srv.qp, &rnic.RecvWR{WRID: 7})
			post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: tc.op, Flags: rnic.Signaled, Imm: 0x1234, SGL: []rnic.SGE{smr.SGE(0, size)},
				RemoteAddr: wmr.Addr() + 100, RKey: wmr.RKey()})
			if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
				t.Fatalf("%+v", c)
			}
			if tc.op != rnic.OpWriteImm {
				post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled}) // a receive completion orders the memory check
			}
			if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || tc.op == rnic.OpWriteImm && (c.ByteLen != size || c.Imm != 0x1234) {
				t.Fatalf("receive %+v", c)
			}
			if !bytes.Equal(wbuf[100:], sbuf) {
				t.Fatal("data")
			}
			pkts := take()
			if len(pkts) != 5 {
				t.Fatalf("%d WRITE packets, want 5: %+v", len(pkts), pkts)
			}
			for i, p := range pkts {
				n := min(1024, size-1024*i)
				want := roce.RCWriteMiddle
				switch {
				case tc.only:
					want = roce.RCWriteOnly
				case i == 0:
					want = roce.RCWriteFirst
				case i == 4 && tc.op == rnic.OpWriteImm:
					want = roce.RCWriteLastImm
				case i == 4:
					want = roce.RCWriteLast
				}
				if p.h.Opcode != want || p.n != n || p.h.PSN != pkts[0].h.PSN.Add(uint32(i)) {
					t.Fatalf("packet %d: %v, %d bytes, PSN %v; want %v, %d bytes, PSN %v", i, p.h.Opcode, p.n, p.h.PSN, want, n, pkts[0].h.PSN.Add(uint32(i)))
				}
				if tc.only && (p.h.VA != wmr.Addr()+100+uint64(1024*i) || p.h.DMALen != uint32(n) || p.h.RKey != wmr.RKey()) {
					t.Fatalf("packet %d's RETH: VA %#x len %d rkey %#x; want %#x %d %#x", i, p.h.VA, p.h.DMALen, p.h.RKey,
						wmr.Addr()+100+uint64(1024*i), n, wmr.RKey())
				}
			}
		})
	}
}

// TestWriteOnlyFaulty: RC WRITEs framed as WRITE Only packets (a GSO link) of random
// sizes up to 16 packets, over a link that drops, duplicates and reorders 5 % of the
// packets each way, land exactly where and as they were written: retransmissions from
// any packet of a WRITE rebuild that packet's own RETH.
func TestWriteOnlyFaulty(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 12 // 16.8 ms: each loss at a tail costs a timeout
	cfg.RetryCnt = 60
	f := Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05}
	cf, sf := f, f
	cf.Seed, sf.Seed = 21, 22
	gso := func(l Link) Link { return gsoLink{l} }
	cli, srv := newPair(t, &pairOpts{cfg: cfg, cliF: cf, srvF: sf, cliWrap: gso, srvWrap: gso})
	if !cli.ep.writeOnly {
		t.Fatal("the GSO link's endpoint does not frame WRITEs as WRITE Only")
	}
	const msgs, maxLen = 300, 16 * 1024
	smr, sbuf := cli.reg(t, msgs*maxLen, allAccess)
	wmr, wbuf := srv.reg(t, msgs*maxLen, allAccess)
	fill(sbuf, 5)
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, msgs)
	wc := make([]rnic.Completion, 64)
	for i, done := 0, 0; done < msgs; {
		for ; i < msgs && i-done < 64; i++ {
			sizes[i] = 1 + rng.IntN(maxLen)
			post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled,
				SGL: []rnic.SGE{smr.SGE(i*maxLen, sizes[i])}, RemoteAddr: wmr.Addr() + uint64(i*maxLen), RKey: wmr.RKey()})
		}
		n, err := cli.scq.Wait(t.Context(), wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			if c.Status != 0 || int(c.WRID) != done {
				t.Fatalf("completion %d: %+v (%v)", done, c, cli.qp.Err())
			}
			done++
		}
	}
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1})
	post(t, cli.qp, &rnic.SendWR{WRID: msgs, Opcode: rnic.OpSend, Flags: rnic.Signaled})
	if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 {
		t.Fatalf("receive %+v", c)
	}
	for i, n := range sizes {
		at := i * maxLen
		if !bytes.Equal(wbuf[at:at+n], sbuf[at:at+n]) {
			t.Fatalf("WRITE %d (%d bytes) landed wrong", i, n)
		}
		if tail := wbuf[at+n : at+maxLen]; !bytes.Equal(tail, make([]byte, len(tail))) {
			t.Fatalf("WRITE %d (%d bytes) wrote past its end", i, n)
		}
	}
	if cli.qp.Counters().Retransmits.Load() == 0 {
		t.Fatal("no retransmission: the faults did not reach the WRITEs")
	}
	t.Logf("retransmits %d, NAKs %d", cli.qp.Counters().Retransmits.Load(), srv.qp.Counters().NAKs.Load())
}
