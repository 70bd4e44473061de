package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

const captureDir = "testdata/" // copies of the interop captures

type capPkt struct {
	ip   []byte // IP header
	udp  []byte // UDP header
	body []byte // UDP payload: BTH … ICRC
	l3   []byte // IP header through ICRC
	src  [4]byte
	dst  [4]byte
	id   uint16
	df   bool
	sp   uint16
	dp   uint16
}

// readRoCE returns the RoCEv2 (UDP 4791) packets of a capture, decoded with
// gopacket (an implementation independent of this package).
func readRoCE(t testing.TB, name string) []capPkt {
	t.Helper()
	f, err := os.Open(captureDir + name)
	if err != nil {
		t.Fatalf("golden capture missing: %v", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []capPkt
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		ip4, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip4 == nil || udp == nil || (udp.DstPort != UDPPort && udp.SrcPort != UDPPort) {
			continue
		}
		c := capPkt{ip: ip4.Contents, udp: udp.Contents, body: udp.Payload,
			id: ip4.Id, df: ip4.Flags&layers.IPv4DontFragment != 0,
			sp: uint16(udp.SrcPort), dp: uint16(udp.DstPort)}
		copy(c.src[:], ip4.SrcIP.To4())
		copy(c.dst[:], ip4.DstIP.To4())
		c.l3 = append(append(append([]byte(nil), c.ip...), c.udp...), c.body...)
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no RoCEv2 packets", name)
	}
	return out
}

// rebuild re-encodes a parsed packet from its fields with this package's
// builder and ICRC, for comparison with the original bytes.
func rebuild(p *Packet, c *capPkt) []byte {
	h := p.Header()
	b := h.Append(nil, len(p.Payload))
	b = append(b, p.Payload...)
	b = AppendPad(b, len(p.Payload))
	return AppendICRC(b, ICRCv4(c.src, c.dst, c.id, c.df, c.sp, c.dp, b))
}

func TestGoldenPingpong(t *testing.T) {
	pkts := readRoCE(t, "roce_pingpong.pcap")
	ops := map[Opcode]int{}
	for i := range pkts {
		c := &pkts[i]
		if err := VerifyICRC(c.l3); err != nil {
			t.Errorf("packet %d: VerifyICRC: %v", i, err)
		}
		p, err := ParsePacket(c.body)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		ops[p.Opcode()]++
		if got := rebuild(&p, c); !bytes.Equal(got, c.body) {
			t.Errorf("packet %d (%v): re-encoded\n% x\nwant\n% x", i, p.Opcode(), got, c.body)
		}
	}
	t.Logf("%d RoCE packets: %v", len(pkts), ops)

	// The first packet, as interop-vm.md describes it.
	c := &pkts[0]
	p, _ := ParsePacket(c.body)
	b := p.BTH
	if b.Opcode() != RCSendOnly || b.Opcode().String() != "RC_SEND_ONLY" || b.SE() || b.PKey() != 0xffff ||
		b.DestQP() != 0x11 || !b.AckReq() || b.PSN() != 0x949ef3 || b.PadCnt() != 0 || b.TVer() != 0 ||
		b.FECN() || b.BECN() {
		t.Errorf("BTH fields: op %v se %v pkey %x qp %x ackreq %v psn %v pad %d",
			b.Opcode(), b.SE(), b.PKey(), b.DestQP(), b.AckReq(), b.PSN(), b.PadCnt())
	}
	if len(p.Payload) != 64 || len(p.Pad) != 0 {
		t.Errorf("payload %d pad %d, want 64, 0", len(p.Payload), len(p.Pad))
	}
	if !bytes.Equal(p.ICRC, []byte{0xc7, 0x8b, 0xa4, 0x8f}) {
		t.Errorf("ICRC % x", p.ICRC)
	}
	if c.sp != 49577 || c.dp != UDPPort || binary.BigEndian.Uint16(c.udp[6:]) != 0 || !c.df || c.ip[8] != 64 {
		t.Errorf("IP/UDP: sport %d dport %d udpcsum %x df %v ttl %d", c.sp, c.dp, c.udp[6:], c.df, c.ip[8])
	}
	crc, err := ICRC(c.ip, c.udp, p.Covered())
	if err != nil || crc != p.ICRCValue() {
		t.Errorf("ICRC %08x (%v), carried %08x", crc, err, p.ICRCValue())
	}
	// Any ACKs in the capture must decode to ACK syndromes.
	for i := range pkts {
		p, _ := ParsePacket(pkts[i].body)
		if p.Opcode() == RCAck && !p.AETH.Syndrome().IsACK() {
			t.Errorf("packet %d: ACK with syndrome %v", i, p.AETH.Syndrome())
		}
	}
}

func TestGoldenCM(t *testing.T) {
	pkts := readRoCE(t, "roce_cm_req.pcap")
	var sawREQ, sawREJ bool
	for i := range pkts {
		c := &pkts[i]
		if err := VerifyICRC(c.l3); err != nil {
			t.Errorf("packet %d: VerifyICRC: %v", i, err)
		}
		p, err := ParsePacket(c.body)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if got := rebuild(&p, c); !bytes.Equal(got, c.body) {
			t.Errorf("packet %d: re-encoded packet differs", i)
		}
		if p.Opcode() != UDSendOnly || p.BTH.DestQP() != 1 || p.BTH.PKey() != DefaultPKey ||
			p.DETH.QKey() != GSIQKey || p.DETH.SrcQP() != 1 || len(p.Payload) != MADLen {
			t.Fatalf("packet %d: %v qp %d qkey %x srcqp %d payload %d", i, p.Opcode(),
				p.BTH.DestQP(), p.DETH.QKey(), p.DETH.SrcQP(), len(p.Payload))
		}
		// rxe sets AckReq on QP1 and counts the PSN up per packet sent.
		if !p.BTH.AckReq() || p.BTH.PSN() != PSN(0x0a).Add(uint32(i)) {
			t.Errorf("packet %d: AckReq %v PSN %v", i, p.BTH.AckReq(), p.BTH.PSN())
		}
		hdr, data, err := ParseMAD(p.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.IsCM() || hdr.ClassVersion != CMClassVersion || hdr.Method != MADMethodSend ||
			hdr.TransactionID != 0x2349e8fbb {
			t.Errorf("packet %d: MAD header %+v", i, hdr)
		}
		var enc []byte
		switch hdr.AttrID {
		case AttrREQ:
			sawREQ = true
			m, err := ParseREQ(data)
			if err != nil {
				t.Fatal(err)
			}
			checkGoldenREQ(t, &m)
			enc = m.Append(hdr.Append(nil))
			if a := AppendCMMAD(nil, hdr.TransactionID, &m); !bytes.Equal(a, enc) {
				t.Errorf("AppendCMMAD differs from header+REQ")
			}
		case AttrREJ:
			sawREJ = true
			m, err := ParseREJ(data)
			if err != nil {
				t.Fatal(err)
			}
			// rxe's active side gives up after its retries: REJ(TIMEOUT) of its REQ,
			// with its CA GUID as the 8 bytes of ARI.
			if m.LocalCommID != 0xbb8f9e34 || m.RemoteCommID != 0 || m.MsgRejected != CMMsgOther ||
				m.Reason != RejTimeout || m.Reason.String() != "TIMEOUT" || m.RejectInfoLen != 8 ||
				binary.BigEndian.Uint64(m.ARI[:]) != 0x505400fffe780002 {
				t.Errorf("REJ %+v", m)
			}
			enc = m.Append(hdr.Append(nil))
		default:
			t.Fatalf("packet %d: unexpected attribute %v", i, hdr.AttrID)
		}
		if !bytes.Equal(enc, p.Payload) {
			t.Errorf("packet %d (%v): re-encoded MAD\n% x\nwant\n% x", i, hdr.AttrID, enc, p.Payload)
		}
	}
	if !sawREQ || !sawREJ {
		t.Errorf("saw REQ %v REJ %v", sawREQ, sawREJ)
	}
}

func checkGoldenREQ(t *testing.T, m *REQ) {
	t.Helper()
	type f struct {
		name      string
		got, want any
	}
	for _, x := range []f{
		{"LocalCommID", m.LocalCommID, uint32(0xbb8f9e34)},
		{"ServiceID", m.ServiceID, uint64(0x0000000001061c06)},
		{"ServiceID(TCP,7174)", ServiceID(PortSpaceTCP, 7174), m.ServiceID},
		{"LocalCAGUID", m.LocalCAGUID, uint64(0x505400fffe780002)},
		{"LocalQKey", m.LocalQKey, uint32(0)},
		{"LocalQPN", m.LocalQPN, uint32(0x1a)},
		{"ResponderResources", m.ResponderResources, uint8(1)},
		{"InitiatorDepth", m.InitiatorDepth, uint8(1)},
		{"RemoteCMResponseTimeout", m.RemoteCMResponseTimeout, uint8(20)},
		{"TransportType", m.TransportType, uint8(CMTransportRC)},
		{"EndToEndFlowControl", m.EndToEndFlowControl, false},
		{"StartingPSN", m.StartingPSN, PSN(0x0043f2)},
		{"LocalCMResponseTimeout", m.LocalCMResponseTimeout, uint8(20)},
		{"RetryCount", m.RetryCount, uint8(7)},
		{"PKey", m.PKey, uint16(0xffff)},
		{"PathMTU", m.PathMTU, MTU1024},
		{"RDCExists", m.RDCExists, false},
		{"RNRRetryCount", m.RNRRetryCount, uint8(7)},
		{"MaxCMRetries", m.MaxCMRetries, uint8(15)},
		{"SRQ", m.SRQ, false},
		{"LocalLID", m.Primary.LocalLID, uint16(0xffff)},
		{"RemoteLID", m.Primary.RemoteLID, uint16(0xffff)},
		{"LocalGID", m.Primary.LocalAddr(), netip.MustParseAddr("::ffff:192.168.78.2")},
		{"RemoteGID", m.Primary.RemoteAddr(), netip.MustParseAddr("::ffff:192.168.78.1")},
		{"FlowLabel", m.Primary.FlowLabel, uint32(0x840c5)},
		{"PacketRate", m.Primary.PacketRate, uint8(0)},
		{"TrafficClass", m.Primary.TrafficClass, uint8(0)},
		{"HopLimit", m.Primary.HopLimit, uint8(64)},
		{"SL", m.Primary.SL, uint8(0)},
		{"SubnetLocal", m.Primary.SubnetLocal, false},
		{"LocalACKTimeout", m.Primary.LocalACKTimeout, uint8(19)},
		{"Alternate", m.Alternate, CMPath{}},
	} {
		if x.got != x.want {
			t.Errorf("REQ %s = %v, want %v", x.name, x.got, x.want)
		}
	}
	h, err := ParseCMAHeader(m.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	want := CMAHeader{Version: 0, IPVersion: 4, Port: 0xc761,
		Src: netip.MustParseAddr("192.168.78.2"), Dst: netip.MustParseAddr("192.168.78.1")}
	if h != want {
		t.Errorf("cma_hdr %+v, want %+v", h, want)
	}
	if enc := h.Append(nil); !bytes.Equal(enc, m.PrivateData[:CMAHeaderLen]) {
		t.Errorf("cma_hdr re-encoded % x", enc)
	}
	if n := NewCMAHeader(want.Src, want.Dst, 0xc761); n != want {
		t.Errorf("NewCMAHeader %+v", n)
	}
	if ps, port, ok := ServiceIDPort(m.ServiceID); !ok || ps != PortSpaceTCP || port != 7174 {
		t.Errorf("ServiceIDPort = %x %d %v", ps, port, ok)
	}
}
