package netdev

import (
	"fmt"

	"github.com/softrnic/softrnic/link/afxdp"
)

// Frame geometry of link/afxdp: 4096-byte UMEM frames with 256 bytes of
// headroom in copy mode.
const (
	singleBufferFrame = afxdp.FrameSize - 256
	// roceOverhead is what a RoCEv2 packet adds to its payload on the
	// wire at most: Ethernet 14, IPv6 40, UDP 8, BTH 12, the largest
	// extended headers 28, ICRC 4 (IBTA A17; roce.MaxHeaders).
	roceOverhead = 14 + 40 + 8 + 12 + 28 + 4
)

// Choose decides how the AF_XDP datapath runs on the netdev described by
// in, under the overrides in p.
func Choose(in *Info, p Prefs) Choice {
	var c Choice
	why := func(f string, a ...any) { c.Why = append(c.Why, fmt.Sprintf(f, a...)) }
	x := in.XDP
	known := x.Source == "netdev-genl" || x.Source == "probe"
	switch {
	case p.Mode != afxdp.ModeAuto:
		c.Mode = p.Mode
		why("mode %v: forced", p.Mode)
	case !known:
		c.Mode = afxdp.ModeAuto
		why("mode: XDP capabilities unknown; try driver mode, fall back to generic")
	case x.Has(XDPRedirect):
		c.Mode = afxdp.ModeDriver
		why("mode driver: the driver supports XDP_REDIRECT")
	default:
		c.Mode = afxdp.ModeGeneric
		why("mode generic: the driver has no native XDP_REDIRECT")
	}
	zcOK := x.Has(XDPXSKZeroCopy) && c.Mode != afxdp.ModeGeneric
	switch {
	case p.ZeroCopy == Off:
		why("zero-copy off: forced")
	case p.ZeroCopy == On:
		c.ZeroCopy = true
		if zcOK {
			why("zero-copy on: forced (supported)")
		} else {
			why("zero-copy on: forced although not reported; the bind falls back to copy mode if refused")
		}
	case zcOK:
		c.ZeroCopy = true
		why("zero-copy: the driver supports AF_XDP zero-copy")
	case x.Has(XDPXSKZeroCopy):
		why("copy mode: zero-copy needs driver mode")
	case known:
		why("copy mode: the driver has no AF_XDP zero-copy")
	default:
		why("copy mode: zero-copy support unknown")
	}
	// Multi-buffer: the kernel needs XDP_USE_SG (6.6); driver mode needs
	// rx-sg, zero-copy more than one segment.
	mb := x.KernelSG
	if c.Mode != afxdp.ModeGeneric {
		mb = mb && x.Has(XDPRxSG)
	}
	if c.ZeroCopy {
		mb = mb && x.ZCMaxSegs > 1
	}
	c.MultiBufferSupported = mb
	switch {
	case p.MultiBuffer == Off:
		why("multi-buffer off: forced")
	case mb || p.MultiBuffer == On:
		why("multi-buffer (XDP_USE_SG) supported=%v but not used: link/afxdp has single-buffer frames", mb)
	default:
		why("multi-buffer: not supported here")
	}
	c.TxChecksumSupported = x.XSK&XSKTxChecksum != 0
	switch {
	case p.TxChecksum == Off:
		why("TX checksum metadata off: forced")
	case c.TxChecksumSupported || p.TxChecksum == On:
		why("TX checksum metadata supported=%v but not used: link/afxdp sends no TX metadata; the TCP stack computes checksums", c.TxChecksumSupported)
	}
	frame := singleBufferFrame
	if in.MTU > 0 {
		frame = min(frame, in.MTU+14)
	}
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if m+roceOverhead <= frame {
			c.MaxPathMTU = m
			break
		}
	}
	why("largest RoCE path MTU %d (frame %d bytes: netdev MTU and the single-buffer UMEM frame)", c.MaxPathMTU, frame)
	if !in.Ether {
		why("not an Ethernet device: AF_XDP links cannot run on it")
	}
	return c
}

// Options returns afxdp options for the choice on the netdev (Addr and the
// rest are the caller's).
func (c Choice) Options(name string) afxdp.Options {
	return afxdp.Options{Interface: name, Mode: c.Mode, ZeroCopy: c.ZeroCopy}
}
