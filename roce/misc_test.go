package roce

import (
	"testing"
	"time"
)

func TestPSN(t *testing.T) {
	for _, c := range []struct {
		a, b PSN
		dist int32
	}{
		{0, 0, 0}, {1, 0, 1}, {0, 1, -1}, {0, 0xffffff, 1}, {0xffffff, 0, -1},
		{0x7fffff, 0, 0x7fffff}, {0x800000, 0, -0x800000}, {5, 0xfffffa, 11}, {0xfffffa, 5, -11},
	} {
		if d := c.a.Distance(c.b); d != c.dist {
			t.Errorf("%v.Distance(%v) = %d want %d", c.a, c.b, d, c.dist)
		}
		if c.a.Less(c.b) != (c.dist < 0) || c.a.LessEq(c.b) != (c.dist <= 0) {
			t.Errorf("%v.Less(%v) = %v", c.a, c.b, c.a.Less(c.b))
		}
		if c.b.Add(uint32(c.dist)) != c.a {
			t.Errorf("%v + %d != %v", c.b, c.dist, c.a)
		}
		if c.a.Sub(c.b) != uint32(c.dist)&PSNMask {
			t.Errorf("%v - %v = %d", c.a, c.b, c.a.Sub(c.b))
		}
	}
	if PSN(0xfffffe).Add(3) != 1 || PSN(0xffffff).Add(1<<24) != 0xffffff {
		t.Error("Add wrap")
	}
	if !PSN(2).InWindow(0xfffffe, 5) || PSN(3).InWindow(0xfffffe, 5) || !PSN(0xfffffe).InWindow(0xfffffe, 1) ||
		PSN(0xfffffd).InWindow(0xfffffe, 5) || PSN(7).InWindow(7, 0) {
		t.Error("InWindow")
	}
	if PSN(0x949ef3).String() != "949ef3" || PSN(1).String() != "000001" || PSN(1<<24).Valid() || !PSN(PSNMask).Valid() {
		t.Error("String/Valid")
	}
}

func TestSyndrome(t *testing.T) {
	for _, c := range []struct {
		s    Syndrome
		b    uint8
		str  string
		kind SyndromeKind
	}{
		{SyndromeACK, 0x1f, "ACK(credits=31)", KindACK},
		{ACKSyndrome(3), 0x03, "ACK(credits=3)", KindACK},
		{RNRNAKSyndrome(12), 0x2c, "RNR_NAK(0.64ms)", KindRNRNAK},
		{RNRNAKSyndrome(0), 0x20, "RNR_NAK(655.36ms)", KindRNRNAK},
		{SyndromePSNSequenceError, 0x60, "NAK(PSN_SEQUENCE_ERROR)", KindNAK},
		{SyndromeInvalidRequest, 0x61, "NAK(INVALID_REQUEST)", KindNAK},
		{SyndromeRemoteAccessError, 0x62, "NAK(REMOTE_ACCESS_ERROR)", KindNAK},
		{SyndromeRemoteOperationalError, 0x63, "NAK(REMOTE_OPERATIONAL_ERROR)", KindNAK},
		{NAKSyndrome(NAKInvalidRDRequest), 0x64, "NAK(INVALID_RD_REQUEST)", KindNAK},
		{Syndrome(0x45), 0x45, "RESERVED(0x45)", KindReserved},
		{Syndrome(0x6a), 0x6a, "NAK(NAK_RESERVED_10)", KindNAK},
	} {
		if uint8(c.s) != c.b || c.s.String() != c.str || c.s.Kind() != c.kind {
			t.Errorf("%#x: %s kind %v", uint8(c.s), c.s, c.s.Kind())
		}
	}
	s := RNRNAKSyndrome(RNRTimer(14))
	if !s.IsRNRNAK() || s.IsACK() || s.IsNAK() || s.RNRTimer() != 14 || s.RNRTimer().Duration() != 1280*time.Microsecond {
		t.Error("RNR accessors")
	}
	if n := NAKSyndrome(NAKRemoteAccessError); !n.IsNAK() || n.NAKCode() != NAKRemoteAccessError || n.Value() != 2 {
		t.Error("NAK accessors")
	}
	if a := ACKSyndrome(40); a.Credits() != 40&0x1f {
		t.Error("credits masked")
	}
	// Round trip through an AETH view.
	a := AETH(make([]byte, 4))
	a.SetSyndrome(SyndromeRemoteAccessError)
	a.SetMSN(0x1234567)
	if a[0] != 0x62 || a.MSN() != 0x234567 || a.Syndrome() != SyndromeRemoteAccessError {
		t.Errorf("AETH % x", []byte(a))
	}
}

func TestRNRTimerTable(t *testing.T) {
	// rocev2-wire-facts.md §5, in milliseconds as the table lists them.
	ms := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
		2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	for code, v := range ms {
		want := time.Duration(v*1000+0.5) * time.Microsecond
		if got := RNRTimer(code).Duration(); got != want {
			t.Errorf("code %d: %v want %v", code, got, want)
		}
		if code > 0 && RNRTimerFor(RNRTimer(code).Duration()) != RNRTimer(code) {
			t.Errorf("RNRTimerFor(%v) = %d", RNRTimer(code).Duration(), RNRTimerFor(RNRTimer(code).Duration()))
		}
	}
	if RNRTimerFor(0) != 1 || RNRTimerFor(11*time.Microsecond) != 2 || RNRTimerFor(time.Second) != 0 {
		t.Error("RNRTimerFor")
	}
	if RNRTimer(1).String() != "0.01ms" || RNRTimer(20).String() != "10.24ms" || RNRTimer(27).String() != "122.88ms" {
		t.Errorf("String %s %s", RNRTimer(1), RNRTimer(20))
	}
}

func TestTimeoutExp(t *testing.T) {
	if TimeoutExp(0) != 4096*time.Nanosecond || TimeoutExp(14) != 67108864*time.Nanosecond ||
		TimeoutExp(20) != 4294967296*time.Nanosecond {
		t.Error(TimeoutExp(14), TimeoutExp(20))
	}
}

func TestMTU(t *testing.T) {
	for _, c := range []struct {
		m     MTU
		bytes int
	}{{MTU256, 256}, {MTU512, 512}, {MTU1024, 1024}, {MTU2048, 2048}, {MTU4096, 4096}, {0, 0}, {6, 0}} {
		if c.m.Bytes() != c.bytes || c.m.Valid() != (c.bytes != 0) || (c.bytes != 0 && MTUFromBytes(c.bytes) != c.m) {
			t.Errorf("%d: %d", c.m, c.m.Bytes())
		}
	}
	for _, c := range []struct {
		netdev int
		m      MTU
	}{{1500, MTU1024}, {9000, MTU4096}, {1120, MTU1024}, {1119, MTU512}, {4192, MTU4096}, {4191, MTU2048}, {300, 0}} {
		if got := MTUForNetdev(c.netdev); got != c.m {
			t.Errorf("MTUForNetdev(%d) = %v want %v", c.netdev, got, c.m)
		}
	}
	if MTU4096.String() != "4096" || MTU(9).String() != "MTU_INVALID_9" {
		t.Error("String")
	}
}

func TestUDPSourcePort(t *testing.T) {
	// Hand-computed from the rdma_flow_label_to_udp_sport formula.
	for _, c := range []struct {
		fl   uint32
		port uint16
	}{
		{0, 0xc000}, {1, 0xc001}, {0x3fff, 0xffff}, {0x4000, 0xc001}, {0xfffff, 0xffc0}, {0x840c5, 0xc0e4},
	} {
		if got := FlowLabelToUDPSourcePort(c.fl); got != c.port {
			t.Errorf("fl %#x: %#x want %#x", c.fl, got, c.port)
		}
	}
	for _, q := range [][2]uint32{{0x11, 0x19}, {0x1a, 0xffffff}, {1, 1}, {0x123456, 0x654321}} {
		a, b := CalcFlowLabel(q[0], q[1]), CalcFlowLabel(q[1], q[0])
		if a != b || a > 0xfffff {
			t.Errorf("CalcFlowLabel not symmetric or too wide: %x %x", a, b)
		}
		v := uint64(q[0]) * uint64(q[1])
		v ^= v >> 20
		v ^= v >> 40
		if a != uint32(v&0xfffff) {
			t.Errorf("CalcFlowLabel(%x,%x) = %x", q[0], q[1], a)
		}
		if p := UDPSourcePort(0, q[0], q[1]); p < 0xc000 || p != FlowLabelToUDPSourcePort(a) {
			t.Errorf("UDPSourcePort = %x", p)
		}
	}
	if UDPSourcePort(0x4001, 5, 6) != FlowLabelToUDPSourcePort(0x4001) {
		t.Error("explicit flow label ignored")
	}
}

func TestMSNAndPSNPrev(t *testing.T) {
	if m := MSN(MSNMask).Next(); m != 0 {
		t.Fatalf("MSN wrap: %#x", m)
	}
	if m := MSN(5).Add(MSNMask); m != 4 {
		t.Fatalf("MSN add -1: %d", m)
	}
	if !MSN(MSNMask).Less(2) || MSN(2).Less(MSNMask) || MSN(3).Distance(1) != 2 {
		t.Fatal("MSN order across the wrap")
	}
	if p := PSN(0).Prev(); p != PSNMask {
		t.Fatalf("PSN(0).Prev() = %v", p)
	}
	if p := PSN(7).Prev(); p != 6 {
		t.Fatalf("PSN(7).Prev() = %v", p)
	}
}

func TestEntropyPort(t *testing.T) {
	for _, c := range []struct {
		port uint16
		want bool
	}{{0, true}, {1, false}, {UDPPort, false}, {0xBFFF, false}, {0xC000, true}, {0xFFFF, true}} {
		if IsEntropyPort(c.port) != c.want {
			t.Errorf("IsEntropyPort(%#x) = %v", c.port, !c.want)
		}
	}
	for _, fl := range []uint32{0, 1, 0x3FFF, 0xFC000, 0xFFFFF} {
		if p := FlowLabelToUDPSourcePort(fl); !IsEntropyPort(p) {
			t.Errorf("flow label %#x → source port %#x outside the entropy range", fl, p)
		}
	}
}
