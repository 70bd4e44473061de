package netdev

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// offloads are the ethtool features the report lists, with what in
// softrnic they matter to.
var offloads = []struct{ name, use string }{
	{"rx-checksum", "kernel TCP/UDP receive (iWARP on kernel TCP, RoCEv2 UDP link)"},
	{"tx-checksum-ipv4", "kernel TCP/UDP send"},
	{"tx-checksum-ipv6", "kernel TCP/UDP send"},
	{"tx-checksum-ip-generic", "kernel TCP/UDP send; AF_XDP TX checksum metadata in copy mode (CHECKSUM_PARTIAL skbs)"},
	{"tx-tcp-segmentation", "kernel TCP (TSO) for iWARP on kernel TCP"},
	{"tx-tcp6-segmentation", "kernel TCP (TSO) for iWARP on kernel TCP"},
	{"tx-generic-segmentation", "kernel GSO (TCP, UDP GSO)"},
	{"tx-udp-segmentation", "RoCEv2 UDP link GSO (automatic, --udp-offload overrides; IPv4: each segment's ICRC fixed for its IP ID)"},
	{"rx-gro", "kernel GRO (iWARP on kernel TCP; the RoCEv2 UDP link's UDP GRO, automatic, --udp-offload overrides)"},
	{"rx-gro-hw", "hardware GRO"},
	{"rx-gro-list", "GRO fraglist"},
	{"rx-udp-gro-forwarding", "UDP GRO for forwarded traffic"},
	{"large-receive-offload", "LRO (breaks forwarding; not needed)"},
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Render writes the `link show` report of a netdev: what it offers and
// what softrnic uses (c, from Choose).
func Render(w io.Writer, in *Info, c Choice) error {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	drv := in.Driver
	if drv == "" {
		drv = "-"
	}
	p("netdev %s (index %d): driver %s, mtu %d, mac %s, ethernet %s, up %s\n",
		in.Name, in.Index, drv, in.MTU, orDash(in.MAC), yesNo(in.Ether), yesNo(in.OperUp))
	p("kernel %s\n", orDash(in.Kernel))
	p("queues: rx %d, tx %d", in.RxQueues, in.TxQueues)
	if in.Combined >= 0 {
		p("; ethtool channels: combined %d, rx %d, tx %d", in.Combined, in.RxChannels, in.TxChannels)
	}
	p("\n")
	p("\noffloads (ethtool features):\n")
	if in.Features == nil {
		p("  unavailable\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  feature\tavailable\ton\tused for\n")
		for _, o := range offloads {
			f, ok := in.Features[o.name]
			if !ok {
				continue
			}
			avail := yesNo(f.Available)
			if f.Fixed {
				avail += " (fixed)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", o.name, avail, yesNo(f.Active), o.use)
		}
		tw.Flush()
		p("  (%d features in all; `ethtool -k %s` lists them)\n", len(in.Features), in.Name)
	}
	x := in.XDP
	p("\nXDP (%s):\n", orDash(x.Source))
	if x.Source == "netdev-genl" || x.Source == "probe" {
		p("  xdp-features: %s\n", bitNames(x.Features, xdpFeatureNames))
		p("  native XDP_REDIRECT %s, AF_XDP zero-copy %s, multi-buffer rx-sg %s\n",
			yesNo(x.Has(XDPRedirect)), yesNo(x.Has(XDPXSKZeroCopy)), yesNo(x.Has(XDPRxSG)))
		if x.Has(XDPXSKZeroCopy) {
			p("  xdp-zc-max-segs %d\n", x.ZCMaxSegs)
		}
		p("  kernel AF_XDP multi-buffer (XDP_USE_SG): %s\n", yesNo(x.KernelSG))
		p("  rx metadata: %s; xsk features: %s\n", bitNames(x.RxMetadata, rxMetaNames), bitNames(x.XSK, xskFeatureNames))
	} else {
		p("  unknown: the kernel has no netdev generic netlink family; a probe (root) can find them\n")
	}
	if in.XDPProgID != 0 {
		p("  attached program: id %d, %s mode\n", in.XDPProgID, in.XDPProgMode)
	} else {
		p("  attached program: none\n")
	}
	p("\nsoftrnic AF_XDP datapath on %s:\n", in.Name)
	if !in.Ether {
		p("  not usable: not an Ethernet device\n")
	} else {
		mode := "copy"
		if c.ZeroCopy {
			mode = "zero-copy"
		}
		p("  XDP %s mode, AF_XDP %s, multi-buffer %s, TX checksum metadata %s, RoCE path MTU up to %d\n",
			c.Mode, mode, used(c.MultiBufferSupported, c.MultiBufferUse), used(c.TxChecksumSupported, c.TxChecksumUse), c.MaxPathMTU)
	}
	for _, y := range c.Why {
		p("  - %s\n", y)
	}
	if in.Driver == "veth" || in.Driver == "tun" {
		p("  note: a local sender behind a %s leaves TCP checksums partial (its tx-checksumming); the AF_XDP\n"+
			"        TCP completes them (link/netstack Stats.PartialChecksums), and a capture shows them partial\n", in.Driver)
	}
	p("\noverrides (softrnic link show flags; netdev.Prefs): --mode auto|driver|generic,\n" +
		"  --zero-copy, --multi-buffer, --tx-checksum auto|on|off\n")
	if len(in.Errors) > 0 {
		p("\nnot read:\n")
		errs := append([]string(nil), in.Errors...)
		sort.Strings(errs)
		for _, e := range errs {
			p("  %s\n", e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func used(supported, use bool) string {
	switch {
	case use:
		return "used"
	case supported:
		return "supported, not used"
	}
	return "not supported"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
