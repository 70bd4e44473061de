package pingpong

import (
	"bytes"
	"testing"
)

func TestPingpongDest(t *testing.T) {
	// The client message captured from rxe's ibv_rc_pingpong (interop-vm.md).
	wire := "0000:000019:949ef3:00000000000000000000ffffc0a84e02"
	d, err := ParseDest(append([]byte(wire), 0))
	if err != nil {
		t.Fatal(err)
	}
	if d.QPN != 0x19 || d.PSN != 0x949ef3 || d.LID != 0 {
		t.Fatalf("%+v", d)
	}
	if a, ok := d.Addr(); !ok || a.String() != "192.168.78.2" || GIDString(d.GID) != "::ffff:192.168.78.2" {
		t.Fatalf("addr %v %s", a, GIDString(d.GID))
	}
	b := d.Append(nil)
	if len(b) != MsgLen || !bytes.Equal(b[:len(wire)], []byte(wire)) || b[len(wire)] != 0 {
		t.Fatalf("%q", b)
	}
	for _, bad := range []string{"", "0000:000019:949ef3", "zz:1:2:00000000000000000000ffffc0a84e02", "0:1:2:00ff"} {
		if _, err := ParseDest([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if GIDString([16]byte{}) != "::" {
		t.Fatal(GIDString([16]byte{}))
	}
}

// FuzzParseDest: any message parses or is refused without panicking, and a parsed
// address re-encodes to a message that parses to the same address.
func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000019:949ef3:00000000000000000000ffffc0a84e02\x00"))
	f.Add(Dest{}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		back, err := ParseDest(d.Append(nil))
		if err != nil || back != (Dest{LID: d.LID, QPN: d.QPN & 0xFFFFFF, PSN: d.PSN & 0xFFFFFF, GID: d.GID}) {
			t.Fatalf("%+v re-encoded to %+v (%v)", d, back, err)
		}
	})
}
