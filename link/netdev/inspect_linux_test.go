//go:build linux

package netdev

import (
	"bytes"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/internal/netnstest"
)

// TestInspectLo: the report works on lo without privileges or a daemon.
func TestInspectLo(t *testing.T) {
	in, err := Inspect("lo")
	if err != nil {
		t.Fatal(err)
	}
	if in.Ether || in.Features == nil || in.MTU == 0 {
		t.Fatalf("lo: %+v", in)
	}
	var b bytes.Buffer
	if err := Render(&b, in, Choose(in, Prefs{})); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"netdev lo (index 1)", "rx-gro", "not usable: not an Ethernet device"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
	if _, err := Inspect("nonexistent0"); err == nil {
		t.Error("Inspect of a missing netdev succeeded")
	}
}

// TestInspectVeth is the fallback path CI exercises (veth has no
// zero-copy): netdev genetlink answers, copy mode in driver mode, and the
// probe agrees.
func TestInspectVeth(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	netnstest.In(t, e.NS[0], func() {
		in, err := Inspect(e.Dev[0])
		if err != nil {
			t.Fatal(err)
		}
		if in.Driver != "veth" || !in.Ether || in.XDP.Source != "netdev-genl" || len(in.Errors) != 0 {
			t.Fatalf("veth: %+v", in)
		}
		c := Choose(in, Prefs{})
		var b bytes.Buffer
		if err := Render(&b, in, c); err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", b.String())
		csum := "TX checksum metadata used"
		if !in.TxMetadata {
			csum = "TX checksum metadata not supported"
		}
		for _, s := range []string{"driver veth", "XDP driver mode, AF_XDP copy, multi-buffer used, " + csum, "tx-checksum-ip-generic",
			"native XDP_REDIRECT yes, AF_XDP zero-copy no", "leaves TCP checksums partial", "overrides"} {
			if !strings.Contains(b.String(), s) {
				t.Errorf("report lacks %q", s)
			}
		}
		p, err := Probe(e.Dev[0])
		if err != nil {
			t.Fatal(err)
		}
		if !p.Has(XDPRedirect) || p.Has(XDPXSKZeroCopy) || !p.KernelSG {
			t.Errorf("probe: %+v", p)
		}
	})
}
