package roce

import (
	"bytes"
	"testing"
)

// samplePackets returns one well-formed packet (BTH … ICRC) per valid opcode.
func samplePackets() [][]byte {
	var out [][]byte
	for op := 0; op < 256; op++ {
		o := Opcode(op)
		if !o.Valid() {
			continue
		}
		h := Header{Opcode: o, SE: op&1 == 0, PKey: 0xffff, DestQP: 0x123456, AckReq: true, PSN: 0xfffffe,
			QKey: GSIQKey, SrcQP: 1, VA: 0x1122334455667788, RKey: 0xabcdef01, DMALen: 4096,
			Syndrome: SyndromeACK, MSN: 0x654321, SwapAdd: 7, Compare: 9, OrigData: 0xdead, Imm: 0xcafef00d,
			InvRKey: 0x42, PlacementType: 1, SelectivityLevel: 1}
		n := 5
		if fp := o.Info().FixedPayload; fp >= 0 {
			n = fp
		}
		b := h.Append(nil, n)
		for i := 0; i < n; i++ {
			b = append(b, byte(i+1))
		}
		b = AppendPad(b, n)
		out = append(out, AppendICRC(b, ICRCv4([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 1, true, 0xc000, UDPPort, b)))
	}
	return out
}

// canonical returns b (BTH … pad, without ICRC) with the fields the builder
// writes as zero — reserved bits and pad bytes — cleared.
func canonical(p *Packet) []byte {
	c := append([]byte(nil), p.Covered()...)
	c[4] &^= BTHResv6aMask
	c[8] &^= BTHResv7Mask
	info := p.Opcode().Info()
	if o := info.Offset(HasDETH); o >= 0 {
		c[o+4] = 0
	}
	if o := info.Offset(HasFETH); o >= 0 {
		c[o], c[o+1], c[o+2] = 0, 0, 0
		c[o+3] &= 0x3F
	}
	clear(c[len(c)-len(p.Pad):])
	return c
}

func FuzzParsePacket(f *testing.F) {
	for _, s := range samplePackets() {
		f.Add(s)
	}
	for _, c := range readRoCE(f, "roce_pingpong.pcap")[:2] {
		f.Add(c.body)
	}
	for _, c := range readRoCE(f, "roce_cm_req.pcap") {
		f.Add(c.body)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		if !bytes.Equal(p.Append(nil), b) || p.Len() != len(b) {
			t.Fatal("Append does not reproduce the input")
		}
		info := p.Opcode().Info()
		if got := info.HdrLen + len(p.Payload) + len(p.Pad) + len(p.ICRC); got != len(b) {
			t.Fatalf("views cover %d of %d bytes", got, len(b))
		}
		if len(p.Pad) != p.BTH.PadCnt() || (len(p.Payload)+len(p.Pad))%4 != 0 {
			t.Fatalf("pad %d payload %d", len(p.Pad), len(p.Payload))
		}
		h := p.Header()
		w := h.Append(nil, len(p.Payload))
		w = append(w, p.Payload...)
		w = AppendPad(w, len(p.Payload))
		if want := canonical(&p); !bytes.Equal(w, want) {
			t.Fatalf("rebuilt\n% x\nwant\n% x", w, want)
		}
		w = AppendICRC(w, ICRCv6([16]byte{1}, [16]byte{2}, 0xc001, UDPPort, w))
		q, err := ParsePacket(w)
		if err != nil {
			t.Fatalf("rebuilt packet does not parse: %v", err)
		}
		if q.Header() != h {
			t.Fatalf("header changed: %+v vs %+v", q.Header(), h)
		}
	})
}

func FuzzParseCMMAD(f *testing.F) {
	for _, c := range readRoCE(f, "roce_cm_req.pcap") {
		if p, err := ParsePacket(c.body); err == nil {
			f.Add(p.Payload)
		}
	}
	for _, m := range sampleCMMessages() {
		f.Add(AppendCMMAD(nil, 0x1234, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := ParseMAD(b)
		if err != nil {
			if len(b) >= MADLen {
				t.Fatalf("ParseMAD failed on %d bytes: %v", len(b), err)
			}
			return
		}
		if e := h.Append(nil); !bytes.Equal(e, b[:MADHeaderLen]) || h.Len() != len(e) {
			t.Fatal("MAD header round trip differs")
		}
		checkCMRoundTrip(t, data, ParseREQ)
		checkCMRoundTrip(t, data, ParseREP)
		checkCMRoundTrip(t, data, ParseRTU)
		checkCMRoundTrip(t, data, ParseREJ)
		checkCMRoundTrip(t, data, ParseMRA)
		checkCMRoundTrip(t, data, ParseDREQ)
		checkCMRoundTrip(t, data, ParseDREP)
		checkCMRoundTrip(t, data, ParseSIDRREQ)
		checkCMRoundTrip(t, data, ParseSIDRREP)
	})
}

// checkCMRoundTrip: parse → append gives CMDataLen bytes that parse to the
// same message and re-append identically.
func checkCMRoundTrip[M comparable, PM interface {
	*M
	CMMessage
}](t *testing.T, data []byte, parse func([]byte) (M, error)) {
	t.Helper()
	m, err := parse(data)
	if err != nil {
		t.Fatalf("%T: %v", m, err)
	}
	e := PM(&m).Append(nil)
	if len(e) != CMDataLen || PM(&m).Len() != CMDataLen {
		t.Fatalf("%T: Append wrote %d bytes", m, len(e))
	}
	m2, err := parse(e)
	if err != nil || m2 != m {
		t.Fatalf("%T: re-parse differs: %v\n%+v\n%+v", m, err, m, m2)
	}
	if e2 := PM(&m2).Append(nil); !bytes.Equal(e, e2) {
		t.Fatalf("%T: second Append differs", m)
	}
}

func FuzzParseCMAHeader(f *testing.F) {
	for _, c := range readRoCE(f, "roce_cm_req.pcap") {
		if p, err := ParsePacket(c.body); err == nil {
			_, d, _ := ParseMAD(p.Payload)
			f.Add(d[140:])
		}
	}
	f.Add(make([]byte, 36))
	v6 := make([]byte, 36)
	v6[1] = 0x60
	for i := 4; i < 36; i++ {
		v6[i] = byte(i)
	}
	f.Add(v6)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseCMAHeader(b)
		if err != nil {
			return
		}
		e := h.Append(nil)
		if len(e) != CMAHeaderLen || h.Len() != CMAHeaderLen {
			t.Fatalf("Append wrote %d bytes", len(e))
		}
		if e[0] != b[0] || e[1] != b[1]&0xF0 || e[2] != b[2] || e[3] != b[3] {
			t.Fatalf("fixed fields differ: % x vs % x", e[:4], b[:4])
		}
		switch h.IPVersion {
		case 6:
			if !bytes.Equal(e[4:36], b[4:36]) {
				t.Fatal("IPv6 addresses differ")
			}
		case 4:
			if !bytes.Equal(e[16:20], b[16:20]) || !bytes.Equal(e[32:36], b[32:36]) {
				t.Fatal("IPv4 addresses differ")
			}
		default:
			t.Fatalf("accepted IP version %d", h.IPVersion)
		}
		h2, err := ParseCMAHeader(e)
		if err != nil || h2 != h {
			t.Fatalf("re-parse: %v %+v vs %+v", err, h2, h)
		}
	})
}
