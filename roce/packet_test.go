package roce

import (
	"bytes"
	"errors"
	"testing"
)

// The opcode table of rocev2-wire-facts.md §3, written out independently.
var opcodeTable = []struct {
	op      Opcode
	name    string
	headers string
	payload bool
	pos     string // F, M, L, O
}{
	{0x00, "RC_SEND_FIRST", "none", true, "F"},
	{0x01, "RC_SEND_MIDDLE", "none", true, "M"},
	{0x02, "RC_SEND_LAST", "none", true, "L"},
	{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, "L"},
	{0x04, "RC_SEND_ONLY", "none", true, "O"},
	{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, "O"},
	{0x06, "RC_RDMA_WRITE_FIRST", "RETH", true, "F"},
	{0x07, "RC_RDMA_WRITE_MIDDLE", "none", true, "M"},
	{0x08, "RC_RDMA_WRITE_LAST", "none", true, "L"},
	{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, "L"},
	{0x0a, "RC_RDMA_WRITE_ONLY", "RETH", true, "O"},
	{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH+ImmDt", true, "O"},
	{0x0c, "RC_RDMA_READ_REQUEST", "RETH", false, "O"},
	{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", "AETH", true, "F"},
	{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", "none", true, "M"},
	{0x0f, "RC_RDMA_READ_RESPONSE_LAST", "AETH", true, "L"},
	{0x10, "RC_RDMA_READ_RESPONSE_ONLY", "AETH", true, "O"},
	{0x11, "RC_ACKNOWLEDGE", "AETH", false, "O"},
	{0x12, "RC_ATOMIC_ACKNOWLEDGE", "AETH+AtomicAckETH", false, "O"},
	{0x13, "RC_COMPARE_SWAP", "AtomicETH", false, "O"},
	{0x14, "RC_FETCH_ADD", "AtomicETH", false, "O"},
	{0x16, "RC_SEND_LAST_WITH_INVALIDATE", "IETH", true, "L"},
	{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", "IETH", true, "O"},
	{0x1c, "RC_FLUSH", "FETH+RETH", false, "O"},
	{0x1d, "RC_ATOMIC_WRITE", "RETH", true, "O"},
	{0x20, "UC_SEND_FIRST", "none", true, "F"},
	{0x21, "UC_SEND_MIDDLE", "none", true, "M"},
	{0x22, "UC_SEND_LAST", "none", true, "L"},
	{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, "L"},
	{0x24, "UC_SEND_ONLY", "none", true, "O"},
	{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, "O"},
	{0x26, "UC_RDMA_WRITE_FIRST", "RETH", true, "F"},
	{0x27, "UC_RDMA_WRITE_MIDDLE", "none", true, "M"},
	{0x28, "UC_RDMA_WRITE_LAST", "none", true, "L"},
	{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, "L"},
	{0x2a, "UC_RDMA_WRITE_ONLY", "RETH", true, "O"},
	{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH+ImmDt", true, "O"},
	{0x64, "UD_SEND_ONLY", "DETH", true, "O"},
	{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", "DETH+ImmDt", true, "O"},
	{0x81, "CNP", "none", true, ""},
}

func TestOpcodeTable(t *testing.T) {
	seen := map[Opcode]bool{}
	for _, e := range opcodeTable {
		seen[e.op] = true
		o := e.op
		if !o.Valid() || o.String() != e.name || o.Headers().String() != e.headers || o.HasPayload() != e.payload {
			t.Errorf("%#x: valid %v name %s headers %s payload %v", uint8(o), o.Valid(), o, o.Headers(), o.HasPayload())
		}
		pos := ""
		for _, p := range []struct {
			f bool
			s string
		}{{o.IsFirst(), "F"}, {o.IsMiddle(), "M"}, {o.IsLast(), "L"}, {o.IsOnly(), "O"}} {
			if p.f {
				pos += p.s
			}
		}
		if pos != e.pos {
			t.Errorf("%v: position %q want %q", o, pos, e.pos)
		}
		// Header length = BTH + sum of ETH sizes.
		n := BTHLen
		for i := 0; i < numETH; i++ {
			if o.Headers()&(1<<i) != 0 {
				if off := o.Info().Offset(1 << i); off != n {
					t.Errorf("%v: %v at %d, want %d", o, HeaderSet(1<<i), off, n)
				}
				n += int(ethLens[i])
			}
		}
		if o.HeaderLen() != n || n > MaxHeaderLen {
			t.Errorf("%v: HeaderLen %d want %d (max %d)", o, o.HeaderLen(), n, MaxHeaderLen)
		}
		isRCReq := o.Service() == ServiceRC && o.IsRequest()
		if o.RequiresAck() != isRCReq {
			t.Errorf("%v: RequiresAck %v", o, o.RequiresAck())
		}
	}
	for op := 0; op < 256; op++ {
		if o := Opcode(op); o.Valid() != seen[o] {
			t.Errorf("%#x (%v): Valid %v, in table %v", op, o, o.Valid(), seen[o])
		}
	}
	if b := (&Header{Opcode: 0x15, PSN: 1}).Append(nil, 0); len(b) != BTHLen || b[0] != 0x15 || b[11] != 1 {
		t.Errorf("Append with a reserved opcode: % x", b)
	}
	if Opcode(0x15).String() != "OPCODE_0x15" || Opcode(0x15).Info().Offset(HasRETH) != -1 {
		t.Error("reserved opcode")
	}
	if !RCReadRequest.ExpectsResponseData() || !RCFetchAdd.ExpectsResponseData() || RCSendOnly.ExpectsResponseData() ||
		UCWriteOnly.RequiresAck() || !RCAck.IsResponse() || RCAck.IsRequest() {
		t.Error("role flags")
	}
	if RCSendOnly.WithService(ServiceUD) != UDSendOnly || UDSendOnlyImm.Service().String() != "UD" {
		t.Error("service")
	}
	if (HasRETH|HasImmDt|HasDETH).String() != "DETH+RETH+ImmDt" || HeaderSet(0).String() != "none" {
		t.Error("HeaderSet.String")
	}
}

func TestBuildWriteFirst(t *testing.T) {
	h := Header{Opcode: RCWriteFirst, SE: true, MigReq: true, PKey: 0x8001, FECN: true, BECN: true, DestQP: 0xabcdef,
		AckReq: true, PSN: 0x123456, VA: 0x0102030405060708, RKey: 0x11223344, DMALen: 0x10000}
	got := h.Append([]byte{0xee}, 1021) // 3 pad bytes
	want := unhex(t, "ee 06 f0 8001 c0abcdef 80123456 0102030405060708 11223344 00010000")
	if !bytes.Equal(got, want) {
		t.Fatalf("got  % x\nwant % x", got, want)
	}
	b := BTH(got[1:])
	if !b.IsValid() || !b.SE() || !b.MigReq() || b.PadCnt() != 3 || b.PKey() != 0x8001 || !b.FECN() || !b.BECN() ||
		b.DestQP() != 0xabcdef || !b.AckReq() || b.PSN() != 0x123456 || b.Resv6a() != 0 || b.Resv7() != 0 {
		t.Error("BTH accessors")
	}
	r := RETH(got[13:])
	if !r.IsValid() || r.VA() != 0x0102030405060708 || r.RKey() != 0x11223344 || r.DMALen() != 0x10000 {
		t.Error("RETH accessors")
	}
	// Setters clear as well as set.
	b.SetSE(false)
	b.SetFECN(false)
	b.SetAckReq(false)
	b.SetPadCnt(0)
	b.SetTVer(0)
	if got[2] != 0x40 || got[5] != 0x40 || got[9] != 0 {
		t.Errorf("after clearing: % x", got[:13])
	}
	if BTH(make([]byte, 11)).IsValid() || RETH(make([]byte, 15)).IsValid() || AETH(make([]byte, 3)).IsValid() ||
		AtomicETH(make([]byte, 27)).IsValid() || AtomicAckETH(make([]byte, 7)).IsValid() || ImmDt(make([]byte, 3)).IsValid() ||
		IETH(make([]byte, 3)).IsValid() || DETH(make([]byte, 7)).IsValid() || FETH(make([]byte, 3)).IsValid() {
		t.Error("IsValid accepts short views")
	}
}

func TestBuildAndParseAll(t *testing.T) {
	for _, pkt := range samplePackets() {
		p, err := ParsePacket(pkt)
		if err != nil {
			t.Fatalf("% x: %v", pkt, err)
		}
		o := p.Opcode()
		h := p.Header()
		chk := func(name string, ok bool) {
			if !ok {
				t.Errorf("%v: %s", o, name)
			}
		}
		hs := o.Headers()
		chk("DETH", (p.DETH != nil) == (hs&HasDETH != 0))
		chk("RETH", (p.RETH != nil) == (hs&HasRETH != 0))
		chk("AETH", (p.AETH != nil) == (hs&HasAETH != 0))
		chk("AtomicETH", (p.AtomicETH != nil) == (hs&HasAtomicETH != 0))
		chk("AtomicAckETH", (p.AtomicAckETH != nil) == (hs&HasAtomicAckETH != 0))
		chk("ImmDt", (p.ImmDt != nil) == (hs&HasImmDt != 0))
		chk("IETH", (p.IETH != nil) == (hs&HasIETH != 0))
		chk("FETH", (p.FETH != nil) == (hs&HasFETH != 0))
		chk("BTH", h.DestQP == 0x123456 && h.PSN == 0xfffffe && h.AckReq && h.PKey == 0xffff)
		if p.DETH != nil {
			chk("DETH fields", p.DETH.QKey() == GSIQKey && p.DETH.SrcQP() == 1)
		}
		if p.RETH != nil {
			chk("RETH fields", p.RETH.VA() == 0x1122334455667788 && p.RETH.RKey() == 0xabcdef01 && p.RETH.DMALen() == 4096)
		}
		if p.AtomicETH != nil {
			a := p.AtomicETH
			chk("AtomicETH fields", a.VA() == 0x1122334455667788 && a.RKey() == 0xabcdef01 && a.SwapAdd() == 7 && a.Compare() == 9)
		}
		if p.AETH != nil {
			chk("AETH fields", p.AETH.Syndrome() == SyndromeACK && p.AETH.MSN() == 0x654321)
		}
		if p.AtomicAckETH != nil {
			chk("AtomicAckETH", p.AtomicAckETH.OrigData() == 0xdead)
		}
		if p.ImmDt != nil {
			chk("ImmDt", p.ImmDt.Imm() == 0xcafef00d)
		}
		if p.IETH != nil {
			chk("IETH", p.IETH.RKey() == 0x42)
		}
		if p.FETH != nil {
			chk("FETH", p.FETH.PlacementType() == 1 && p.FETH.SelectivityLevel() == 1)
		}
		want := 5
		if fp := o.Info().FixedPayload; fp >= 0 {
			want = fp
		}
		chk("payload", len(p.Payload) == want && len(p.Pad) == PadLen(want) && len(p.ICRC) == 4)
		crc := ICRCv4([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 1, true, 0xc000, UDPPort, p.Covered())
		chk("ICRC", crc == p.ICRCValue())
	}
}

func TestParseErrors(t *testing.T) {
	ok := samplePackets()[4] // RC_SEND_ONLY, 5 bytes payload, 3 pad
	if Opcode(ok[0]) != RCSendOnly {
		t.Fatal("sample order")
	}
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), ok...)) }
	ack := (&Header{Opcode: RCAck}).Append(nil, 0)
	for _, tc := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrShort},
		{"reserved opcode 0x15", mut(func(b []byte) []byte { b[0] = 0x15; return b }), ErrBadOpcode},
		{"RD opcode", mut(func(b []byte) []byte { b[0] = 0x44; return b }), ErrBadOpcode},
		{"UC read", mut(func(b []byte) []byte { b[0] = 0x2c; return b }), ErrBadOpcode},
		{"UD send first", mut(func(b []byte) []byte { b[0] = 0x60; return b }), ErrBadOpcode},
		{"TVer 1", mut(func(b []byte) []byte { b[1] |= 1; return b }), ErrBadVersion},
		{"not multiple of 4", mut(func(b []byte) []byte { return append(b, 0) }), ErrBadLength},
		{"pad > payload", append(append((&Header{Opcode: RCSendOnly}).Append(nil, 1)[:12:12], 0, 0, 0, 0)[:0], 0x04, 0x30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9), ErrBadPad},
		{"ACK with payload", append(append(ack, 1, 2, 3, 4), 0, 0, 0, 0), ErrPayload},
		{"ACK with pad", func() []byte {
			b := append(append([]byte(nil), ack...), 0, 0, 0, 0, 0, 0, 0, 0)
			b[1] |= 0x30
			return b
		}(), ErrPayload},
		{"atomic write 4 bytes", append((&Header{Opcode: RCAtomicWrite}).Append(nil, 4), 1, 2, 3, 4, 0, 0, 0, 0), ErrPayload},
		{"CNP without reserved bytes", append((&Header{Opcode: CNP}).Append(nil, 0), 0, 0, 0, 0), ErrPayload},
	} {
		if _, err := ParsePacket(tc.b); !errors.Is(err, tc.err) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
		}
	}
	// 0 bytes of payload, pad 0: fine.
	b := append((&Header{Opcode: RCSendOnly}).Append(nil, 0), 1, 2, 3, 4)
	if p, err := ParsePacket(b); err != nil || len(p.Payload) != 0 {
		t.Errorf("empty SEND: %v", err)
	}
	// A CNP built with AppendCNP parses.
	cnp := AppendICRC(AppendCNP(nil, 0x18), 0)
	if p, err := ParsePacket(cnp); err != nil || p.Opcode() != CNP || !p.BTH.BECN() || p.BTH.DestQP() != 0x18 ||
		p.BTH.PKey() != 0xffff || len(p.Payload) != 16 {
		t.Errorf("CNP: %v", err)
	}
}

// TestCNPVector decodes the ConnectX-4 Lx CNP of the facts file.
func TestCNPVector(t *testing.T) {
	pkt := append(unhex(t, icrcVectors[0].pkt), unhex(t, icrcVectors[0].icrc)...)
	_, _, body, err := SplitIPPacket(pkt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePacket(body)
	if err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != CNP || !p.BTH.BECN() || p.BTH.DestQP() != 0x000118 || p.BTH.PSN() != 0 {
		t.Errorf("CNP fields: %v becn %v qp %x", p.Opcode(), p.BTH.BECN(), p.BTH.DestQP())
	}
	if got := AppendCNP(nil, 0x118); !bytes.Equal(got, p.Covered()) {
		t.Errorf("AppendCNP\n% x\nwant\n% x", got, p.Covered())
	}
}

// TestUCVector decodes the scapy UC SEND_ONLY example.
func TestUCVector(t *testing.T) {
	pkt := append(unhex(t, icrcVectors[1].pkt), unhex(t, icrcVectors[1].icrc)...)
	_, _, body, _ := SplitIPPacket(pkt)
	p, err := ParsePacket(body)
	if err != nil {
		t.Fatal(err)
	}
	b := p.BTH
	if p.Opcode() != UCSendOnly || !b.MigReq() || b.PadCnt() != 2 || b.DestQP() != 0xd3 || b.PSN() != 0xcf1710 ||
		len(p.Payload) != 18 || len(p.Pad) != 2 {
		t.Errorf("UC: %v mig %v pad %d qp %x psn %v payload %d", p.Opcode(), b.MigReq(), b.PadCnt(), b.DestQP(), b.PSN(), len(p.Payload))
	}
}

// TestPacketTruncation: the packet length comes from the UDP datagram, so a
// prefix of a valid packet can itself be well-formed. Every prefix shorter
// than the opcode's headers + ICRC must fail with ErrShort, every prefix of
// an opcode with a fixed payload must fail, and no prefix may parse to more
// payload than the original carried.
func TestPacketTruncation(t *testing.T) {
	for _, pkt := range samplePackets() {
		full, _ := ParsePacket(pkt)
		o := full.Opcode()
		for n := 0; n < len(pkt); n++ {
			p, err := ParsePacket(pkt[:n])
			switch {
			case n < o.HeaderLen()+ICRCLen:
				if !errors.Is(err, ErrShort) {
					t.Fatalf("%v: prefix %d: %v", o, n, err)
				}
			case o.Info().FixedPayload >= 0:
				if err == nil {
					t.Fatalf("%v: prefix %d parsed", o, n)
				}
			case err == nil && len(p.Payload) >= len(full.Payload):
				t.Fatalf("%v: prefix %d has payload %d", o, n, len(p.Payload))
			}
		}
	}
	// IP-level: a truncated IP packet fails ICRC verification or splitting.
	pkt := append(unhex(t, icrcVectors[1].pkt), unhex(t, icrcVectors[1].icrc)...)
	for n := 0; n < len(pkt); n++ {
		if err := VerifyICRC(pkt[:n]); err == nil {
			t.Fatalf("IP prefix %d verified", n)
		}
	}
}
