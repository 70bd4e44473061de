package daemon

import (
	"io"
	"strings"
	"testing"
)

// -device: NAME@ADDR, names of their own, never with -xdp or without a first device.
func TestDeviceFlags(t *testing.T) {
	base := []string{"-foreground", "-name", "d0", "-sock", "/run/x/d0.sock", "-rocev2", "127.0.0.1"}
	o, err := ParseArgs(append(base, "-device", "d1@127.0.0.3:5000", "-device", "d2@lo"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := deviceOptions(o, o.Devices[0])
	if err != nil || d1.Name != "d1" || d1.RoCEv2 != "127.0.0.3:5000" || d1.Sock != "/run/x/d1.sock" || d1.TargetMiB != 0 {
		t.Fatalf("d1: %+v %v", d1, err)
	}
	d2, err := deviceOptions(o, o.Devices[1])
	if err != nil || d2.Netdev != "lo" || !strings.HasPrefix(d2.RoCEv2, "127.") {
		t.Fatalf("d2 on lo: %+v %v", d2, err)
	}
	for _, bad := range [][]string{
		append(base, "-device", "d1"),
		append(base, "-device", "@127.0.0.3"),
		append(base, "-device", "d0@127.0.0.3"),
		append(base, "-device", "d1@127.0.0.3", "-device", "d1@127.0.0.4"),
		append(base, "-device", "d1@127.0.0.3", "-xdp", "eth0"),
		{"-foreground", "-iwarp", "127.0.0.1:0", "-device", "d1@127.0.0.3"},
	} {
		if _, err := ParseArgs(bad, io.Discard); err == nil || !strings.Contains(err.Error(), "-device") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
