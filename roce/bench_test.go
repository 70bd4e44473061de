package roce

import "testing"

// A 4096-byte RC_RDMA_WRITE_ONLY payload packet (BTH+RETH+4096+ICRC).
func benchPacket() []byte {
	h := Header{Opcode: RCWriteOnly, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0x949ef3,
		VA: 0x7f0000001000, RKey: 0x1234, DMALen: 4096}
	b := make([]byte, 0, 4200)
	b = h.Append(b, 4096)
	for i := 0; i < 4096; i++ {
		b = append(b, byte(i))
	}
	return AppendICRC(b, ICRCv4([4]byte{192, 168, 78, 2}, [4]byte{192, 168, 78, 1}, 1, true, 49577, UDPPort, b))
}

var sinkPacket Packet

func BenchmarkParsePacket(b *testing.B) {
	pkt := benchPacket()
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		p, err := ParsePacket(pkt)
		if err != nil {
			b.Fatal(err)
		}
		sinkPacket = p
	}
}

func BenchmarkBuildHeader(b *testing.B) {
	h := Header{Opcode: RCWriteOnlyImm, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0x949ef3,
		VA: 0x7f0000001000, RKey: 0x1234, DMALen: 4096, Imm: 7}
	buf := make([]byte, 0, MaxHeaderLen)
	b.ReportAllocs()
	b.SetBytes(int64(RCWriteOnlyImm.HeaderLen()))
	for b.Loop() {
		h.PSN = h.PSN.Add(1)
		buf = h.Append(buf[:0], 4096)
	}
}

var sinkCRC uint32

func BenchmarkICRC4096(b *testing.B) {
	pkt := benchPacket()
	body := pkt[:len(pkt)-ICRCLen]
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		sinkCRC = ICRCv4([4]byte{192, 168, 78, 2}, [4]byte{192, 168, 78, 1}, 1, true, 49577, UDPPort, body)
	}
}

func BenchmarkVerifyICRC4096(b *testing.B) {
	pkt := benchPacket()
	ip := make([]byte, 20, 20+8+len(pkt))
	ip[0], ip[6], ip[9] = 0x45, 0x40, 17
	be.PutUint16(ip[2:], uint16(20+8+len(pkt)))
	udp := []byte{0xc1, 0xa9, 0x12, 0xb7, 0, 0, 0, 0}
	be.PutUint16(udp[4:], uint16(8+len(pkt)))
	l3 := append(append(ip, udp...), pkt...)
	crc, _ := ICRC(l3[:20], l3[20:28], pkt[:len(pkt)-4])
	l3 = AppendICRC(l3[:len(l3)-4], crc)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if err := VerifyICRC(l3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseREQ(b *testing.B) {
	mad := AppendCMMAD(nil, 1, sampleCMMessages()[0])
	buf := make([]byte, 0, MADLen)
	b.ReportAllocs()
	b.SetBytes(MADLen)
	for b.Loop() {
		h, d, err := ParseMAD(mad)
		if err != nil {
			b.Fatal(err)
		}
		m, err := ParseREQ(d)
		if err != nil {
			b.Fatal(err)
		}
		buf = m.Append(h.Append(buf[:0]))
	}
}

// TestZeroAllocs enforces the hot-path allocation contract outside benchmarks.
func TestZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	pkt := benchPacket()
	h := Header{Opcode: RCWriteOnlyImm, DestQP: 3}
	buf := make([]byte, 0, 4200)
	var src6, dst6 [16]byte
	ip6 := make([]byte, 40)
	ip6[0] = 0x60
	udp := make([]byte, 8)
	for name, f := range map[string]func(){
		"ParsePacket": func() { sinkPacket, _ = ParsePacket(pkt) },
		"Header.Append": func() {
			buf = h.Append(buf[:0], 100)
			buf = AppendPad(buf, 100)
			buf = AppendICRC(buf, 1)
		},
		"ICRCv4":    func() { sinkCRC = ICRCv4([4]byte{1}, [4]byte{2}, 0, true, 1, 2, pkt) },
		"ICRCv6":    func() { sinkCRC = ICRCv6(src6, dst6, 1, 2, pkt) },
		"ICRC(ip6)": func() { sinkCRC, _ = ICRC(ip6, udp, pkt) },
		"AppendCNP": func() { buf = AppendCNP(buf[:0], 5) },
		"Header()":  func() { p, _ := ParsePacket(pkt); h2 := p.Header(); sinkCRC = h2.RKey },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
}
