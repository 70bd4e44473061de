package rdmap

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/ddp"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Figure 4 of RFC 5040 and Figure 2 of RFC 7306 as a table.
func TestOpcodeRules(t *testing.T) {
	type rule struct {
		op        Opcode
		name      string
		tagged    bool
		qn        int // -1: N/A
		inv, se   bool
		payload   bool
		hdrLen    int
		extension bool
	}
	for _, r := range []rule{
		{0, "RDMA Write", true, -1, false, false, true, 0, false},
		{1, "RDMA Read Request", false, 1, false, false, false, 28, false},
		{2, "RDMA Read Response", true, -1, false, false, true, 0, false},
		{3, "Send", false, 0, false, false, true, 0, false},
		{4, "Send with Invalidate", false, 0, true, false, true, 0, false},
		{5, "Send with SE", false, 0, false, true, true, 0, false},
		{6, "Send with SE and Invalidate", false, 0, true, true, true, 0, false},
		{7, "Terminate", false, 2, false, false, false, 4, false},
		{8, "Immediate Data", false, 0, false, false, false, 8, true},
		{9, "Immediate Data with SE", false, 0, false, true, false, 8, true},
		{10, "Atomic Request", false, 1, false, false, false, 52, true},
		{11, "Atomic Response", false, 3, false, false, false, 12, true},
	} {
		o := r.op
		qn, ok := o.Queue()
		if o.String() != r.name || o.Tagged() != r.tagged || o.CarriesInvalidateSTag() != r.inv ||
			o.SolicitedEvent() != r.se || o.CarriesPayload() != r.payload || o.HeaderLen() != r.hdrLen ||
			o.Extension() != r.extension || !o.Known() || ok != (r.qn >= 0) || (ok && int(qn) != r.qn) ||
			o.IsSend() != (o >= 3 && o <= 6) {
			t.Errorf("opcode %d: rule mismatch (%v)", o, r)
		}
	}
	for o := Opcode(12); o < 16; o++ {
		if o.Known() || o.Extension() || o.Tagged() || o.HeaderLen() != 0 {
			t.Errorf("opcode %d known", o)
		}
		if _, ok := o.Queue(); ok {
			t.Errorf("opcode %d has a queue", o)
		}
	}
	if OpExperimental.String() != "Experimental" || Opcode(12).String() != "opcode 0xc" {
		t.Error("names of unknown opcodes")
	}
}

// siw-interop-facts.md §1: the 16-bit DDP/RDMAP control words with L set.
func TestControlWords(t *testing.T) {
	for op, word := range map[Opcode]uint16{
		OpWrite: 0xC140, OpReadRequest: 0x4141, OpReadResponse: 0xC142, OpSend: 0x4143,
		OpSendInvalidate: 0x4144, OpSendSE: 0x4145, OpSendSEInvalidate: 0x4146, OpTerminate: 0x4147,
	} {
		if Control(op) != byte(word) || ControlOpcode(byte(word)) != op || ControlVersion(byte(word)) != Version {
			t.Errorf("%v: control %#02x", op, Control(op))
		}
		var hdr []byte
		if op.Tagged() {
			h := make(ddp.Tagged, ddp.TaggedLen)
			h.Init(true, Control(op), 1, 0)
			hdr = h
		} else {
			qn, _ := op.Queue()
			h := make(ddp.Untagged, ddp.UntaggedLen)
			h.Init(true, Control(op), 0, qn, 1, 0)
			hdr = h
		}
		if uint16(hdr[0])<<8|uint16(hdr[1]) != word {
			t.Errorf("%v: header starts % x", op, hdr[:2])
		}
		got, n, err := CheckSegment(hdr)
		if err != nil || got != op || n != len(hdr) {
			t.Errorf("%v: CheckSegment = %v %d %v", op, got, n, err)
		}
	}
}

// The first FPDU of rping over siw, byte for byte from
// mpa/testdata/mpa_reply.pcap (packet 7): MPA length 0x22, an
// untagged Send (L, QN 0, MSN 1, MO 0), rping's 16-byte buffer descriptor
// (be64 addr, be32 rkey, be32 len) and a zero CRC (CRC not negotiated).
func TestCapturedSiwSend(t *testing.T) {
	fpdu := unhex(t, "0022 4143 00000000 00000000 00000001 00000000"+
		" 000055fc4d14cb90 bfa48d00 00004000 00000000")
	ulpduLen := int(fpdu[0])<<8 | int(fpdu[1])
	seg := fpdu[2 : 2+ulpduLen]
	op, n, err := CheckSegment(seg)
	if err != nil || op != OpSend || n != ddp.UntaggedLen {
		t.Fatal(op, n, err)
	}
	h := ddp.Untagged(seg)
	if !h.Last() || h.QN() != ddp.QNSend || h.MSN() != ddp.InitialMSN || h.MO() != 0 || h.ULPField() != 0 {
		t.Fatal("header fields")
	}
	if payload := seg[n:]; len(payload) != 16 || payload[8] != 0xbf {
		t.Fatalf("payload % x", payload)
	}
	s, err := ddp.NewSegmenter(len(seg)-n, ddp.UntaggedLen, 1448)
	if err != nil {
		t.Fatal(err)
	}
	if off, ln, last, ok := s.Next(); !ok || off != 0 || ln != 16 || !last {
		t.Fatal("one segment expected")
	}
}

func TestCheckSegment(t *testing.T) {
	send := unhex(t, "4143 00000000 00000000 00000001 00000000")
	for i := range send {
		if _, _, err := CheckSegment(send[:i]); !errors.Is(err, ddp.ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	mod := func(f func(b []byte)) []byte { b := bytes.Clone(send); f(b); return b }
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"ddp version", mod(func(b []byte) { b[0] = 0x42 }), ddp.ErrUntaggedVersion},
		{"rdmap version 0", mod(func(b []byte) { b[1] = 0x03 }), TermInvalidVersion},
		{"rdmap version 2", mod(func(b []byte) { b[1] = 0x83 }), TermInvalidVersion},
		{"opcode 12", mod(func(b []byte) { b[1] = 0x4C }), TermUnexpectedOpcode},
		{"tagged send", mod(func(b []byte) { b[0] = 0xC1 }), TermUnexpectedOpcode},
		{"untagged write", mod(func(b []byte) { b[1] = 0x40 }), TermUnexpectedOpcode},
		{"send on QN 1", mod(func(b []byte) { b[9] = 1 }), ddp.ErrInvalidQN},
		{"read request on QN 0", mod(func(b []byte) { b[1] = 0x41 }), ddp.ErrInvalidQN},
		{"reserved bits ignored", mod(func(b []byte) { b[0] |= 0x3C; b[1] |= 0x30 }), nil},
	} {
		_, _, err := CheckSegment(c.b)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if _, ok := AsTerminateError(err); !ok {
			t.Errorf("%s: not convertible", c.name)
		}
	}
	if _, _, err := CheckSegment(mod(func(b []byte) { b[1] = 0x03 })); !errors.Is(err, ErrVersion) {
		t.Error("ErrVersion")
	}
	if _, _, err := CheckSegment(mod(func(b []byte) { b[1] = 0x4D })); !errors.Is(err, ErrOpcode) {
		t.Error("ErrOpcode")
	}
}

// siw-interop-facts.md §1: the 48-byte Read Request FPDU (MPA length
// included): ctrl | rsvd | QN=1 | MSN | MO=0 | sink STag | sink TO | size |
// source STag | source TO. Also siw's Read RTR: source STag 1, TO 0, size 0.
func TestReadRequestFigure(t *testing.T) {
	fpdu := unhex(t, "002e 4141 00000000 00000001 00000001 00000000"+
		" 11223344 0000000000001000 00010000 55667788 00007f0000002000")
	if len(fpdu) != 48 {
		t.Fatal(len(fpdu))
	}
	seg := fpdu[2:]
	op, n, err := CheckSegment(seg)
	if err != nil || op != OpReadRequest || n != ddp.UntaggedLen {
		t.Fatal(op, n, err)
	}
	r, err := ParseReadRequest(seg[n:])
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsValid() || r.SinkSTag() != 0x11223344 || r.SinkTO() != 0x1000 || r.Size() != 0x10000 ||
		r.SrcSTag() != 0x55667788 || r.SrcTO() != 0x7f0000002000 || r.Check() != nil {
		t.Fatal("fields")
	}
	out := make([]byte, 0, 64)
	out = append(out, 0x00, 0x2e)
	h := make(ddp.Untagged, ddp.UntaggedLen)
	h.Init(true, Control(OpReadRequest), 0, ddp.QNReadRequest, 1, 0)
	out = append(out, h...)
	out = AppendReadRequest(out, 0x11223344, 0x1000, 0x10000, 0x55667788, 0x7f0000002000)
	if !bytes.Equal(out, fpdu) {
		t.Fatalf("encode\n got % x\nwant % x", out, fpdu)
	}
	for i := range ReadRequestLen {
		if _, err := ParseReadRequest(seg[n : n+i]); !errors.Is(err, ErrShort) {
			t.Fatal(i, err)
		}
	}
	adv := r.Advance(make(ReadRequest, ReadRequestLen), 2048)
	if adv.SinkTO() != 0x1000+2048 || adv.SrcTO() != 0x7f0000002000+2048 || adv.Size() != 0x10000-2048 ||
		adv.SinkSTag() != r.SinkSTag() || adv.SrcSTag() != r.SrcSTag() {
		t.Fatal("Advance")
	}
	if r.Advance(make(ReadRequest, ReadRequestLen), 1<<30).Size() != 0 {
		t.Fatal("Advance past end")
	}
	wrap := make(ReadRequest, ReadRequestLen)
	wrap.Init(1, 0, 16, 2, ^uint64(0)-8)
	if err := wrap.Check(); !errors.Is(err, TermTOWrap) {
		t.Fatal(err)
	}
	wrap.Init(1, ^uint64(0), 1, 2, 0)
	if err := wrap.Check(); !errors.Is(err, TermTOWrap) {
		t.Fatal(err)
	}
	// siw Read RTR (§3): zero-length read of source STag 1, TO 0.
	rtr := AppendReadRequest(nil, 0, 0, 0, 1, 0)
	if !bytes.Equal(rtr, unhex(t, "00000000 0000000000000000 00000000 00000001 0000000000000000")) {
		t.Fatalf("% x", rtr)
	}
}

func TestTerminateSiwFigure(t *testing.T) {
	// siw-interop-facts.md §1: the 24-byte Terminate without headers: the
	// untagged header (QN 2, MSN 1, MO 0) and the control word. Here RDMAP
	// remote operation / unexpected opcode (siw's answer to opcode > 7).
	fpdu := unhex(t, "0016 4147 00000000 00000002 00000001 00000000 02060000")
	seg := fpdu[2:]
	op, n, err := CheckSegment(seg)
	if err != nil || op != OpTerminate {
		t.Fatal(op, err)
	}
	term, err := ParseTerminate(seg[n:])
	if err != nil || term.Err != TermUnexpectedOpcode || term.M || term.D || term.R || term.Len() != 4 {
		t.Fatalf("%+v %v", term, err)
	}
	built := TerminateFor(TermUnexpectedOpcode, 0, unhex(t, "414c 00000000 00000000 00000001 00000000"), nil)
	got := AppendTerminateMessage(nil, 1, &built)
	if !bytes.Equal(got, seg) {
		t.Fatalf("built\n got % x\nwant % x", got, seg)
	}
}

func TestTerminateWithHeaders(t *testing.T) {
	rreqSeg := unhex(t, "4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	// Remote protection error on a Read Request: M, D, R and both headers.
	term := TerminateFor(TermInvalidSTag, 0, rreqSeg, rreqSeg[ddp.UntaggedLen:])
	if !term.M || !term.D || !term.R {
		t.Fatalf("%+v", term)
	}
	enc := term.Append(nil)
	want := unhex(t, "0100e000 0000 4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	if !bytes.Equal(enc, want) || term.Len() != len(want) || term.Len() != TerminateMaxLen {
		t.Fatalf("\n got % x\nwant % x", enc, want)
	}
	back, err := ParseTerminate(enc)
	if err != nil || back.Err != TermInvalidSTag || !bytes.Equal(back.DDPHeader, rreqSeg[:18]) ||
		!bytes.Equal(back.RDMAHeader, rreqSeg[18:]) || back.SegLen != 0 {
		t.Fatalf("%+v %v", back, err)
	}
	if op, ok := back.DDPOpcode(); !ok || op != OpReadRequest {
		t.Fatal("DDPOpcode")
	}
	// DDP error on a tagged Write: M, D and the 14-byte header.
	write := unhex(t, "8140 00000005 0000000000000400")
	term = TerminateFor(FromDDP(ddp.ErrBaseBounds), 1000, write, nil)
	enc = term.Append(nil)
	want = unhex(t, "1101c000 03e8 8140 00000005 0000000000000400")
	if !bytes.Equal(enc, want) {
		t.Fatalf("\n got % x\nwant % x", enc, want)
	}
	// Cases without headers (Figure 10 and siw's unknown-layout rule).
	for _, e := range []TerminateError{TermLocalCatastrophic, TermMPACRC, TermInvalidVersion,
		TermUnexpectedOpcode, FromDDP(ddp.ErrTaggedVersion), FromDDP(ddp.ErrUntaggedVersion)} {
		if tt := TerminateFor(e, 5, write, nil); tt.M || tt.D || tt.R || tt.Len() != 4 {
			t.Errorf("%v: %+v", e, tt)
		}
	}
	// Remote operation error: DDP header but no RDMA header, even on a Read Request.
	if tt := TerminateFor(TermCatastrophicStream, 0, rreqSeg, rreqSeg[18:]); !tt.D || tt.R {
		t.Errorf("remote op: %+v", tt)
	}
	// Remote protection error on a Send with Invalidate: no RDMA header.
	sinv := unhex(t, "4144 00000009 00000000 00000003 00000000")
	if tt := TerminateFor(TermProtCannotInvalidate, 0, sinv, nil); !tt.D || tt.R {
		t.Errorf("send inv: %+v", tt)
	}
	if tt := TerminateFor(TermAccessRights, 0, sinv[:5], nil); tt.D {
		t.Error("short header included")
	}
	if tt := TerminateFor(TermAccessRights, 0, nil, nil); tt.D || tt.Len() != 4 {
		t.Error("nil header")
	}
	if _, ok := (&Terminate{}).DDPOpcode(); ok {
		t.Error("DDPOpcode without header")
	}
}

// siw sets R on remote protection errors for Send types without appending an
// RDMA header (siw_send_terminate); accept that, and only that.
func TestTerminateSiwRWithoutHeader(t *testing.T) {
	b := unhex(t, "0109e000 0000 4144 00000009 00000000 00000003 00000000")
	term, err := ParseTerminate(b)
	if err != nil || !term.R || term.RDMAHeader != nil || term.Len() != len(b) {
		t.Fatalf("%+v %v", term, err)
	}
	if !bytes.Equal(term.Append(nil), b) {
		t.Fatal("round trip")
	}
	b[6+1] = 0x41 // the echoed header is a Read Request: the RDMA header is required
	if _, err := ParseTerminate(b); !errors.Is(err, ErrShort) {
		t.Fatal(err)
	}
}

func TestTerminateTruncation(t *testing.T) {
	rreqSeg := unhex(t, "4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	frames := [][]byte{
		unhex(t, "02060000"),
		unhex(t, "1203c000 0010 4143 00000000 00000000 00000009 00000000"),
		unhex(t, "11018000 0010"), // M without D: the length only
		unhex(t, "1101c000 03e8 8140 00000005 0000000000000400"),
	}
	full := TerminateFor(TermBaseBounds, 3, rreqSeg, rreqSeg[18:])
	frames = append(frames, full.Append(nil))
	for _, f := range frames {
		if _, err := ParseTerminate(f); err != nil {
			t.Fatalf("% x: %v", f, err)
		}
		for i := range f {
			if _, err := ParseTerminate(f[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d of % x: %v", i, f, err)
			}
		}
		if _, err := ParseTerminate(append(bytes.Clone(f), 0)); !errors.Is(err, ErrTrailing) {
			t.Fatalf("trailing after % x: %v", f, err)
		}
	}
}

func TestTerminateAppendNoAlloc(t *testing.T) {
	rreqSeg := unhex(t, "4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	buf := make([]byte, 0, 128)
	term := TerminateFor(TermBaseBounds, 3, rreqSeg, rreqSeg[18:])
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendTerminateMessage(buf[:0], 1, &term)
		if _, err := ParseTerminate(b[ddp.UntaggedLen:]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs", allocs)
	}
}

func TestErrorTables(t *testing.T) {
	named := []TerminateError{TermLocalCatastrophic, TermInvalidSTag, TermBaseBounds, TermAccessRights,
		TermSTagNotAssociated, TermTOWrap, TermProtCannotInvalidate, TermProtUnspecified, TermInvalidVersion,
		TermUnexpectedOpcode, TermCatastrophicStream, TermCatastrophicGlobal, TermOpCannotInvalidate,
		TermOpUnspecified, TermMPATCPClosed, TermMPACRC, TermMPAMarker, TermMPAInvalidReqRep,
		TermMPALocalCatastrophic, TermMPAInsufficientIRD, TermMPANoMatchingRTR}
	for _, d := range []*ddp.Error{ddp.ErrLocalCatastrophic, ddp.ErrInvalidSTag, ddp.ErrBaseBounds,
		ddp.ErrSTagNotAssociated, ddp.ErrTOWrap, ddp.ErrTaggedVersion, ddp.ErrInvalidQN, ddp.ErrMSNNoBuffer,
		ddp.ErrMSNRange, ddp.ErrInvalidMO, ddp.ErrMessageTooLong, ddp.ErrUntaggedVersion} {
		named = append(named, FromDDP(d))
		if !errors.Is(FromDDP(d), d) {
			t.Errorf("%v does not match %v", FromDDP(d), d)
		}
		if te, ok := AsTerminateError(d); !ok || te != FromDDP(d) {
			t.Errorf("AsTerminateError(%v)", d)
		}
	}
	// The RFC 6580 registries: RDMAP 0/1/{0,1,2,3,4,9,ff}, 0/2/{5,6,7,8,9,ff}; MPA 2/0/1-7 (with RFC 6581).
	want := map[uint16]bool{0x0000: true, 0x0100: true, 0x0101: true, 0x0102: true, 0x0103: true, 0x0104: true,
		0x0109: true, 0x01ff: true, 0x0205: true, 0x0206: true, 0x0207: true, 0x0208: true, 0x0209: true,
		0x02ff: true, 0x2001: true, 0x2002: true, 0x2003: true, 0x2004: true, 0x2005: true, 0x2006: true,
		0x2007: true, 0x1000: true, 0x1100: true, 0x1101: true, 0x1102: true, 0x1103: true, 0x1104: true,
		0x1201: true, 0x1202: true, 0x1203: true, 0x1204: true, 0x1205: true, 0x1206: true}
	seen := map[string]bool{}
	for _, e := range named {
		if !want[e.Word()] {
			t.Errorf("%v (%#04x) is not in the registry", e, e.Word())
		}
		delete(want, e.Word())
		if e.CodeName() == "" || seen[e.String()] {
			t.Errorf("%v: empty or duplicate name", e)
		}
		seen[e.String()] = true
		if !errors.Is(e, TerminateError{e.Layer, e.Type, e.Code}) {
			t.Errorf("%v: errors.Is by value", e)
		}
	}
	if len(want) != 0 {
		t.Errorf("registry entries without a name: %v", want)
	}
	if s := TermUnexpectedOpcode.Error(); s != "RDMAP remote operation error: unexpected opcode (0/2/0x06)" {
		t.Errorf("String = %q", s)
	}
	if s := FromLLP(2).String(); s != "LLP MPA error: MPA CRC error (2/0/0x02)" {
		t.Errorf("String = %q", s)
	}
	if s := (TerminateError{5, 9, 0x42}).String(); !strings.Contains(s, "unassigned") || !strings.Contains(s, "0x42") {
		t.Errorf("String = %q", s)
	}
	// Local catastrophic has no code: any code is named.
	if (TerminateError{LayerRDMAP, TypeLocalCatastrophic, 0x33}).CodeName() == "" {
		t.Error("local catastrophic with a code")
	}
	if TypeRemoteProtection.String() != "remote protection error" || CodeUnspecified.String() != "0xff" ||
		LayerDDP.String() != "DDP" || Layer(7).String() != "layer 7" {
		t.Error("names")
	}
	if FromLLP(uint8(CodeMPAInsufficientIRD)) != TermMPAInsufficientIRD || FromDDP(nil) != TermLocalCatastrophic {
		t.Error("conversions")
	}
	if _, ok := AsTerminateError(errors.New("x")); ok {
		t.Error("AsTerminateError of a plain error")
	}
	wrapped := errors.Join(errors.New("ctx"), TermMPACRC)
	if te, ok := AsTerminateError(wrapped); !ok || te != TermMPACRC {
		t.Error("AsTerminateError through a chain")
	}
	if !errors.Is(FromDDP(ddp.ErrTaggedVersion), ddp.ErrVersion) || errors.Is(FromDDP(ddp.ErrInvalidMO), ddp.ErrVersion) {
		t.Error("ddp.ErrVersion")
	}
	if errors.Is(TermMPACRC, ddp.ErrInvalidSTag) || errors.Is(TermInvalidSTag, ddp.ErrInvalidSTag) {
		t.Error("cross-layer match")
	}
}

func TestImmediate(t *testing.T) {
	// RFC 7306 Appendix A.3 layout: Immediate Data follows the untagged
	// header on QN 0; exactly 8 bytes.
	seg := unhex(t, "4148 00000000 00000000 00000001 00000000 0102030405060708")
	op, n, err := CheckSegment(seg)
	if err != nil || op != OpImmediateData {
		t.Fatal(op, err)
	}
	v, err := ParseImmediate(seg[n:])
	if err != nil || v != 0x0102030405060708 {
		t.Fatal(v, err)
	}
	if !bytes.Equal(AppendImmediate(nil, v), seg[n:]) {
		t.Fatal("append")
	}
	for i := range ImmediateLen {
		if _, err := ParseImmediate(seg[n : n+i]); !errors.Is(err, ErrShort) {
			t.Fatal(i, err)
		}
	}
	if _, err := ParseImmediate(append(bytes.Clone(seg[n:]), 0)); !errors.Is(err, ErrLength) {
		t.Fatal(err)
	}
}

func TestAtomicFigures(t *testing.T) {
	// RFC 7306 Figure 4, a CmpSwap: reserved|AOpCode, request ID, STag, TO,
	// swap data, swap mask, compare data, compare mask.
	req := unhex(t, "00000002 0000abcd 00001234 0000000000000040"+
		" 1111111111111111 ffffffffffffffff 2222222222222222 ffffffffffffffff")
	r, err := ParseAtomicRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	wantReq := NewCmpSwap(0xabcd, 0x1234, 0x40, 0x2222222222222222, AllOnes, 0x1111111111111111, AllOnes)
	if r != wantReq || r.Check() != nil || r.Len() != AtomicRequestLen {
		t.Fatalf("%+v", r)
	}
	if !bytes.Equal(wantReq.Append(nil), req) {
		t.Fatal("append")
	}
	// FetchAdd: Compare zero, CompareMask all ones.
	fa := NewFetchAdd(1, 2, 8, 5, 0)
	if !bytes.Equal(fa.Append(nil), unhex(t, "00000000 00000001 00000002 0000000000000008"+
		" 0000000000000005 0000000000000000 0000000000000000 ffffffffffffffff")) {
		t.Fatal("fetchadd")
	}
	// Reserved bits are ignored on receive.
	req2 := bytes.Clone(req)
	req2[0], req2[3] = 0xff, 0xf2
	if r2, err := ParseAtomicRequest(req2); err != nil || r2 != r {
		t.Fatal("reserved", err)
	}
	// Figure 6: response.
	resp := unhex(t, "0000abcd 2222222222222222")
	a, err := ParseAtomicResponse(resp)
	if err != nil || a.ReqID != 0xabcd || a.Orig != 0x2222222222222222 || a.Len() != AtomicResponseLen {
		t.Fatal(a, err)
	}
	if !bytes.Equal(a.Append(nil), resp) {
		t.Fatal("append response")
	}
	for i := range AtomicRequestLen {
		if _, err := ParseAtomicRequest(req[:i]); !errors.Is(err, ErrShort) {
			t.Fatal(i, err)
		}
	}
	for i := range AtomicResponseLen {
		if _, err := ParseAtomicResponse(resp[:i]); !errors.Is(err, ErrShort) {
			t.Fatal(i, err)
		}
	}
	if _, err := ParseAtomicRequest(append(bytes.Clone(req), 0)); !errors.Is(err, ErrLength) {
		t.Fatal(err)
	}
	if _, err := ParseAtomicResponse(append(bytes.Clone(resp), 0)); !errors.Is(err, ErrLength) {
		t.Fatal(err)
	}
	// Checks: alignment (§8.2) and known opcodes (§5.2.1, §10.1).
	bad := r
	bad.TO = 0x44
	if err := bad.Check(); !errors.Is(err, TermCatastrophicStream) {
		t.Fatal(err)
	}
	for op := AtomicOpcode(0); op < 16; op++ {
		bad := r
		bad.Op = op
		if err := bad.Check(); (err == nil) != (op == AtomicFetchAdd || op == AtomicCmpSwap) {
			t.Errorf("op %v: %v", op, err)
		} else if err != nil && !errors.Is(err, TermUnexpectedOpcode) {
			t.Errorf("op %v: %v", op, err)
		}
	}
	if AtomicFetchAdd.String() != "FetchAdd" || AtomicCmpSwap.String() != "CmpSwap" ||
		AtomicReserved.String() != "Reserved" || AtomicOpcode(9).String() != "atomic opcode 0x9" {
		t.Error("names")
	}
}

// fetchAddRef is the bit-serial pseudocode of RFC 7306 §5.1.1.
func fetchAddRef(orig, add, mask uint64) uint64 {
	var carry, out uint64
	for bit := range 64 {
		loc := uint64(1) << bit
		sum := carry + (orig&loc)>>bit + (add&loc)>>bit
		carry = (sum & 2) >> 1
		if sum&1 != 0 {
			out |= loc
		}
		if mask&loc != 0 {
			carry = 0
		}
	}
	return out
}

func TestAtomicApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		orig, add, mask := rng.Uint64(), rng.Uint64(), rng.Uint64()
		switch i % 4 {
		case 0:
			mask = 0
		case 1:
			mask = 0x8000000080000000 // two 32-bit fields
		}
		r := NewFetchAdd(0, 0, 0, add, mask)
		if got, want := r.Apply(orig), fetchAddRef(orig, add, mask); got != want {
			t.Fatalf("FetchAdd(%#x, %#x, mask %#x) = %#x, want %#x", orig, add, mask, got, want)
		}
	}
	split := NewFetchAdd(0, 0, 0, 1, 0x8000000080000000)
	if got := split.Apply(0x00000000ffffffff); got != 0 {
		t.Fatalf("field carry not discarded: %#x", got)
	}
	plain := NewFetchAdd(0, 0, 0, 1, 0)
	if got := plain.Apply(0x00000000ffffffff); got != 0x100000000 {
		t.Fatalf("plain add: %#x", got)
	}
	cs := NewCmpSwap(0, 0, 0, 0x00ff, 0x00ff, 0xabcd, 0xff00)
	if got := cs.Apply(0x12ff); got != 0xabff {
		t.Fatalf("CmpSwap match: %#x", got)
	}
	if got := cs.Apply(0x12fe); got != 0x12fe {
		t.Fatalf("CmpSwap mismatch: %#x", got)
	}
	unknown := AtomicRequest{Op: 5}
	if unknown.Apply(7) != 7 {
		t.Fatal("unknown op modifies")
	}
}

func FuzzTerminate(f *testing.F) {
	rreqSeg := unhex(f, "4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	full := TerminateFor(TermBaseBounds, 3, rreqSeg, rreqSeg[18:])
	f.Add(full.Append(nil))
	f.Add(unhex(f, "02060000"))
	f.Add(unhex(f, "1101c000 03e8 8140 00000005 0000000000000400"))
	f.Add(unhex(f, "0109e000 0000 4144 00000009 00000000 00000003 00000000"))
	f.Add(unhex(f, "11018000 0010"))
	f.Fuzz(func(t *testing.T, b []byte) {
		term, err := ParseTerminate(b)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrTrailing) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if term.Len() != len(b) {
			t.Fatalf("Len %d, input %d", term.Len(), len(b))
		}
		out := term.Append(make([]byte, 0, term.Len()))
		want := bytes.Clone(b)
		want[2] &^= TermReservedMask >> 8 // reserved bits are zero on transmit
		want[3] = 0
		if !bytes.Equal(out, want) {
			t.Fatalf("round trip\n got % x\nwant % x", out, want)
		}
		again, err := ParseTerminate(out)
		if err != nil || again.Err != term.Err || again.M != term.M || again.D != term.D || again.R != term.R ||
			again.SegLen != term.SegLen || !bytes.Equal(again.DDPHeader, term.DDPHeader) ||
			!bytes.Equal(again.RDMAHeader, term.RDMAHeader) {
			t.Fatalf("re-parse: %+v %v", again, err)
		}
		_ = term.Err.String()
		_, _ = term.DDPOpcode()
	})
}

func FuzzReadRequest(f *testing.F) {
	f.Add(unhex(f, "4141 00000000 00000001 00000001 00000000"+
		" 11223344 0000000000001000 00010000 55667788 00007f0000002000"))
	f.Add(unhex(f, "4141 00000000 00000001 00000001 00000000"))
	f.Add([]byte{0xc1, 0x42})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The whole segment: DDP/RDMAP checks, then the Read Request header.
		op, n, err := CheckSegment(b)
		if err != nil {
			if _, ok := AsTerminateError(err); !ok && !errors.Is(err, ddp.ErrShort) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if op != OpReadRequest {
			return
		}
		r, err := ParseReadRequest(b[n:])
		if err != nil {
			if len(b)-n >= ReadRequestLen || !errors.Is(err, ErrShort) {
				t.Fatal(err)
			}
			return
		}
		out := AppendReadRequest(nil, r.SinkSTag(), r.SinkTO(), r.Size(), r.SrcSTag(), r.SrcTO())
		if !bytes.Equal(out, b[n:n+ReadRequestLen]) {
			t.Fatalf("round trip\n got % x\nwant % x", out, b[n:n+ReadRequestLen])
		}
		_ = r.Check()
		adv := r.Advance(make(ReadRequest, ReadRequestLen), uint32(len(b)))
		if adv.Size() > r.Size() || uint64(r.Size()-adv.Size()) != adv.SinkTO()-r.SinkTO() {
			t.Fatal("Advance")
		}
	})
}

// FuzzAtomic covers Atomic Request, Atomic Response and Immediate Data; the
// first byte selects the message.
func FuzzAtomic(f *testing.F) {
	req := NewCmpSwap(0xabcd, 0x1234, 0x40, 1, AllOnes, 2, AllOnes)
	f.Add(append([]byte{0}, req.Append(nil)...))
	fa := NewFetchAdd(1, 2, 8, 5, 0x8000000080000000)
	f.Add(append([]byte{0}, fa.Append(nil)...))
	f.Add(append([]byte{1}, unhex(f, "0000abcd 2222222222222222")...))
	f.Add(append([]byte{2}, unhex(f, "0102030405060708")...))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		sel, b := in[0]%3, in[1:]
		switch sel {
		case 0:
			r, err := ParseAtomicRequest(b)
			if err != nil {
				if (len(b) < AtomicRequestLen && !errors.Is(err, ErrShort)) ||
					(len(b) > AtomicRequestLen && !errors.Is(err, ErrLength)) || len(b) == AtomicRequestLen {
					t.Fatal(err)
				}
				return
			}
			want := bytes.Clone(b)
			want[0], want[1], want[2] = 0, 0, 0
			want[3] &= 0x0F
			if out := r.Append(nil); !bytes.Equal(out, want) || r.Len() != len(out) {
				t.Fatalf("round trip\n got % x\nwant % x", out, want)
			}
			if err := r.Check(); err != nil && !errors.Is(err, TermUnexpectedOpcode) && !errors.Is(err, TermCatastrophicStream) {
				t.Fatal(err)
			}
			v := r.Apply(r.Compare)
			if r.Op == AtomicCmpSwap && v != r.Compare&^r.DataMask|r.Data&r.DataMask {
				t.Fatal("CmpSwap on equal value")
			}
			if r.Op == AtomicFetchAdd && v != fetchAddRef(r.Compare, r.Data, r.DataMask) {
				t.Fatal("FetchAdd differs from RFC pseudocode")
			}
		case 1:
			a, err := ParseAtomicResponse(b)
			if err != nil {
				if len(b) == AtomicResponseLen {
					t.Fatal(err)
				}
				return
			}
			if out := a.Append(nil); !bytes.Equal(out, b) || a.Len() != len(out) {
				t.Fatal("round trip")
			}
		case 2:
			v, err := ParseImmediate(b)
			if err != nil {
				if len(b) == ImmediateLen {
					t.Fatal(err)
				}
				return
			}
			if !bytes.Equal(AppendImmediate(nil, v), b) {
				t.Fatal("round trip")
			}
		}
	})
}

var sink uint64

func BenchmarkReadRequestDecode(b *testing.B) {
	seg := unhex(b, "4141 00000000 00000001 00000001 00000000"+
		" 11223344 0000000000001000 00010000 55667788 00007f0000002000")
	b.ReportAllocs()
	b.SetBytes(int64(len(seg)))
	for b.Loop() {
		_, n, err := CheckSegment(seg)
		if err != nil {
			b.Fatal(err)
		}
		r, err := ParseReadRequest(seg[n:])
		if err != nil {
			b.Fatal(err)
		}
		sink += uint64(r.SinkSTag()) + r.SinkTO() + uint64(r.Size()) + uint64(r.SrcSTag()) + r.SrcTO()
	}
}

func BenchmarkReadRequestEncode(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	b.SetBytes(ddp.UntaggedLen + ReadRequestLen)
	var i uint64
	for b.Loop() {
		i++
		out := buf[:ddp.UntaggedLen]
		ddp.Untagged(out).Init(true, Control(OpReadRequest), 0, ddp.QNReadRequest, ddp.MSN(i), 0)
		out = AppendReadRequest(out, 1, i, 4096, 2, i)
		sink += uint64(len(out))
	}
}

func BenchmarkTerminateRoundTrip(b *testing.B) {
	rreqSeg := unhex(b, "4141 00000000 00000001 00000007 00000000"+
		" 11223344 0000000000001000 00010000 55667788 0000000000002000")
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	b.SetBytes(ddp.UntaggedLen + TerminateMaxLen)
	for b.Loop() {
		term := TerminateFor(TermBaseBounds, 3, rreqSeg, rreqSeg[18:])
		out := AppendTerminateMessage(buf[:0], 1, &term)
		back, err := ParseTerminate(out[ddp.UntaggedLen:])
		if err != nil {
			b.Fatal(err)
		}
		sink += uint64(back.SegLen)
	}
}

func BenchmarkAtomicRoundTrip(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	b.SetBytes(AtomicRequestLen + AtomicResponseLen)
	var i uint64
	for b.Loop() {
		i++
		req := NewFetchAdd(uint32(i), 7, 8*i, i, 0)
		out := req.Append(buf[:0])
		r, err := ParseAtomicRequest(out)
		if err != nil || r.Check() != nil {
			b.Fatal(err)
		}
		resp := AtomicResponse{r.ReqID, r.Apply(i)}
		out = resp.Append(buf[:0])
		a, err := ParseAtomicResponse(out)
		if err != nil {
			b.Fatal(err)
		}
		sink += a.Orig
	}
}
