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
		why("multi-buffer off: forced; packets longer than a %d-byte receive buffer are dropped by the kernel", singleBufferFrame)
	case mb:
		c.MultiBufferUse = true
		why("multi-buffer (XDP_USE_SG): packets longer than a receive buffer (jumbo frames, a local sender's GSO packets) arrive in several")
	case p.MultiBuffer == On:
		c.MultiBufferUse = true
		why("multi-buffer on: forced although not reported; the bind falls back to single buffers if refused")
	case !known:
		c.MultiBufferUse = true
		why("multi-buffer: support unknown; tried at bind, single buffers if refused")
	case !x.KernelSG:
		why("multi-buffer: the kernel has no XDP_USE_SG (before 6.6); packets longer than a %d-byte receive buffer are dropped", singleBufferFrame)
	case c.Mode != afxdp.ModeGeneric && !x.Has(XDPRxSG):
		why("multi-buffer: the driver has no multi-buffer XDP (rx-sg); packets longer than a receive buffer are dropped")
	default:
		why("multi-buffer: zero-copy takes one buffer per packet here (xdp-zc-max-segs %d); longer packets are dropped", x.ZCMaxSegs)
	}
	c.DriverTxChecksum = x.XSK&XSKTxChecksum != 0
	if c.ZeroCopy {
		c.TxChecksumSupported = c.DriverTxChecksum
	} else {
		c.TxChecksumSupported = in.TxMetadata
	}
	switch {
	case p.TxChecksum == Off:
		why("TX checksum metadata off: forced; the port computes TCP checksums")
	case c.TxChecksumSupported:
		c.TxChecksumUse = true
		if c.ZeroCopy {
			why("TX checksum metadata: the driver computes TCP checksums (xsk-features tx-checksum)")
		} else {
			why("TX checksum metadata: the kernel has the netdev (or itself) compute TCP checksums (copy mode, Linux 6.11+)")
		}
	case p.TxChecksum == On && !c.ZeroCopy:
		c.TxChecksumUse = true
		why("TX checksum metadata on: forced; used if the kernel registers the metadata area, else the port computes")
	case c.ZeroCopy:
		why("TX checksum metadata: the driver does not compute checksums in zero-copy mode; the port computes them")
	default:
		why("TX checksum metadata: the kernel is older than 6.11; the port computes TCP checksums")
	}
	// Without multi-buffer a RoCE packet must fit one receive buffer (and one
	// UMEM frame to send); with it, only the netdev's MTU bounds it.
	frame := singleBufferFrame
	if c.MultiBufferUse {
		frame = 14 + 65535
	}
	if in.MTU > 0 {
		frame = min(frame, in.MTU+14)
	}
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if m+roceOverhead <= frame {
			c.MaxPathMTU = m
			break
		}
	}
	why("largest RoCE path MTU %d (frames of %d bytes: the netdev MTU; without multi-buffer one UMEM buffer)", c.MaxPathMTU, frame)
	if !in.Ether {
		why("not an Ethernet device: AF_XDP links cannot run on it")
	}
	return c
}

// Options returns afxdp options for the choice on the netdev (Addr and the
// rest are the caller's).
func (c Choice) Options(name string) afxdp.Options {
	return afxdp.Options{Interface: name, Mode: c.Mode, ZeroCopy: c.ZeroCopy, SingleBuffer: !c.MultiBufferUse,
		NoTxChecksum: !c.TxChecksumUse, DriverTxChecksum: c.DriverTxChecksum}
}
