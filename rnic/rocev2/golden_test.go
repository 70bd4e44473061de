package rocev2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// socketLike hides that a link is a MemLink, so the endpoint applies the
// UDP socket rules (an IPv4 ICRC failing with IP ID 0 is solved for the ID).
type socketLike struct{ *MemLink }

// capRoCE is one captured RoCEv2 datagram.
type capRoCE struct {
	whole      []byte // IP packet
	from, to   netip.AddrPort
	udpPayload []byte
}

// readCapture returns the UDP/4791 datagrams of testdata/name (copies of the interop captures)
// (Ethernet, IPv4 without options), skipping the test when it is missing.
func readCapture(t *testing.T, name string) []capRoCE {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatalf("golden capture missing: %v", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []capRoCE
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 14+28 || data[12] != 0x08 || data[13] != 0x00 {
			continue
		}
		ip := data[14:]
		if ip[0] != 0x45 || ip[9] != 17 {
			continue
		}
		sp, dp := int(ip[20])<<8|int(ip[21]), int(ip[22])<<8|int(ip[23])
		if dp != roce.UDPPort {
			continue
		}
		out = append(out, capRoCE{whole: ip,
			from:       netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), uint16(sp)),
			to:         netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), uint16(dp)),
			udpPayload: ip[28:]})
	}
}

// TestGoldenRxePingpong feeds rxe's ibv_rc_pingpong SEND_ONLY (QPN 0x11, PSN
// 0x949ef3, captured on a tap) to a QP set up as the capture's server and
// checks the delivery and the ACK we send back.
func TestGoldenRxePingpong(t *testing.T) {
	pkts := readCapture(t, "roce_pingpong.pcap")
	if len(pkts) < 2 {
		t.Fatal("no RoCE packets in the capture")
	}
	for _, p := range pkts[:2] {
		if err := roce.VerifyICRC(p.whole); err != nil {
			t.Fatal("capture ICRC:", err)
		}
	}
	n := NewMemNet()
	srvL, _ := n.NewLink(pkts[0].to, Faults{})
	peer, _ := n.NewLink(netip.AddrPortFrom(pkts[0].from.Addr(), roce.UDPPort), Faults{})
	dev, _ := rnic.Open(rnic.Config{StartQPN: 0x11}) // the capture's destination QP
	defer dev.Close()
	// Wrapped so the endpoint treats it as a UDP socket (IPv4 ICRC solved for the IP ID).
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
	if qp.Num() != 0x11 {
		t.Fatalf("QPN %#x", qp.Num())
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, rnic.AccessLocalWrite)
	_ = qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{mr.SGE(0, 64)}})
	_ = qp.PostRecv(&rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{mr.SGE(0, 64)}})
	if _, err := ep.Connect(qp, ConnAttr{Remote: netip.AddrPortFrom(pkts[0].from.Addr(), roce.UDPPort), RemoteQPN: 0x19,
		SendPSN: 0x22, RecvPSN: 0x949ef3}); err != nil {
		t.Fatal(err)
	}
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	batch := func(p capRoCE) {
		ep.input(r, p.udpPayload, p.from, p.to)
		ep.endBatch(r)
	}
	recvACK := func() roce.Packet {
		bufs := [][]byte{make([]byte, MaxPacket)}
		sizes, from := make([]int, 1), make([]netip.AddrPort, 1)
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				peer.Close()
			}
		}()
		k, err := peer.Recv(bufs, sizes, from)
		close(done)
		if err != nil || k != 1 {
			t.Fatal("no ACK:", err)
		}
		b := bufs[0][:sizes[0]]
		a, err := roce.ParsePacket(b)
		if err != nil {
			t.Fatal(err)
		}
		if crc := roce.ICRCAddTransport(icrcStart(from[0], peer.LocalAddr(), len(b)-4), a.Covered()); crc != a.ICRCValue() {
			t.Fatal("ACK ICRC")
		}
		return a
	}
	batch(pkts[0])
	c := wait(t, cq, 1)[0]
	if c.Status != 0 || c.WRID != 1 || c.ByteLen != 64 || !bytes.Equal(buf, pkts[0].udpPayload[12:76]) {
		t.Fatalf("recv %+v", c)
	}
	if ep.ICRCIDSolved.Load() != 1 || ep.ICRCErrors.Load() != 0 {
		t.Fatalf("rxe's IPv4 ID is not 0: expected its ICRC verified by solving for the ID; solved %d, errors %d",
			ep.ICRCIDSolved.Load(), ep.ICRCErrors.Load())
	}
	a := recvACK()
	if a.Opcode() != roce.RCAck || a.BTH.DestQP() != 0x19 || a.BTH.PSN() != 0x949ef3 || a.BTH.PKey() != 0xFFFF ||
		a.AETH.Syndrome() != roce.ACKSyndrome(roce.CreditsUnlimited) || a.AETH.MSN() != 1 {
		t.Fatalf("ACK % x", a.Raw)
	}
	// rxe's retransmission is a duplicate: ACKed again, not delivered again.
	batch(pkts[1])
	if a := recvACK(); a.BTH.PSN() != 0x949ef3 || a.AETH.MSN() != 1 {
		t.Fatalf("duplicate ACK % x", a.Raw)
	}
	if cq.Len() != 0 {
		t.Fatal("duplicate delivered twice")
	}
}

// TestGoldenRxeCMREQ answers rxe's rdma_cm REQ (rping to port 7174) and pins
// the Starting-PSN convention: we send from the REQ's PSN and expect the REP's.
func TestGoldenRxeCMREQ(t *testing.T) {
	pkts := readCapture(t, "roce_cm_req.pcap")
	if len(pkts) < 2 {
		t.Fatal("no CM packets in the capture")
	}
	n := NewMemNet()
	srvL, _ := n.NewLink(pkts[0].to, Faults{})
	peer, _ := n.NewLink(netip.AddrPortFrom(pkts[0].from.Addr(), roce.UDPPort), Faults{})
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	ep := NewEndpoint(dev, socketLike{srvL}, nil)
	defer ep.Close()
	l, err := Listen(ep, ":7174", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	qp, _ := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	ep.input(r, pkts[0].udpPayload, pkts[0].from, pkts[0].to)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := req.REQ()
	// rxe sent the REQ from an entropy source port (0xC000-0xFFFF): it listens on 4791.
	if !roce.IsEntropyPort(pkts[0].from.Port()) {
		t.Fatalf("capture's REQ source port %d", pkts[0].from.Port())
	}
	if m.ServiceID != 0x0000000001061c06 || req.RemoteAddr().IP != pkts[0].from.Addr() ||
		req.RemoteAddr().UDPPort != roce.UDPPort ||
		req.LocalAddr().IP != pkts[0].to.Addr() || m.TransportType != roce.CMTransportRC {
		t.Fatalf("REQ %+v from %v to %v", m, req.RemoteAddr(), req.LocalAddr())
	}
	// A retransmitted REQ while the application decides: MRA.
	ep.input(r, pkts[1].udpPayload, pkts[1].from, pkts[1].to)
	if _, err := req.Accept(qp, ConnParam{}); err != nil {
		t.Fatal(err)
	}
	got := map[roce.AttrID]roce.MADHeader{}
	var rep roce.REP
	bufs := [][]byte{make([]byte, MaxPacket)}
	sizes, from := make([]int, 1), make([]netip.AddrPort, 1)
	for len(got) < 2 {
		if _, err := peer.Recv(bufs, sizes, from); err != nil {
			t.Fatal(err)
		}
		p, err := roce.ParsePacket(bufs[0][:sizes[0]])
		if err != nil || p.Opcode() != roce.UDSendOnly || p.BTH.DestQP() != 1 || p.DETH.QKey() != roce.GSIQKey || p.DETH.SrcQP() != 1 {
			t.Fatalf("not a CM MAD: %v % x", err, bufs[0][:sizes[0]])
		}
		h, data, err := roce.ParseMAD(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		got[h.AttrID] = h
		if h.AttrID == roce.AttrREP {
			rep, _ = roce.ParseREP(data)
		}
	}
	reqH, _, _ := roce.ParseMAD(pkts[0].udpPayload[roce.BTHLen+roce.DETHLen:])
	if got[roce.AttrMRA].TransactionID != reqH.TransactionID || got[roce.AttrREP].TransactionID != reqH.TransactionID {
		t.Fatalf("transaction IDs %+v, REQ %#x", got, reqH.TransactionID)
	}
	if rep.RemoteCommID != m.LocalCommID || rep.LocalQPN != qp.Num() || rep.LocalCommID == 0 {
		t.Fatalf("REP %+v", rep)
	}

	// Starting PSNs the Linux way (cm.c: the active side sends from the REP's
	// Starting PSN and expects the REQ's). rxe's first request carries our
	// REP's PSN: it must be delivered and ACKed at that PSN, not NAKed.
	recvRC := func() roce.Packet {
		t.Helper()
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				peer.Close()
			}
		}()
		for {
			if _, err := peer.Recv(bufs, sizes, from); err != nil {
				t.Fatal("no RC packet:", err)
			}
			p, err := roce.ParsePacket(bufs[0][:sizes[0]])
			if err != nil {
				t.Fatal(err)
			}
			if p.Opcode().Service() == roce.ServiceRC {
				return p
			}
		}
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, rnic.AccessLocalWrite)
	if err := qp.PostRecv(&rnic.RecvWR{WRID: 7, SGL: []rnic.SGE{mr.SGE(0, len(buf))}}); err != nil {
		t.Fatal(err)
	}
	h := roce.Header{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: qp.Num(), AckReq: true, PSN: rep.StartingPSN}
	pkt := append(h.Append(nil, 4), "ping"...)
	pkt = finish(pkt, 4, pkts[0].from, pkts[0].to)
	ep.input(r, pkt, pkts[0].from, pkts[0].to)
	ep.endBatch(r)
	if c := wait(t, cq, 1)[0]; c.Status != 0 || c.WRID != 7 || c.ByteLen != 4 || string(buf[:4]) != "ping" {
		t.Fatalf("rxe's first SEND at the REP's PSN %v: %+v", rep.StartingPSN, c)
	}
	if a := recvRC(); a.Opcode() != roce.RCAck || a.BTH.DestQP() != m.LocalQPN || a.BTH.PSN() != rep.StartingPSN ||
		a.AETH.Syndrome() != roce.ACKSyndrome(roce.CreditsUnlimited) {
		t.Fatalf("answer to rxe's first SEND (REP PSN %v): % x", rep.StartingPSN, a.Raw)
	}
	// Our first request carries the REQ's Starting PSN, where rxe expects it.
	if err := qp.PostSend(&rnic.SendWR{WRID: 8, Opcode: rnic.OpSend}); err != nil {
		t.Fatal(err)
	}
	if p := recvRC(); p.Opcode() != roce.RCSendOnly || p.BTH.DestQP() != m.LocalQPN || p.BTH.PSN() != m.StartingPSN {
		t.Fatalf("our first SEND: opcode %v QP %#x PSN %v, want the REQ's Starting PSN %v", p.Opcode(), p.BTH.DestQP(), p.BTH.PSN(), m.StartingPSN)
	}
}
