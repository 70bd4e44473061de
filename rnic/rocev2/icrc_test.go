package rocev2

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// TestICRCCorruptRxeDropped flips every bit of rxe's captured SEND_ONLY
// (non-zero IPv4 ID; BTH byte 4, which the ICRC masks, excepted) and feeds
// each corrupt copy to an endpoint on a UDP-socket-like link: each must be
// dropped and counted, with no delivery and no NAK (rxe drops silently);
// then the intact packet is delivered and ACKed as the first reply.
func TestICRCCorruptRxeDropped(t *testing.T) {
	pkts := readCapture(t, "roce_pingpong.pcap")
	if len(pkts) < 1 {
		t.Fatal("no RoCE packets in the capture")
	}
	orig := pkts[0]
	if binary.BigEndian.Uint16(orig.whole[4:]) == 0 {
		t.Fatal("capture's IP ID is 0: nothing to solve")
	}
	n := NewMemNet()
	srvL, _ := n.NewLink(orig.to, Faults{})
	peer, _ := n.NewLink(netip.AddrPortFrom(orig.from.Addr(), roce.UDPPort), Faults{})
	dev, _ := rnic.Open(rnic.Config{StartQPN: 0x11}) // the capture's destination QP
	defer dev.Close()
	ep := NewEndpoint(dev, socketLike{srvL}, nil)
	defer ep.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	var qp *rnic.QP
	for qp == nil || qp.Num() < 0x11 {
		var err error
		if qp, err = dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq}); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, rnic.AccessLocalWrite)
	_ = qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{mr.SGE(0, 64)}})
	if _, err := ep.Connect(qp, ConnAttr{Remote: netip.AddrPortFrom(orig.from.Addr(), roce.UDPPort), RemoteQPN: 0x19,
		SendPSN: 0x22, RecvPSN: 0x949ef3}); err != nil {
		t.Fatal(err)
	}
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	batch := func(b []byte) {
		ep.input(r, b, orig.from, orig.to)
		ep.endBatch(r)
	}
	bad := append([]byte(nil), orig.udpPayload...)
	flips := 0
	for off := range bad {
		if off == 4 {
			continue
		}
		for bit := range 8 {
			bad[off] ^= 1 << bit
			before := ep.ICRCErrors.Load() + ep.RxDropped.Load()
			batch(bad)
			if got := ep.ICRCErrors.Load() + ep.RxDropped.Load(); got != before+1 {
				t.Fatalf("flip of byte %d bit %d not dropped (drops %d → %d)", off, bit, before, got)
			}
			bad[off] ^= 1 << bit
			flips++
		}
	}
	if ep.ICRCIDSolved.Load() != 0 || cq.Len() != 0 {
		t.Fatalf("a corrupt packet was accepted: solved %d, completions %d", ep.ICRCIDSolved.Load(), cq.Len())
	}
	t.Logf("%d flips: %d ICRC errors, %d unparsable", flips, ep.ICRCErrors.Load(), ep.RxDropped.Load())
	if ep.ICRCErrors.Load() < uint64(flips)/2 {
		t.Fatal("most flips should reach the ICRC check")
	}
	batch(orig.udpPayload)
	if c := wait(t, cq, 1)[0]; c.Status != 0 || c.WRID != 1 || !bytes.Equal(buf, orig.udpPayload[12:76]) {
		t.Fatalf("recv %+v", c)
	}
	if ep.ICRCIDSolved.Load() != 1 {
		t.Fatalf("ID-solved %d, want 1", ep.ICRCIDSolved.Load())
	}
	// The first packet the peer sees is the ACK: no NAK was sent for the corrupt copies.
	bufs := [][]byte{make([]byte, MaxPacket)}
	sizes, from := make([]int, 1), make([]netip.AddrPort, 1)
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			peer.Close()
		}
	}()
	k, err := peer.Recv(bufs, sizes, from)
	close(done)
	if err != nil || k != 1 {
		t.Fatal("no ACK:", err)
	}
	a, err := roce.ParsePacket(bufs[0][:sizes[0]])
	if err != nil || a.Opcode() != roce.RCAck || a.BTH.PSN() != 0x949ef3 ||
		a.AETH.Syndrome() != roce.ACKSyndrome(roce.CreditsUnlimited) || a.AETH.MSN() != 1 {
		t.Fatalf("first reply % x (%v), want the ACK of PSN 0x949ef3", bufs[0][:sizes[0]], err)
	}
}

// TestICRCStrictRejectsSolved: StrictICRC drops an IPv4 packet that only
// verifies with a non-zero IP ID.
func TestICRCStrictRejectsSolved(t *testing.T) {
	pkts := readCapture(t, "roce_pingpong.pcap")
	n := NewMemNet()
	l, _ := n.NewLink(pkts[0].to, Faults{})
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	cfg := DefaultConfig()
	cfg.StrictICRC = true
	ep := NewEndpoint(dev, socketLike{l}, cfg)
	defer ep.Close()
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	ep.input(r, pkts[0].udpPayload, pkts[0].from, pkts[0].to)
	if ep.ICRCErrors.Load() != 1 || ep.ICRCIDSolved.Load() != 0 {
		t.Fatalf("strict: errors %d, solved %d", ep.ICRCErrors.Load(), ep.ICRCIDSolved.Load())
	}
}

// TestUDGRHCarriesSolvedIPID: a UD receive's GRH holds the sender's IPv4 ID
// as solved from the ICRC (rxe copies the real IP header there).
func TestUDGRHCarriesSolvedIPID(t *testing.T) {
	n := NewMemNet()
	from := netip.MustParseAddrPort("10.0.0.1:4791")
	to := netip.MustParseAddrPort("10.0.0.2:4791")
	l, _ := n.NewLink(to, Faults{})
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	ep := NewEndpoint(dev, socketLike{l}, nil)
	defer ep.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, _ := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	const qkey = 0x1234567
	if _, err := ep.CreateUD(qp, qkey); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, GRHLen+16)
	mr, _ := pd.RegMR(buf, rnic.AccessLocalWrite)
	_ = qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{mr.SGE(0, len(buf))}})
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: qp.Num(), PSN: 5, QKey: qkey, SrcQP: 0x33}
	b := h.Append(nil, 16)
	b = append(b, "sixteen bytes!!!"...)
	const id = 0xBEEF
	b = roce.AppendICRC(b, roce.ICRCv4(from.Addr().As4(), to.Addr().As4(), id, true, from.Port(), to.Port(), b))
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	ep.input(r, b, from, to)
	if c := wait(t, cq, 1)[0]; c.Status != 0 || c.ByteLen != GRHLen+16 {
		t.Fatalf("%+v", c)
	}
	if got := binary.BigEndian.Uint16(buf[24:]); got != id || ep.ICRCIDSolved.Load() != 1 {
		t.Fatalf("GRH IP ID %#04x (solved %d), want %#04x", got, ep.ICRCIDSolved.Load(), id)
	}
	// The GRH's IPv4 header checksum covers the ID.
	var sum uint32
	for i := 20; i < 40; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(buf[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	if sum != 0xFFFF {
		t.Fatalf("GRH IPv4 checksum does not verify: % x", buf[20:40])
	}
}

// BenchmarkInputICRCIDSolved is the endpoint's receive check of a 4 KiB
// RC WRITE with a non-zero IPv4 ID (parse, ICRC with ID 0, solve) up to the
// QP lookup, which finds no QP: the packet is counted and dropped.
func BenchmarkInputICRCIDSolved(b *testing.B) {
	benchInput(b, 0x4321, false)
}

// BenchmarkInputICRCExact is the same packet sent with IP ID 0: verified
// exactly, no solving (the baseline for the solver's cost).
func BenchmarkInputICRCExact(b *testing.B) {
	benchInput(b, 0, false)
}

// BenchmarkInputICRCCorrupt is the ID-solved packet corrupted: dropped as
// an ICRC error after the solver finds no ID.
func BenchmarkInputICRCCorrupt(b *testing.B) {
	benchInput(b, 0x4321, true)
}

func benchInput(b *testing.B, id uint16, corrupt bool) {
	n := NewMemNet()
	from := netip.MustParseAddrPort("10.0.0.1:4791")
	to := netip.MustParseAddrPort("10.0.0.2:4791")
	l, _ := n.NewLink(to, Faults{})
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	ep := NewEndpoint(dev, socketLike{l}, nil)
	defer ep.Close()
	h := roce.Header{Opcode: roce.RCWriteOnly, PKey: roce.DefaultPKey, DestQP: 0xabcd, PSN: 1, VA: 0x1000, RKey: 7, DMALen: 4096}
	pkt := h.Append(nil, 4096)
	pkt = append(pkt, make([]byte, 4096)...)
	pkt = roce.AppendICRC(pkt, roce.ICRCv4(from.Addr().As4(), to.Addr().As4(), id, true, from.Port(), to.Port(), pkt))
	if corrupt {
		pkt[100] ^= 0x10
	}
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		ep.input(r, pkt, from, to)
	}
	if corrupt && (ep.ICRCErrors.Load() == 0 || ep.ICRCIDSolved.Load() != 0) ||
		!corrupt && ((ep.ICRCIDSolved.Load() == 0) != (id == 0) || ep.ICRCErrors.Load() != 0) {
		b.Fatalf("errors %d solved %d", ep.ICRCErrors.Load(), ep.ICRCIDSolved.Load())
	}
}
