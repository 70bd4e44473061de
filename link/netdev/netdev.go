// Package netdev reads what a network device offers softrnic — ethtool
// offload features, XDP and AF_XDP capabilities, MTU, queues — chooses how
// the AF_XDP datapath (link/afxdp) runs on it, and renders the report that
// `softrnic link show <netdev>` prints.
//
// Sources, all readable without privileges and without a daemon:
//   - ethtool features (ETHTOOL_GFEATURES through SIOCETHTOOL) and channel
//     counts, through github.com/safchain/ethtool: a small, maintained
//     ioctl binding (only x/sys), used by Cilium and others, that reads the
//     feature strings with their available/requested/active state;
//     mdlayher/ethtool speaks the newer ethtool netlink family but offers
//     no feature (offload) reads.
//   - XDP capabilities from the kernel's "netdev" generic netlink family
//     (NETDEV_CMD_DEV_GET, Linux 6.3+; include/uapi/linux/netdev.h):
//     xdp-features (basic, redirect, ndo-xmit, xsk-zerocopy, hw-offload,
//     rx-sg, ndo-xmit-sg), xdp-zc-max-segs (6.6+, with AF_XDP multi-buffer),
//     xdp-rx-metadata-features and xsk-features (tx-checksum metadata,
//     6.8+). Where the family is missing, Probe finds the same answers by
//     trying: attach an XDP_PASS program in driver mode, bind an AF_XDP
//     socket in zero-copy mode (root, and it briefly disturbs the netdev, so
//     only on request).
//   - MTU, queue counts and the attached XDP program from rtnetlink.
//
// Choose turns the capabilities into afxdp options: zero-copy in driver
// mode when the driver offers it, else copy mode in driver mode when the
// driver supports XDP_REDIRECT, else generic mode; XDP multi-buffer
// (XDP_USE_SG) where the kernel and driver have it, so packets longer than a
// UMEM frame arrive (jumbo frames, a local sender's GSO packets); AF_XDP TX
// checksum metadata where the kernel has it (copy mode) or the driver does
// (zero-copy), so the user-space TCP leaves its checksums to the kernel or
// the NIC; each choice has an override in Prefs.
package netdev

import (
	"errors"
	"fmt"

	"github.com/softrnic/softrnic/link/afxdp"
)

// ErrNotSupported is returned where the facility is Linux only.
var ErrNotSupported = errors.New("netdev: not supported")

// XDP action features (enum netdev_xdp_act).
const (
	XDPBasic       = 1 << 0
	XDPRedirect    = 1 << 1
	XDPNdoXmit     = 1 << 2
	XDPXSKZeroCopy = 1 << 3
	XDPHWOffload   = 1 << 4
	XDPRxSG        = 1 << 5
	XDPNdoXmitSG   = 1 << 6
)

// AF_XDP socket features (enum netdev_xsk_flags).
const (
	XSKTxTimestamp = 1 << 0
	XSKTxChecksum  = 1 << 1
	XSKTxLaunch    = 1 << 2
)

// XDP receive metadata (enum netdev_xdp_rx_metadata).
const (
	RxMetaTimestamp = 1 << 0
	RxMetaHash      = 1 << 1
	RxMetaVLAN      = 1 << 2
)

// XDPCaps are a netdev's XDP capabilities.
type XDPCaps struct {
	// Source says where they come from: "netdev-genl", "probe" or
	// "unknown" (neither was possible).
	Source string
	// Features is the xdp-features bit set (XDP…).
	Features uint64
	// ZCMaxSegs is xdp-zc-max-segs, the fragments per packet in zero-copy
	// mode (the kernel reports it for zero-copy drivers only).
	ZCMaxSegs uint32
	// KernelSG: the kernel has AF_XDP multi-buffer (XDP_USE_SG, Linux
	// 6.6), inferred from attributes that came with or after it
	// (xdp-zc-max-segs, xsk-features) or found by the probe's bind.
	KernelSG bool
	// RxMetadata (RxMeta…) and XSK (XSK…) feature sets, when reported.
	RxMetadata, XSK uint64
}

// Has reports whether every bit of f is in the XDP feature set.
func (c XDPCaps) Has(f uint64) bool { return c.Features&f == f }

// Feature is one ethtool feature's state.
type Feature struct {
	Available, Requested, Active, Fixed bool
}

// Info is what Inspect read about a netdev.
type Info struct {
	Name               string
	Index              int
	Driver             string // "" when the netdev has none (lo)
	MTU                int
	MaxMTU             int
	MAC                string
	Ether              bool // an Ethernet device (AF_XDP links need one)
	OperUp             bool
	RxQueues, TxQueues int
	// Combined, Rx and Tx channel counts from ethtool, when the driver
	// reports them (-1 otherwise).
	Combined, RxChannels, TxChannels int
	// Features by ethtool name; nil when ethtool could not read them.
	Features map[string]Feature
	XDP      XDPCaps
	// Kernel is the running kernel's release; TxMetadata whether it has
	// AF_XDP TX metadata with XDP_UMEM_TX_METADATA_LEN (Linux 6.11), read from
	// the release (copy mode needs nothing of the driver).
	Kernel     string
	TxMetadata bool
	// Attached XDP program: its ID and mode ("driver", "generic",
	// "offload"), if any.
	XDPProgID   uint32
	XDPProgMode string
	// Errors records what could not be read (source: error).
	Errors []string
}

// Tristate is an override: Auto lets Choose decide.
type Tristate int8

const (
	Auto Tristate = iota
	On
	Off
)

// Prefs override Choose; the zero value chooses everything.
type Prefs struct {
	// Mode forces the XDP attach mode (afxdp.ModeAuto: choose).
	Mode afxdp.Mode
	// ZeroCopy, MultiBuffer and TxChecksum force AF_XDP zero-copy, XDP
	// multi-buffer and TX checksum metadata on or off.
	ZeroCopy, MultiBuffer, TxChecksum Tristate
}

// Choice is how softrnic runs the AF_XDP datapath on a netdev.
type Choice struct {
	Mode     afxdp.Mode
	ZeroCopy bool
	// MultiBuffer: XDP multi-buffer reception (XDP_USE_SG). Supported
	// records that the kernel and driver have it; Use that softrnic uses it.
	MultiBufferSupported, MultiBufferUse bool
	// TxChecksum: AF_XDP TX checksum metadata for the user-space TCP;
	// same split. DriverTxChecksum: the driver implements it in zero-copy
	// mode (xsk-features tx-checksum).
	TxChecksumSupported, TxChecksumUse, DriverTxChecksum bool
	// MaxPathMTU is the largest RoCE path MTU the datapath carries.
	MaxPathMTU int
	// Why explains each choice, in order.
	Why []string
}

// releaseAtLeast reports whether a kernel release ("6.18.44-fc-v657") is at
// least major.minor.
func releaseAtLeast(rel string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(rel, "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
