package rocev2

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// TestFinishJoinedMatchesFinishTx: a packet whose payload CRC was computed apart and
// joined (finishJoined) is byte for byte the packet finishTx builds by running the ICRC
// over it, for every opcode's headers, the IB MTUs and other lengths, payload in the
// packet buffer or apart (gather), IPv4 and IPv6; and its GSO IP-ID fix-up
// (roce.ICRCIPv4IDDelta, as UDPLink.fixIDs applies it) gives the ICRC computed with that
// ID, so a receiver that checks the real header exactly accepts it.
func TestFinishJoinedMatchesFinishTx(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	hdrs := []roce.Header{
		{Opcode: roce.RCWriteFirst, PKey: 0xffff, DestQP: 0x12345, PSN: 7, VA: 0x1122334455667788, RKey: 0xabcdef01, DMALen: 1 << 20},
		{Opcode: roce.RCWriteMiddle, PKey: 0xffff, DestQP: 0x12345, PSN: 8, AckReq: true},
		{Opcode: roce.RCWriteLastImm, PKey: 0x8001, DestQP: 0x12345, PSN: 9, Imm: 0xdeadbeef, SE: true},
		{Opcode: roce.RCSendOnlyInv, PKey: 0xffff, DestQP: 0x12345, PSN: 0xffffff, InvRKey: 0x55},
	}
	addrs := [][2]netip.AddrPort{
		{netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")},
		{netip.MustParseAddrPort("[fd00::1]:50000"), netip.MustParseAddrPort("[fd00::2]:4791")},
	}
	mem := make([]byte, 8192+64)
	for i := range mem {
		mem[i] = byte(r.Uint32())
	}
	for _, a := range addrs {
		c := &Conn{local: a[0], remote: a[1]}
		ref := &Conn{local: a[0], remote: a[1]}
		for _, n := range []int{256, 512, 1024, 2048, 4096, 1, 3, 1001, 4097} {
			for hi, h := range hdrs {
				for _, gathered := range []bool{false, true} {
					off := r.IntN(64)
					payload := mem[off : off+n]
					hb := h.Append(make([]byte, 0, MaxPacket), n)
					hl := len(hb)
					var want, got []byte
					var body []byte
					if gathered {
						body = payload
						want = ref.finishTx(append([]byte(nil), hb...), body, n)
						got = c.finishJoined(append(make([]byte, 0, MaxPacket), hb...), body, n, roce.ICRCPart(payload))
					} else {
						full := append(append(make([]byte, 0, MaxPacket), hb...), payload...)
						want = ref.finishTx(append(make([]byte, 0, MaxPacket), full...), nil, n)
						got = c.finishJoined(full[:hl], nil, n, roce.ICRCPart(payload))
					}
					name := fmt.Sprintf("%v n=%d hdr %d gathered=%v", a[0].Addr(), n, hi, gathered)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: joined packet differs\n got % x\nwant % x", name, got[max(0, len(got)-8):], want[max(0, len(want)-8):])
					}
					// The whole packet's ICRC, computed directly from its bytes.
					whole := append(append([]byte(nil), hb...), payload...)
					whole = roce.AppendPad(whole, n)
					icrc := got[len(got)-roce.ICRCLen:]
					var direct uint32
					if a[0].Addr().Is4() {
						direct = roce.ICRCv4(a[0].Addr().As4(), a[1].Addr().As4(), 0, true, a[0].Port(), a[1].Port(), whole)
					} else {
						direct = roce.ICRCv6(a[0].Addr().As16(), a[1].Addr().As16(), a[0].Port(), a[1].Port(), whole)
					}
					if !bytes.Equal(icrc, roce.AppendICRC(nil, direct)) {
						t.Fatalf("%s: ICRC % x, direct %08x", name, icrc, direct)
					}
					if !a[0].Addr().Is4() {
						continue
					}
					for _, id := range []uint16{1, 2, 37, 63} {
						fixed := direct ^ roce.ICRCIPv4IDDelta(id, len(whole))
						if w := roce.ICRCv4(a[0].Addr().As4(), a[1].Addr().As4(), id, true, a[0].Port(), a[1].Port(), whole); fixed != w {
							t.Fatalf("%s: ICRC fixed for IP ID %d %08x, computed with it %08x", name, id, fixed, w)
						}
					}
				}
			}
		}
	}
}

// TestPCRCJob: a job's CRCs, whoever computes them, are the CRCs of the right bytes of
// a message spread over segments whose boundaries fall inside packets; a closed job
// reads nothing more.
func TestPCRCJob(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	msg := make([]byte, 10*1024+100)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	segs := rnic.Segs{msg[:1000], msg[1000:1024], msg[1024:5000], msg[5000:5001], msg[5001:]}
	e := &Endpoint{}
	const mtu = 1024
	w := &rnic.SendWQE{Segs: segs, Len: uint64(len(msg))}
	np := len(msg) / mtu
	for round := range 3 {
		j := e.getPCRC(w, mtu, np)
		switch round {
		case 0: // the helper computes all
			j.compute()
		case 1: // the connection computes the even ones first
			for k := 0; k < np; k += 2 {
				if crc, ok := j.part(k, msg[k*mtu:(k+1)*mtu]); !ok || crc != roce.ICRCPart(msg[k*mtu:(k+1)*mtu]) {
					t.Fatalf("round %d packet %d: part %08x %v", round, k, crc, ok)
				}
			}
			j.compute()
		case 2: // closed before the helper ran: it computes nothing
			j.close()
			j.compute()
			for k := range np {
				if v := j.st[k].Load(); v != 0 {
					t.Fatalf("closed job: packet %d state %x", k, v)
				}
			}
			if len(j.segs) != 0 {
				t.Fatal("closed job holds the WQE's memory")
			}
			e.releasePCRC(j)
			e.releasePCRC(j)
			continue
		}
		for k := range np {
			v := j.st[k].Load()
			want := roce.ICRCPart(msg[k*mtu : (k+1)*mtu])
			if v&pcrcReady == 0 || uint32(v) != want {
				t.Fatalf("round %d packet %d: state %x, want ready %08x", round, k, v, want)
			}
			// The connection takes the stored value without reading the payload.
			if crc, ok := j.part(k, nil); !ok || crc != want {
				t.Fatalf("round %d packet %d: part %08x", round, k, crc)
			}
		}
		if _, ok := j.part(np, nil); ok {
			t.Fatal("part past the job's packets")
		}
		j.close()
		e.releasePCRC(j)
		e.releasePCRC(j)
	}
	if len(e.crcFree) != 1 {
		t.Fatalf("%d jobs kept, want the one reused", len(e.crcFree))
	}
}

// TestCRCQueueDropsOldest: a queue no helper drains keeps the newest crcQueueLen jobs
// and gives back the oldest for release.
func TestCRCQueueDropsOldest(t *testing.T) {
	var q crcQueue
	jobs := make([]*pcrc, crcQueueLen+3)
	for i := range jobs {
		jobs[i] = new(pcrc)
		var want *pcrc
		if i >= crcQueueLen {
			want = jobs[i-crcQueueLen]
		}
		if d := q.push(jobs[i]); d != want {
			t.Fatalf("push %d dropped %p, want %p", i, d, want)
		}
	}
	for i := 3; i < len(jobs); i++ {
		if j := q.pop(); j != jobs[i] {
			t.Fatalf("pop %d: wrong job", i)
		}
	}
	if q.pop() != nil {
		t.Fatal("queue not empty")
	}
}

// TestPayloadCRCOnTheWire sends RC WRITEs and SENDs whose payload CRCs are all computed
// by the helper (Endpoint.crcHelpNow) to a receiver that drops any packet with a wrong
// ICRC: over a MemLink, which checks every ICRC exactly with a 10 % loss (the
// retransmissions reuse the stored CRCs), and over UDP with GSO, whose segments' ICRCs
// are fixed for their IP IDs (the receiver solves each ID: a wrong ICRC fails with
// probability 1 - 2^-16). The data must arrive, with no ICRC error.
func TestPayloadCRCOnTheWire(t *testing.T) {
	type link struct {
		name string
		mk   func(t *testing.T) (cli, srv *side)
	}
	links := []link{
		{"memlink-loss", func(t *testing.T) (*side, *side) {
			return newPair(t, &pairOpts{cliF: Faults{Drop: 0.1, Seed: 7}, cap: rnic.QPCap{MaxSendWR: 64}})
		}},
		{"udp-gso", func(t *testing.T) (*side, *side) {
			cfg := DefaultConfig()
			cfg.MTU = roce.MTU1024
			return udpPair(t, "127.0.0.1:0", &UDPOptions{GSO: true, GRO: true}, cfg)
		}},
	}
	for _, l := range links {
		t.Run(l.name, func(t *testing.T) {
			cli, srv := l.mk(t)
			cli.ep.crcHelpNow = true
			sizes := []int{1024, 4096 + 17, 3000, 64 << 10, 1023, 20 << 10}
			total := 0
			for _, n := range sizes {
				total += n
			}
			smr, sbuf := cli.reg(t, total, allAccess)
			fill(sbuf, 11)
			wmr, wbuf := srv.reg(t, total, allAccess)
			rmr, rbuf := srv.reg(t, total, allAccess)
			off := 0
			for i, n := range sizes {
				// two SGEs with a boundary inside a packet
				k := n / 3
				sgl := []rnic.SGE{smr.SGE(off, k), smr.SGE(off+k, n-k)}
				post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: sgl,
					RemoteAddr: wmr.Addr() + uint64(off), RKey: wmr.RKey()})
				postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(off, n)}})
				post(t, cli.qp, &rnic.SendWR{WRID: uint64(100 + i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: sgl})
				off += n
			}
			for _, c := range wait(t, cli.scq, 2*len(sizes)) {
				if c.Status != 0 {
					t.Fatalf("%+v", c)
				}
			}
			wait(t, srv.rcq, len(sizes))
			if !bytes.Equal(wbuf, sbuf) || !bytes.Equal(rbuf, sbuf) {
				t.Fatal("data differs")
			}
			if e := srv.ep.ICRCErrors.Load(); e != 0 {
				t.Fatalf("%d ICRC errors", e)
			}
			cli.conn.mu.Lock()
			joined := cli.conn.txJoined
			cli.conn.mu.Unlock()
			cnt := cli.qp.Counters().Snapshot()
			t.Logf("%d packets joined, %d retransmissions, %d IDs solved", joined, cnt.Retransmits, srv.ep.ICRCIDSolved.Load())
			if joined < uint64(2*(total/1024-len(sizes))) {
				t.Fatalf("%d packets sent with a joined CRC, want every full packet's", joined)
			}
			if l.name == "memlink-loss" && cnt.Retransmits == 0 {
				t.Fatal("no retransmission")
			}
			if l.name == "udp-gso" && cli.ep.link.(*UDPLink).GSO() && srv.ep.ICRCIDSolved.Load() == 0 {
				t.Fatal("no GSO segment with a non-zero IP ID")
			}
		})
	}
}
