package attach

import (
	"errors"
	"net/netip"
	"reflect"
	"syscall"
	"testing"
)

func TestAddrRoundTrip(t *testing.T) {
	for _, s := range []string{"192.0.2.1:4791", "[2001:db8::1]:4791", "127.0.0.1:0", "[::ffff:10.0.0.1]:65535"} {
		a := netip.MustParseAddrPort(s)
		var b [AddrLen]byte
		PutAddr(b[:], a)
		want := netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if got := GetAddr(b[:]); got != want || b[18] != 0 || b[19] != 0 {
			t.Errorf("%v: got %v (%x)", a, got, b)
		}
	}
}

func TestErrorUnwrap(t *testing.T) {
	m := ErrorMsg(Msg{Op: OpClaim, ID: 4}, syscall.EADDRINUSE)
	if m.Op != OpError || m.ID != 4 || m.Errno != int(syscall.EADDRINUSE) {
		t.Fatalf("%+v", m)
	}
	err := &Error{Op: OpClaim, Errno: m.Errno, Msg: m.Error}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatal("errno not reachable")
	}
	if m := ErrorMsg(Msg{}, errors.New("x")); m.Errno != int(syscall.EIO) {
		t.Fatalf("an error without errno: %+v", m)
	}
}

// FuzzDecode: any datagram decodes to a message or an error, never a panic, and a
// decoded message's encoding is stable (encode, decode, encode gives the same bytes).
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"op":"hello","hello":{"version":1,"pid":7,"comm":"x"}}`))
	f.Add([]byte(`{"op":"ok","id":3,"qps":[{"qpn":5,"state":"RTS"}]}`))
	f.Add([]byte(`{"op":"error","errno":98,"error":"in use"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		e, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(e)
		if err != nil {
			t.Fatalf("%+v → %s: %v", m, e, err)
		}
		if e2, _ := Encode(m2); !reflect.DeepEqual(e, e2) {
			t.Fatalf("%s → %s", e, e2)
		}
	})
}
