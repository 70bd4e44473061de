package perftest

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// TestPtDestLayout checks struct pingpong_dest's wire layout (LP64, HAVE_ENDIAN).
func TestPtDestLayout(t *testing.T) {
	d := dest{LID: 1, OutReads: 0x80, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234_5678, VAddr: 0x0102_0304_0506_0708,
		SRQN: 9, GIDIndex: 0xffffffff}
	for i := range d.GID {
		d.GID[i] = byte(0xa0 + i)
	}
	b := d.Append(nil)
	if len(b) != 56 {
		t.Fatalf("len %d, want 56", len(b))
	}
	want := []byte{0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(b[:32], want) || b[32] != 0xa0 || b[47] != 0xaf || !bytes.Equal(b[48:], []byte{0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("wire form % x", b)
	}
	got, err := parseDest(b)
	if err != nil || got != d {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for n := 0; n < 56; n++ {
		if _, err := parseDest(b[:n]); err == nil {
			t.Fatalf("parsed a %d-byte prefix", n)
		}
	}
}

func TestPtMessages(t *testing.T) {
	v := versionMsg("6.06")
	if len(v) != 16 || string(v[:5]) != "6.06\x00" {
		t.Fatalf("version message %q", v)
	}
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{{"6.06", 6.06, true}, {"5.70\x00junk", 5.70, true}, {"6.2a", 6.2, true}, {"", 0, false}, {"x", 0, false}} {
		_, f, err := parseVersion([]byte(c.in))
		if (err == nil) != c.ok || f != c.want {
			t.Errorf("parseVersion(%q) = %v, %v", c.in, f, err)
		}
	}
	if m := int32Msg(4096); !bytes.Equal(m, []byte{0, 0, 0x10, 0}) {
		t.Errorf("int message % x", m)
	}
	if n, err := parseInt32([]byte{0xff, 0xff, 0xff, 0xff}); n != -1 || err != nil {
		t.Errorf("parseInt32 = %d, %v", n, err)
	}
	if m := mtuMsg(3); !bytes.Equal(m, []byte{'3', 0}) || parseMTU(m) != 3 || parseMTU([]byte{'9', 0}) != 0 || parseMTU(nil) != 0 {
		t.Errorf("MTU message % x", m)
	}
	r := bwReport{Size: 65536, Iters: 5000, Peak: 1234.5, Avg: 1000.25, MsgRateAvg: 0.016}
	msgs := r.messages(6.06)
	if len(msgs) != 5 || binary.BigEndian.Uint64(msgs[1]) != 5000 || math.Float64frombits(binary.BigEndian.Uint64(msgs[3])) != 1000.25 {
		t.Fatalf("report messages % x", msgs)
	}
	var back bwReport
	for i, m := range msgs {
		if err := back.setField(i, m, 6.06); err != nil {
			t.Fatal(err)
		}
	}
	if back != r {
		t.Fatalf("report round trip %+v, want %+v", back, r)
	}
	// Peers older than 5.33 send a 4-byte iteration count.
	if old := r.messages(5.0); len(old[1]) != 4 {
		t.Fatalf("old iters field % x", old[1])
	}
	if err := back.setField(1, []byte{0, 0, 0}, 5.0); err == nil {
		t.Fatal("short field accepted")
	}
}

func TestLoadCredit(t *testing.T) {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b, 0x01020304)
	if v := loadCredit(&b[0]); v != 0x01020304 {
		t.Fatalf("loadCredit = %#x", v)
	}
}

// FuzzPtMessages feeds arbitrary peer messages to every decoder of the exchange: none may
// panic, and a decoded pingpong_dest re-encodes to the same 56 bytes.
func FuzzPtMessages(f *testing.F) {
	d := dest{QPN: 2, PSN: 0x56be6a, RKey: 0x01120b00, VAddr: 0x7f5595698000, GIDIndex: 0xffffffff}
	f.Add(d.Append(nil))
	f.Add(versionMsg("6.06"))
	f.Add([]byte{'3', 0})
	f.Add([]byte{0, 0, 0x10, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := parseDest(b); err == nil {
			if got := d.Append(nil); !bytes.Equal(got[:20], b[:20]) || !bytes.Equal(got[24:], b[24:56]) {
				t.Fatalf("dest round trip % x -> % x", b[:56], got)
			}
		}
		_, _, _ = parseVersion(b)
		_, _ = parseInt32(b)
		_ = parseMTU(b)
		var r bwReport
		for i := 0; i < 5; i++ {
			_ = r.setField(i, b, 6.06)
			_ = r.setField(i, b, 5.0)
		}
	})
}

// TestTextDest checks the 108-byte ASCII pingpong_dest of the exchange without -R (the
// layout of KEY_PRINT_FMT_GID, as rxe's ib_write_bw -x 1 sends it from 192.168.78.2).
func TestTextDest(t *testing.T) {
	d := dest{OutReads: 1, QPN: 0x11, PSN: 0x3c7a2d, RKey: 0x1234, VAddr: 0x7f5595698000, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 78, 15: 2}}
	b := d.AppendText(nil)
	want := "0000:0001:000011:3c7a2d:00001234:00007f5595698000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4e:02:00000000:\x00"
	if len(b) != 108 || string(b) != want {
		t.Fatalf("got %d bytes %q\nwant %q", len(b), b, want)
	}
	got, err := parseTextDest(b)
	if err != nil || got != d {
		t.Fatalf("round trip %+v %v", got, err)
	}
	for _, bad := range []string{want[:107], "zzzz" + want[4:], want[:80] + "1ff" + want[82:]} {
		if _, err := parseTextDest([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if !gidIPv4(d.GID) || gidIPv4([16]byte{0xfe, 0x80}) || gidIPv4([16]byte{}) {
		t.Fatal("gidIPv4")
	}
}

func FuzzTextDest(f *testing.F) {
	d := dest{QPN: 2, PSN: 5, GID: [16]byte{10: 0xff, 11: 0xff, 12: 1}}
	f.Add(d.AppendText(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := parseTextDest(b); err == nil {
			if _, err := parseTextDest(d.AppendText(nil)); err != nil {
				t.Fatalf("re-encoded %+v does not parse: %v", d, err)
			}
		}
	})
}

func TestPollHelpers(t *testing.T) {
	b := make([]byte, 8)
	storeCredit(&b[0], 0x01020304)
	if binary.LittleEndian.Uint32(b) != 0x01020304 || loadCredit(&b[0]) != 0x01020304 || loadByte(&b[1]) != 3 {
		t.Fatalf("% x", b)
	}
}
