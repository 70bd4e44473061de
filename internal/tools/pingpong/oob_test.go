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
