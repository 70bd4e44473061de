package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netdev"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options
		err  bool
	}{
		{[]string{"show", "eth0"}, Options{Netdev: "eth0"}, false},
		{[]string{"show", "--mode", "generic", "eth0", "--zero-copy", "off", "--multi-buffer=on", "--tx-checksum", "OFF", "--json"},
			Options{Netdev: "eth0", JSON: true, Prefs: netdev.Prefs{Mode: afxdp.ModeGeneric, ZeroCopy: netdev.Off, MultiBuffer: netdev.On, TxChecksum: netdev.Off}}, false},
		{[]string{"show", "--probe", "--mode", "driver", "veth0"}, Options{Netdev: "veth0", Probe: true, Prefs: netdev.Prefs{Mode: afxdp.ModeDriver}}, false},
		{[]string{"show"}, Options{}, true},
		{[]string{"show", "a", "b"}, Options{}, true},
		{[]string{"list", "eth0"}, Options{}, true},
		{nil, Options{}, true},
		{[]string{"show", "--mode", "native", "eth0"}, Options{}, true},
		{[]string{"show", "--zero-copy", "maybe", "eth0"}, Options{}, true},
		{[]string{"show", "--bogus", "eth0"}, Options{}, true},
	} {
		got, err := ParseArgs(tc.args)
		if (err != nil) != tc.err || !tc.err && got != tc.want {
			t.Errorf("%q: %+v, %v", tc.args, got, err)
		}
	}
	if _, err := ParseArgs([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

// TestShowLo: the report works on lo without privileges or a daemon, as text and JSON.
func TestShowLo(t *testing.T) {
	var b bytes.Buffer
	if err := Run(context.Background(), Options{Netdev: "lo"}, &b, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"netdev lo (index 1)", "ethernet no", "rx-gro", "not usable: not an Ethernet device", "overrides"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
	b.Reset()
	if err := Run(context.Background(), Options{Netdev: "lo", JSON: true}, &b, nil); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Info   netdev.Info
		Choice struct{ Mode string }
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil || j.Info.Name != "lo" || j.Choice.Mode == "" {
		t.Fatalf("JSON %+v: %v\n%s", j, err, b.String())
	}
	if err := Run(context.Background(), Options{Netdev: "nonexistent0"}, &b, nil); err == nil {
		t.Fatal("a missing netdev reported no error")
	}
}
