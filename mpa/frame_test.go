package mpa

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func framesEqual(a, b *Frame) bool {
	return a.Reply == b.Reply && a.Markers == b.Markers && a.CRC == b.CRC &&
		a.Reject == b.Reject && a.Enhanced == b.Enhanced && a.Rev == b.Rev &&
		a.Reserved == b.Reserved && a.IRD == b.IRD && a.ORD == b.ORD &&
		a.P2P == b.P2P && a.RTR == b.RTR && bytes.Equal(a.PrivateData, b.PrivateData)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

var frameVectors = []struct {
	name string
	wire string
	f    Frame
}{
	{"rfc5044 request rev1 no pd",
		"4d504120494420526571204672616d65" + "0001" + "0000",
		Frame{Rev: 1}},
	{"rfc5044 reply M C rev1 pd",
		"4d504120494420526570204672616d65" + "c001" + "0003" + "616263",
		Frame{Reply: true, Markers: true, CRC: true, Rev: 1, PrivateData: []byte("abc")}},
	{"reject reply",
		"4d504120494420526570204672616d65" + "2001" + "0000",
		Frame{Reply: true, Reject: true, Rev: 1}},
	{"siw default request",
		"4d504120494420526571204672616d65" + "1002" + "0004" + "00010001",
		Frame{Enhanced: true, Rev: 2, IRD: 1, ORD: 1}},
	{"siw p2p request with GSO bit and ulp data",
		"4d504120494420526571204672616d65" + "5802" + "0006" + "8010c001" + "0102",
		Frame{CRC: true, Enhanced: true, Rev: 2, Reserved: BitSiwGSO, IRD: 16, ORD: 1,
			P2P: true, RTR: RTRWrite | RTRRead, PrivateData: []byte{1, 2}}},
	{"all flags, max 14-bit values",
		"4d504120494420526570204672616d65" + "ff02" + "0004" + "ffffffff",
		Frame{Reply: true, Markers: true, CRC: true, Reject: true, Enhanced: true,
			Reserved: ReservedMask, Rev: 2, IRD: MaxIRDORD, ORD: MaxIRDORD, P2P: true,
			RTR: RTRSend | RTRWrite | RTRRead}},
	{"rev 0 and odd rev",
		"4d504120494420526571204672616d65" + "00ff" + "0000",
		Frame{Rev: 255}},
}

func TestFrameVectors(t *testing.T) {
	for _, v := range frameVectors {
		wire := mustHex(v.wire)
		f, err := ParseFrame(wire)
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		if !framesEqual(&f, &v.f) {
			t.Errorf("%s: parsed %+v, want %+v", v.name, f, v.f)
		}
		if got := v.f.Append(nil); !bytes.Equal(got, wire) {
			t.Errorf("%s: append %x, want %x", v.name, got, wire)
		}
		if v.f.Len() != len(wire) {
			t.Errorf("%s: Len %d, want %d", v.name, v.f.Len(), len(wire))
		}
		if n, err := FrameLen(wire[:HeaderLen]); err != nil || n != len(wire) {
			t.Errorf("%s: FrameLen %d %v", v.name, n, err)
		}
		// Append into a buffer with room must not allocate.
		buf := make([]byte, 0, 600)
		if a := testing.AllocsPerRun(10, func() { _ = v.f.Append(buf[:0]) }); a != 0 {
			t.Errorf("%s: Append allocates %v", v.name, a)
		}
	}
}

func TestFrameKeys(t *testing.T) {
	if KeyRequest != string(mustHex("4d504120494420526571204672616d65")) ||
		KeyReply != string(mustHex("4d504120494420526570204672616d65")) {
		t.Fatal("key constants differ from RFC 5044 §7.1.1 bytes")
	}
	b := mustHex("4d504120494420526571204672616d65" + "0001" + "0000")
	b[15] = 'E'
	if _, err := ParseFrame(b); !errors.Is(err, ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
}

// Every proper prefix of every valid frame must fail cleanly.
func TestFrameTruncation(t *testing.T) {
	for _, v := range frameVectors {
		wire := mustHex(v.wire)
		for i := 0; i < len(wire); i++ {
			if _, err := ParseFrame(wire[:i]); err == nil {
				t.Fatalf("%s: prefix %d parsed", v.name, i)
			}
			if i < HeaderLen {
				if _, err := FrameLen(wire[:i]); !errors.Is(err, ErrShort) {
					t.Fatalf("%s: FrameLen prefix %d: %v", v.name, i, err)
				}
			}
		}
		if _, err := ParseFrame(append(wire[:len(wire):len(wire)], 0)); !errors.Is(err, ErrTrailingData) {
			t.Fatalf("%s: trailing byte: %v", v.name, err)
		}
	}
}

func TestFramePrivateDataLimits(t *testing.T) {
	for _, tc := range []struct {
		pd, max int
		ok      bool
	}{
		{512, 0, true}, {513, 0, false}, {256, SiwMaxPrivateData, true},
		{257, SiwMaxPrivateData, false}, {0xFFFF, 0, false},
	} {
		f := Frame{Rev: 1, PrivateData: make([]byte, tc.pd)}
		wire := f.Append(nil)
		_, err := FrameLenMax(wire, tc.max)
		if tc.ok != (err == nil) {
			t.Errorf("pd %d max %d: %v", tc.pd, tc.max, err)
		}
		if tc.max == 0 {
			if _, err := ParseFrame(wire); tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrPrivateDataTooLong)) {
				t.Errorf("ParseFrame pd %d: %v", tc.pd, err)
			}
		}
	}
	// S set but fewer than 4 bytes of private data.
	for pd := 0; pd < EnhancedLen; pd++ {
		f := Frame{Rev: 2, PrivateData: make([]byte, pd)}
		wire := f.Append(nil)
		wire[16] |= BitS >> 8
		if _, err := ParseFrame(wire); !errors.Is(err, ErrShortEnhanced) {
			t.Errorf("S with pd %d: %v", pd, err)
		}
	}
}

func TestRTRString(t *testing.T) {
	if s := (RTRWrite | RTRRead).String(); s != "write|read" {
		t.Fatal(s)
	}
	if CodeNoMatchingRTR.String() != "no matching RTR option" || ErrorCode(9).String() != "mpa error code 0x9" {
		t.Fatal("ErrorCode.String")
	}
	e := error(&Error{Code: CodeCRC, Reason: "x"})
	if !errors.Is(e, &Error{Code: CodeCRC}) || errors.Is(e, &Error{Code: CodeMarker}) {
		t.Fatal("Error.Is")
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, v := range frameVectors {
		f.Add(mustHex(v.wire))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		n, lerr := FrameLen(b)
		if err != nil {
			if lerr == nil && n == len(b) && !errors.Is(err, ErrShortEnhanced) {
				t.Fatalf("FrameLen ok (%d) but ParseFrame: %v", n, err)
			}
			return
		}
		if lerr != nil || n != len(b) || fr.Len() != len(b) {
			t.Fatalf("lengths: FrameLen %d %v, Len %d, input %d", n, lerr, fr.Len(), len(b))
		}
		out := fr.Append(nil)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip\n got %x\nwant %x", out, b)
		}
		fr2, err := ParseFrame(out)
		if err != nil || !framesEqual(&fr, &fr2) {
			t.Fatalf("reparse %+v %v", fr2, err)
		}
	})
}
