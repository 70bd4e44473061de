//go:build linux

package link

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netdev"
)

// TestShowVeth: "softrnic link show" on a veth, the fallback path CI exercises (veth has
// native XDP_REDIRECT and multi-buffer but no zero-copy), with the automatic choices and
// with every override; then the choices are what an AF_XDP port opened with them uses.
// (The zero-copy branch is unit-tested in link/netdev against recorded netlink answers.)
func TestShowVeth(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	netnstest.In(t, e.NS[0], func() {
		in, err := netdev.Inspect(e.Dev[0])
		if err != nil {
			t.Fatal(err)
		}
		csum := "TX checksum metadata used"
		csumWhy := "TX checksum metadata: the kernel has the netdev (or itself) compute TCP checksums"
		if !in.TxMetadata {
			csum = "TX checksum metadata not supported"
			csumWhy = "TX checksum metadata: the kernel is older than 6.11"
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"show", e.Dev[0]}, []string{
				"netdev " + e.Dev[0], "driver veth, mtu 1500", "ethernet yes, up yes", "queues: rx 1, tx 1",
				"tx-checksum-ip-generic", "XDP (netdev-genl)", "native XDP_REDIRECT yes, AF_XDP zero-copy no, multi-buffer rx-sg yes",
				"XDP driver mode, AF_XDP copy, multi-buffer used, " + csum + ", RoCE path MTU up to 1024",
				"mode driver: the driver supports XDP_REDIRECT", "copy mode: the driver has no AF_XDP zero-copy",
				"multi-buffer (XDP_USE_SG)", csumWhy, "leaves TCP checksums partial", "overrides"}},
			{[]string{"show", "--mode", "generic", "--multi-buffer", "off", "--tx-checksum", "off", e.Dev[0]}, []string{
				"XDP generic mode, AF_XDP copy, multi-buffer supported, not used, TX checksum metadata",
				"mode generic: forced", "multi-buffer off: forced", "TX checksum metadata off: forced"}},
			{[]string{"show", "--zero-copy", "on", e.Dev[0]}, []string{
				"AF_XDP zero-copy", "zero-copy on: forced although not reported; the bind falls back to copy mode"}},
		} {
			o, err := ParseArgs(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := Run(context.Background(), o, &b, nil); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.want {
				if !strings.Contains(b.String(), s) {
					t.Errorf("%q: report lacks %q:\n%s", tc.args, s, b.String())
				}
			}
		}
		// the automatic choice, applied: the port runs as reported
		po := netdev.Choose(in, netdev.Prefs{}).Options(e.Dev[0])
		po.Addr = e.Addr[0]
		p, err := afxdp.Open(po)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if p.Mode() != afxdp.ModeDriver || p.ZeroCopy() || !p.MultiBuffer() || p.TxChecksum() != in.TxMetadata {
			t.Fatalf("port: mode %v, zero-copy %v, multi-buffer %v, TX checksum %v", p.Mode(), p.ZeroCopy(), p.MultiBuffer(), p.TxChecksum())
		}
		// with the program attached the report names it
		var b bytes.Buffer
		if err := Run(context.Background(), Options{Netdev: e.Dev[0]}, &b, nil); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "driver mode\n") || !strings.Contains(b.String(), "attached program: id ") {
			t.Errorf("report with the port open:\n%s", b.String())
		}
	})
}
