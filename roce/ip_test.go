package roce

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestRebuildCapturedIPPackets re-creates every captured rxe packet from the
// IP header on, from its decoded fields, with this package alone.
func TestRebuildCapturedIPPackets(t *testing.T) {
	for _, name := range []string{"roce_pingpong.pcap", "roce_cm_req.pcap"} {
		for i, c := range readRoCE(t, name) {
			p, err := ParsePacket(c.body)
			if err != nil {
				t.Fatal(err)
			}
			h := p.Header()
			n := h.Opcode.HeaderLen() + len(p.Payload) + len(p.Pad)
			b := AppendIPv4UDP(nil, c.src, c.dst, c.ip[1], c.ip[8], c.id, c.sp, c.dp, n)
			start := len(b)
			b = h.Append(b, len(p.Payload))
			b = append(b, p.Payload...)
			b = AppendPad(b, len(p.Payload))
			b = AppendICRC(b, ICRCv4(c.src, c.dst, c.id, true, c.sp, c.dp, b[start:]))
			if !bytes.Equal(b, c.l3) {
				t.Fatalf("%s #%d:\n% x\nwant\n% x", name, i, b, c.l3)
			}
		}
	}
}

func TestIPv6UDPHeader(t *testing.T) {
	var src, dst [16]byte
	src[15], dst[15] = 1, 2
	body := (&Header{Opcode: RCAck, DestQP: 9, Syndrome: SyndromeACK}).Append(nil, 0)
	b := AppendIPv6UDP(nil, src, dst, 0xb8, 64, 0x12345, 0xc123, UDPPort, len(body))
	b = append(b, body...)
	b = AppendICRC(b, ICRCv6(src, dst, 0xc123, UDPPort, body))
	// Decode with gopacket, independently.
	pk := gopacket.NewPacket(b, layers.LayerTypeIPv6, gopacket.Default)
	ip6, _ := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip6 == nil || udp == nil || ip6.TrafficClass != 0xb8 || ip6.FlowLabel != 0x12345 || ip6.HopLimit != 64 ||
		int(ip6.Length) != 8+len(body)+4 || udp.DstPort != UDPPort || int(udp.Length) != 8+len(body)+4 {
		t.Fatalf("gopacket decode: %+v %+v", ip6, udp)
	}
	if err := VerifyICRC(b); err != nil {
		t.Fatal(err)
	}
}

func TestIPv4Checksum(t *testing.T) {
	// The CNP vector's header carries checksum 0x9161.
	h := unhex(t, "45c2003c718c400040110000 0a001101 0a001201")
	if c := ipv4Checksum(h); c != 0x9161 {
		t.Fatalf("checksum %04x", c)
	}
}
