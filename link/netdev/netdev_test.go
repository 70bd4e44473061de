package netdev

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/link/afxdp"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func recorded(t *testing.T, name string) XDPCaps {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := decodeDevGet(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDecodeRecorded decodes NETDEV_CMD_DEV_GET answers recorded on Linux
// 6.18 (TestRecord): lo, a veth, and virtio_net, whose driver offers
// AF_XDP zero-copy.
func TestDecodeRecorded(t *testing.T) {
	for _, tc := range []struct {
		file string
		want XDPCaps
	}{
		{"lo.genl", XDPCaps{Source: "netdev-genl", KernelSG: true}},
		{"veth.genl", XDPCaps{Source: "netdev-genl", Features: XDPBasic | XDPRedirect | XDPRxSG,
			RxMetadata: RxMetaTimestamp | RxMetaHash | RxMetaVLAN, KernelSG: true}},
		{"virtio-zc.genl", XDPCaps{Source: "netdev-genl", Features: XDPBasic | XDPRedirect | XDPXSKZeroCopy | XDPRxSG,
			ZCMaxSegs: 1, KernelSG: true}},
	} {
		if got := recorded(t, tc.file); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.file, got, tc.want)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	b, err := os.ReadFile("testdata/virtio-zc.genl")
	if err != nil {
		t.Fatal(err)
	}
	// every cut inside an attribute is an error, never a panic
	for i := range len(b) {
		_, _, err := decodeDevGet(b[:i])
		boundary := i == 4 || i == 12 || i == 24 || i == 36 || i == 48
		if boundary && err != nil {
			t.Errorf("prefix %d (attribute boundary): %v", i, err)
		}
		if !boundary && !errors.Is(err, ErrShortAttr) {
			t.Errorf("prefix %d: %v, want ErrShortAttr", i, err)
		}
	}
	bad := append([]byte(nil), b...)
	bad[4+8] = 9 // xdp-features attribute of 5 bytes
	if _, _, err := decodeDevGet(bad); !errors.Is(err, ErrShortAttr) {
		t.Errorf("wrong-size attribute: %v", err)
	}
}

func FuzzDecodeDevGet(f *testing.F) {
	for _, n := range []string{"lo.genl", "veth.genl", "virtio-zc.genl"} {
		b, _ := os.ReadFile(filepath.Join("testdata", n))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { _, _, _ = decodeDevGet(b) })
}

func TestChoose(t *testing.T) {
	zc, veth := recorded(t, "virtio-zc.genl"), recorded(t, "veth.genl")
	zcsg := zc
	zcsg.ZCMaxSegs, zcsg.XSK = 17, XSKTxChecksum // a zero-copy driver with multi-buffer and checksum metadata
	eth := func(x XDPCaps, mtu int, txmeta bool) *Info {
		return &Info{Name: "d", Ether: true, MTU: mtu, XDP: x, TxMetadata: txmeta}
	}
	for _, tc := range []struct {
		name       string
		in         *Info
		p          Prefs
		mode       afxdp.Mode
		zeroCopy   bool
		mb, mbUse  bool
		csum, csUs bool
		pathMTU    int
	}{
		{"zero-copy driver: one segment, no checksum metadata", eth(zc, 1500, true), Prefs{}, afxdp.ModeDriver, true, false, false, false, false, 1024},
		{"zero-copy driver with segments and checksums", eth(zcsg, 9000, true), Prefs{}, afxdp.ModeDriver, true, true, true, true, true, 4096},
		{"zero-copy refused by override: copy mode", eth(zc, 1500, true), Prefs{ZeroCopy: Off}, afxdp.ModeDriver, false, true, true, true, true, 1024},
		{"generic forced: no zero-copy", eth(zc, 1500, true), Prefs{Mode: afxdp.ModeGeneric}, afxdp.ModeGeneric, false, true, true, true, true, 1024},
		{"veth: copy, driver", eth(veth, 1500, true), Prefs{}, afxdp.ModeDriver, false, true, true, true, true, 1024},
		{"veth, kernel before 6.11: no checksum metadata", eth(veth, 1500, false), Prefs{}, afxdp.ModeDriver, false, true, true, false, false, 1024},
		{"veth, overrides off", eth(veth, 1500, true), Prefs{MultiBuffer: Off, TxChecksum: Off}, afxdp.ModeDriver, false, true, false, true, false, 1024},
		{"veth jumbo: path MTU 4096 in multi-buffer frames", eth(veth, 9000, true), Prefs{}, afxdp.ModeDriver, false, true, true, true, true, 4096},
		{"veth jumbo, single buffer: capped by the receive buffer", eth(veth, 9000, true), Prefs{MultiBuffer: Off}, afxdp.ModeDriver, false, true, false, true, true, 2048},
		{"veth zero-copy forced", eth(veth, 1500, true), Prefs{ZeroCopy: On}, afxdp.ModeDriver, true, false, false, false, false, 1024},
		{"no redirect: generic", eth(XDPCaps{Source: "netdev-genl", Features: XDPBasic, KernelSG: true}, 1500, true), Prefs{}, afxdp.ModeGeneric, false, true, true, true, true, 1024},
		{"unknown: auto, tried at bind", eth(XDPCaps{Source: "unknown"}, 1500, false), Prefs{}, afxdp.ModeAuto, false, false, true, false, false, 1024},
		{"small MTU", eth(veth, 600, true), Prefs{}, afxdp.ModeDriver, false, true, true, true, true, 256},
	} {
		c := Choose(tc.in, tc.p)
		if c.Mode != tc.mode || c.ZeroCopy != tc.zeroCopy || c.MultiBufferSupported != tc.mb || c.MultiBufferUse != tc.mbUse ||
			c.TxChecksumSupported != tc.csum || c.TxChecksumUse != tc.csUs || c.MaxPathMTU != tc.pathMTU {
			t.Errorf("%s: %+v", tc.name, c)
		}
		o := c.Options("d")
		if o.Mode != c.Mode || o.ZeroCopy != c.ZeroCopy || o.Interface != "d" || o.SingleBuffer == c.MultiBufferUse ||
			o.NoTxChecksum == c.TxChecksumUse || o.DriverTxChecksum != (tc.in.XDP.XSK&XSKTxChecksum != 0) {
			t.Errorf("%s: options %+v", tc.name, o)
		}
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.18.44-fc-v657": true, "6.11.0": true, "6.10.14-arch1": false, "5.15.0-91-generic": false,
		"7.0": true, "": false, "garbage": false} {
		if got := releaseAtLeast(rel, 6, 11); got != want {
			t.Errorf("%q: %v", rel, got)
		}
	}
}

// TestRenderGolden renders the report of a zero-copy netdev built from the
// recorded virtio_net answer (testdata/render-zc.txt; -update rewrites it).
func TestRenderGolden(t *testing.T) {
	in := &Info{Name: "eth0", Index: 4, Driver: "virtio_net", MTU: 1500, MAC: "02:fc:00:00:00:01", Ether: true, OperUp: true,
		Kernel: "6.18.0", TxMetadata: true,
		RxQueues: 2, TxQueues: 2, Combined: 2, RxChannels: 0, TxChannels: 0, XDP: recorded(t, "virtio-zc.genl"),
		Features: map[string]Feature{
			"rx-checksum":             {Available: true, Active: true, Fixed: true},
			"tx-checksum-ip-generic":  {Available: true, Requested: true, Active: true},
			"tx-tcp-segmentation":     {Available: true, Requested: true, Active: true},
			"tx-udp-segmentation":     {},
			"rx-gro":                  {Available: true, Requested: true, Active: true},
			"something-else-entirely": {Available: true},
		}}
	var b bytes.Buffer
	if err := Render(&b, in, Choose(in, Prefs{})); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "render-zc.txt")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("golden file: %v (run with -update to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("report differs from %s:\n%s", golden, b.String())
	}
	for _, s := range []string{"XDP driver mode, AF_XDP zero-copy", "xsk-zerocopy", "xdp-zc-max-segs 1"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q", s)
		}
	}
}
