package roce

import "testing"

func TestPacketOpcode(t *testing.T) {
	for _, c := range []struct {
		only      Opcode
		f, m, l   Opcode
		multiOkay bool
	}{
		{RCSendOnly, RCSendFirst, RCSendMiddle, RCSendLast, true},
		{RCSendOnlyImm, RCSendFirst, RCSendMiddle, RCSendLastImm, true},
		{RCSendOnlyInv, RCSendFirst, RCSendMiddle, RCSendLastInv, true},
		{RCWriteOnly, RCWriteFirst, RCWriteMiddle, RCWriteLast, true},
		{RCWriteOnlyImm, RCWriteFirst, RCWriteMiddle, RCWriteLastImm, true},
		{RCReadResponseOnly, RCReadResponseFirst, RCReadResponseMiddle, RCReadResponseLast, true},
		{UCSendOnlyImm, UCSendFirst, UCSendMiddle, UCSendLastImm, true},
		{UCWriteOnly, UCWriteFirst, UCWriteMiddle, UCWriteLast, true},
		{UDSendOnly, 0, 0, 0, false},
		{RCReadRequest, 0, 0, 0, false},
		{RCAck, 0, 0, 0, false},
	} {
		if o, ok := PacketOpcode(c.only, true, true); !ok || o != c.only {
			t.Errorf("%v only: %v %v", c.only, o, ok)
		}
		for _, p := range []struct {
			first, last bool
			want        Opcode
		}{{true, false, c.f}, {false, false, c.m}, {false, true, c.l}} {
			o, ok := PacketOpcode(c.only, p.first, p.last)
			if ok != c.multiOkay || (ok && o != p.want) {
				t.Errorf("%v first=%v last=%v: %v %v, want %v", c.only, p.first, p.last, o, ok, p.want)
			}
		}
	}
	if _, ok := PacketOpcode(RCSendFirst, true, true); ok {
		t.Error("non-ONLY opcode accepted")
	}
}

func TestPacketCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		m    MTU
		want int
	}{{0, MTU1024, 1}, {1, MTU1024, 1}, {1024, MTU1024, 1}, {1025, MTU1024, 2}, {1 << 20, MTU4096, 256}, {5, 0, 0}} {
		if got := PacketCount(c.n, c.m); got != c.want {
			t.Errorf("PacketCount(%d, %v) = %d want %d", c.n, c.m, got, c.want)
		}
	}
}
