// Package afxdp is the AF_XDP datapath that softrnic's packet transports
// share on one netdev: one XDP program, one AF_XDP socket and UMEM per bound
// receive queue, one neighbour cache. The RoCEv2 link (rnic/rocev2/xdp) and
// the userspace TCP stack (link/netstack) sit on the same [Port] at once.
//
// # Steering
//
// The XDP program, built in Go with cilium/ebpf's asm package, redirects a
// packet to the socket of its receive queue when it is addressed to the
// port's IP address and its (IP protocol, destination port) pair is in the
// program's steering map; everything else — ARP, neighbour discovery,
// ICMP, other addresses and ports, IPv4 fragments, IPv6 extension headers,
// packets on a queue without a socket — passes to the kernel stack.
// [Port.Steer] adds a pair and names the [Receiver] the port hands those
// frames to; the RoCEv2 link steers UDP 4791, the TCP stack each TCP port
// it listens or dials on (after reserving it in the kernel, so that no
// kernel socket ever expects the same packets).
//
// # Rings and frames
//
// A socket's UMEM (one memory area split into 4096-byte frames, half for
// reception, half for transmission) is shared with the kernel through four
// single-producer/single-consumer rings (Documentation/networking/af_xdp.rst):
// the fill ring hands free frames to the kernel for reception, the RX ring
// returns filled frames, the TX ring carries frames to transmit and the
// completion ring returns them once sent. Producer and consumer indices live
// in the shared mappings and are read and written atomically.
//
// One goroutine per socket reads its RX ring and hands each frame to the
// receiver of its steering pair, which either copies what it needs at once
// (the TCP stack) or keeps the frame and gives it back later with
// [Port.Release] (the RoCEv2 link, so its payload is copied once, into the
// transport's buffer). Receivers together keep at most KeepLimit frames per
// socket (7/8 of its receive frames): beyond that frames are dropped and
// counted, so a slow receiver cannot take the last receive frames from the
// others.
//
// Transmission goes through [Port.Tx], which holds the port's send lock for
// one batch: frames are built in UMEM frames and the batch is kicked with
// one sendto. A frame whose transport checksum is left partial is queued
// with Tx.QueueChecksum: the kernel completes it through the frame's TX
// metadata (AF_XDP checksum offload, Documentation/networking/xsk-tx-metadata.rst)
// where it can, the port otherwise.
//
// # Neighbours
//
// Destination MAC addresses are the kernel's: the port reads the kernel's
// neighbour table through a netlink socket subscribed to neighbour events
// (seeded with a dump at Open) and the next hop of a destination from the
// kernel's routing table (RTM_GETROUTE), cached for 30 s. [Port.Neighbour]
// never blocks: for an unknown next hop it makes the kernel resolve it (a
// datagram through an ordinary UDP socket to the destination's discard port,
// 9) and the caller queues its frames with [Port.Defer]; the port's
// resolver sends them when the kernel's neighbour event arrives, or drops and
// counts them after 3 s (the kernel's 3 solicitations 1 s apart), after which
// the destination is refused for a second. Resolution therefore holds no
// send lock and never runs on a receive goroutine.
//
// # Modes and limits
//
// The program attaches in driver mode when the netdev supports it (veth
// does), else in generic mode; sockets bind in copy mode, or zero-copy when
// asked ([Options].ZeroCopy) and the driver offers it (veth does not, so
// zero-copy is untested). Package link/netdev reads what a netdev offers and
// chooses.
//
// Ethernet netdevs only, no VLAN tags; frames are 4096 bytes and copy mode
// reserves 256 bytes of headroom, so without multi-buffer the largest frame
// received is 3840 bytes and the largest sent 4072 (4096 less the TX
// metadata area); with it, frames of up to the MTU (at most 64 KiB) go both
// ways in several buffers, with one copy between them and a contiguous
// buffer. One port per netdev (the netdev carries a single XDP program); one
// IP address (IPv4 or IPv6) per port.
//
// Linux only; elsewhere Open returns ErrNotSupported. Open needs CAP_NET_RAW,
// CAP_NET_ADMIN and CAP_BPF (or root) and must run in the network namespace
// of the netdev; the port works from any goroutine afterwards.
package afxdp

import (
	"errors"
	"net/netip"
)

// ErrNotSupported is returned by Open where AF_XDP is unavailable (non-Linux
// systems) or the netdev is not an Ethernet device.
var ErrNotSupported = errors.New("afxdp: not supported")

// ErrNoNeighbour is returned for a destination whose MAC address the kernel
// could not resolve (within the last second).
var ErrNoNeighbour = errors.New("afxdp: neighbour not resolved")

// ErrClosed is returned by a closed port.
var ErrClosed = errors.New("afxdp: port closed")

// ErrSteerFull is returned by Steer when the steering map is full
// (MaxSteer entries).
var ErrSteerFull = errors.New("afxdp: steering map full")

// MaxSteer bounds the number of (protocol, port) pairs a port steers.
const MaxSteer = 4096

// FrameSize is the size of one UMEM frame.
const FrameSize = 4096

// IP protocol numbers of the steerable transports.
const (
	ProtoTCP = 6
	ProtoUDP = 17
)

// Mode selects how the XDP program is attached.
type Mode int

const (
	// ModeAuto tries driver (native) mode and falls back to generic mode.
	ModeAuto Mode = iota
	// ModeGeneric attaches in generic (SKB) mode, which every netdev supports.
	ModeGeneric
	// ModeDriver attaches in driver (native) mode (veth and most NICs).
	ModeDriver
)

// MarshalText names the mode (JSON reports).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m Mode) String() string {
	switch m {
	case ModeGeneric:
		return "generic"
	case ModeDriver:
		return "driver"
	}
	return "auto"
}

// Options configure a Port. The zero value with Interface and Addr set is
// a working configuration.
type Options struct {
	// Interface is the netdev name.
	Interface string
	// Addr is the local IPv4 or IPv6 address (one of the netdev's) whose
	// steered packets the port takes.
	Addr netip.Addr
	// Queue is the receive queue the socket binds to (default 0); it also
	// transmits. Steered packets that arrive on other queues go to the
	// kernel stack.
	Queue int
	// AllQueues binds one socket (each with its own UMEM) to every receive
	// queue of the netdev instead, for NICs that spread flows over queues
	// (RSS).
	AllQueues bool
	// Frames is the number of 4096-byte UMEM frames per socket, half for
	// reception and half for transmission (default 2048, i.e. 8 MiB).
	Frames int
	// Mode is the XDP attach mode.
	Mode Mode
	// ZeroCopy asks for XDP_ZEROCOPY and falls back to XDP_COPY when the
	// driver does not offer it.
	ZeroCopy bool
	// DropRx, if set, is asked about every received frame before it is
	// handed to a receiver and drops it when it returns true (counted in
	// Stats.RxInjectedDrops). It is for tests that inject loss; it runs on
	// the receive goroutine and must not block.
	DropRx func(frame []byte) bool
	// SingleBuffer turns XDP multi-buffer off. By default the sockets bind
	// with XDP_USE_SG (Linux 6.6; without it, or where the driver refuses
	// it, they bind without) and the program is multi-buffer aware, so a
	// packet longer than a UMEM frame (a jumbo frame, a GSO super-packet from
	// a local sender through tap or veth) arrives in several buffers, which
	// the port copies into one before handing it over (counted in
	// Stats.RxMultiBuffer); without it such packets are dropped by the
	// kernel. Likewise a frame longer than a UMEM frame is sent in several
	// (Stats.TxMultiBuffer), so MaxFrame follows the netdev's MTU.
	SingleBuffer bool
	// NoTxChecksum turns transmit checksum offload off. By default the UMEM
	// has room for TX metadata (Linux 6.11; without, the port computes the
	// checksums) and Tx.QueueChecksum asks for a frame's transport checksum
	// through it: in copy mode the kernel's skb gets CHECKSUM_PARTIAL (the
	// netdev's offload fills the checksum in, or the kernel in software); in
	// zero-copy mode only when DriverTxChecksum says the driver does it.
	NoTxChecksum bool
	// DriverTxChecksum: the driver implements the checksum request of TX
	// metadata in zero-copy mode (netdev xsk-features tx-checksum; package
	// link/netdev reads it).
	DriverTxChecksum bool
	// DropTx is DropRx's counterpart for sent frames (counted in
	// Stats.TxInjectedDrops); it runs under the send lock.
	DropTx func(frame []byte) bool
	// Tap, if set, sees every frame the port receives on its sockets and
	// every frame it queues for transmission (package capture's Writer is
	// one).
	Tap Tap
}

// A Tap sees frames as they are; Frame is called on the port's receive
// goroutines and under its send lock, so it must copy what it keeps and
// never block.
type Tap interface {
	Frame(frame []byte, outbound bool)
}

// Stats are a port's counters.
type Stats struct {
	RxPackets, TxPackets uint64
	// RxDropped counts received frames no receiver took: malformed, for a
	// pair no longer steered, or beyond a receiver's KeepLimit.
	RxDropped uint64
	// RxInjectedDrops and TxInjectedDrops count frames dropped by
	// Options.DropRx and DropTx.
	RxInjectedDrops, TxInjectedDrops uint64
	// TxDropped counts frames not sent for want of a free UMEM frame or TX
	// ring slot after kicking the kernel.
	TxDropped uint64
	// RxMultiBuffer counts packets received in several buffers (multi-buffer)
	// and handed over as one copy; RxTooLong those dropped because they
	// exceeded 64 KiB. TxMultiBuffer counts frames sent in several.
	RxMultiBuffer, RxTooLong, TxMultiBuffer uint64
	// NeighQueued counts frames queued while their next hop was resolved,
	// NeighDropped those dropped because resolution failed or the queue
	// was full, NeighFailed the failed resolutions, NeighResolved the
	// successful ones.
	NeighQueued, NeighDropped, NeighFailed, NeighResolved uint64
	// Kernel XDP socket statistics (XDP_STATISTICS), summed over sockets.
	KernelRxDropped, KernelRxRingFull, KernelFillRingEmpty uint64
}

// NeighState is the answer of Port.Neighbour.
type NeighState int

const (
	// NeighOK: the MAC address is known.
	NeighOK NeighState = iota
	// NeighPending: resolution is under way; queue frames with Defer.
	NeighPending
	// NeighFailed: resolution failed within the last second; drop.
	NeighFailed
)

// RxFrame is a received frame in a UMEM: Data is the Ethernet frame, L3
// and L4 the offsets of its IP and transport headers. A receiver that keeps
// it returns it with Port.Release. A packet that arrived in several buffers
// (multi-buffer) is handed over as a copy outside the UMEM, valid during the
// Frame call only: it cannot be kept (Keepable reports it), whatever Frame
// returns.
type RxFrame struct {
	Data   []byte
	L3, L4 int
	sock   int
	addr   uint64
}

// Keepable reports whether the receiver may keep the frame past Frame.
func (f RxFrame) Keepable() bool { return f.addr != ^uint64(0) }

// A Receiver takes the frames steered to it. Frame is called on a
// receive goroutine of the port (one per bound queue, so possibly
// concurrently) and must not block; it returns true to keep the frame,
// which stays valid until it is released with Port.Release. EndBatch is
// called after each batch of frames from one receive goroutine.
type Receiver interface {
	Frame(f RxFrame) (keep bool)
	EndBatch()
}
