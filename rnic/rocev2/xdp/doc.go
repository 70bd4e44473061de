// Package xdp is an AF_XDP packet link for the RoCEv2 transport
// (rocev2.Link): the endpoint's packets bypass the kernel UDP stack in both
// directions.
//
// The link sits on an [afxdp.Port] (package link/afxdp: the XDP program,
// the AF_XDP sockets and UMEMs, the neighbour cache), which it opens itself
// or shares with other users of the same netdev, such as the userspace TCP
// stack of link/netstack ([Options].Port). It steers UDP packets for its
// address and port (4791, the RoCEv2 port, IBTA Annex A17.2) to itself;
// everything the port does not steer (ARP, neighbour discovery, ICMP, other
// addresses and ports, IP fragments) passes to the kernel stack. Received
// frames stay in the UMEM until Recv copies their UDP payload into the
// transport's buffer (one copy); the link keeps at most the port's
// KeepLimit frames waiting and drops (and counts) beyond that.
//
// Send builds the Ethernet, IP and UDP headers itself the way rxe does
// (rxe_net.c prepare4: DF set, IP ID 0, UDP checksum 0; over IPv6 the UDP
// checksum is filled in, RFC 8200 §8.1), so the ICRC the transport
// computed with IP ID 0 is right on the wire. The link is IPv4 or IPv6 as
// its local address is. The destination MAC comes from the port's
// neighbour cache (the kernel's tables); Send never waits for resolution:
// packets for a peer being resolved are queued by the port and sent once
// the kernel has resolved it (or dropped after 3 s), and a peer whose
// resolution failed in the last second is refused with
// afxdp.ErrNoNeighbour. So one unresolved peer never stalls the endpoint's
// receive goroutine, which sends ACKs, nor other QPs.
//
// ICRC: unlike a UDP socket, this link sees the real IP header of every
// received packet, so the ICRC (IBTA Annex A17.3.3) is verified exactly.
// A packet whose header matches what the transport assumes (IHL 5, DF, ID
// 0, which rxe and softrnic send) is handed over untouched and verified
// exactly by the transport. Any other header (non-zero IP ID, options, DF
// clear) is verified here against the real header; a good one has its ICRC
// field rewritten to the value for the canonical header, so the transport's
// exact check passes. One that instead matches the canonical header is what
// a softrnic UDP link with GSO sends (the kernel numbers the segments' IP
// IDs 0, 1, 2… after the ICRC was computed with 0): it is accepted and
// counted (ICRCZeroID) unless Options.StrictICRC is set, which drops it as
// rxe would. Anything else is dropped and counted (ICRCErrors). The check
// stays a full 32-bit check (against at most two headers), so with
// this link rocev2.Config.StrictICRC can always be set. A UD receiver then
// sees IP ID 0 in its GRH rather than the sender's.
//
// Without Options.AllQueues the port binds one queue; on a multi-queue NIC
// then steer UDP 4791 to it (ethtool -N <dev> flow-type udp4 dst-port 4791
// action <queue>) or use one queue (ethtool -L <dev> combined 1).
//
// Limits: those of link/afxdp (Ethernet only, one port per netdev). With XDP
// multi-buffer (link/afxdp's default where the kernel has it) packets longer
// than a UMEM frame go both ways in several, so path MTU 4096 works on a
// netdev whose MTU carries it (4096 + 92 bytes of headers and more: jumbo
// frames); received ones are copied into one of the link's 256 buffers
// (beyond them: dropped, RxQueueFull). Without multi-buffer the path MTU is
// at most 2048.
//
// Linux only; elsewhere New returns ErrNotSupported. New needs CAP_NET_RAW,
// CAP_NET_ADMIN and CAP_BPF (or root) and must run in the network namespace
// of the netdev; the link works from any goroutine afterwards.
package xdp

import (
	"net/netip"

	"github.com/softrnic/softrnic/link/afxdp"
)

// ErrNotSupported is returned by New where AF_XDP is unavailable (non-Linux
// systems).
var ErrNotSupported = afxdp.ErrNotSupported

// ErrNoNeighbour is returned by Send for a peer whose MAC address could not
// be resolved in the last second.
var ErrNoNeighbour = afxdp.ErrNoNeighbour

// Mode selects how the XDP program is attached.
type Mode = afxdp.Mode

// Attach modes (see afxdp.Mode).
const (
	ModeAuto    = afxdp.ModeAuto
	ModeGeneric = afxdp.ModeGeneric
	ModeDriver  = afxdp.ModeDriver
)

// Options configure a Link.
type Options struct {
	// Port, when set, is the AF_XDP port the link uses, shared with its
	// other users: Interface, Queue, AllQueues, Frames, Mode and ZeroCopy
	// are then the port's, Addr's address must be the port's, and Close
	// leaves the port open. Otherwise New opens a port of its own.
	Port *afxdp.Port
	// Interface is the netdev name.
	Interface string
	// Queue is the receive queue the socket binds to (default 0). Packets
	// for the link that arrive on other queues go to the kernel stack.
	Queue int
	// AllQueues binds one socket (each with its own UMEM) to every receive
	// queue of the netdev instead, for NICs that spread flows over queues
	// (RSS); Recv serves them round robin and Send uses Queue's.
	AllQueues bool
	// Addr is the local IPv4 or IPv6 address (one of the netdev's) and UDP port;
	// port 0 means 4791.
	Addr netip.AddrPort
	// Frames is the number of 4096-byte UMEM frames, half for reception
	// and half for transmission (default 2048, i.e. 8 MiB).
	Frames int
	// Batch is the link's BatchSize (default 64).
	Batch int
	// Mode is the XDP attach mode.
	Mode Mode
	// ZeroCopy asks for XDP_ZEROCOPY and falls back to XDP_COPY when the
	// driver does not offer it.
	ZeroCopy bool
	// TOS and TTL of sent packets (TTL default 64).
	TOS, TTL uint8
	// Tap sees the port's frames as they are (package capture's Writer
	// records them); only for a port the link opens.
	Tap afxdp.Tap
	// StrictICRC drops packets whose ICRC matches only the canonical
	// header (ID 0) and not the real one, as rxe does; see the package
	// comment.
	StrictICRC bool
}

// Stats are the link's counters.
type Stats struct {
	RxPackets, TxPackets uint64
	// RxDropped counts frames the link discarded: not IPv4/UDP for the
	// local address and port, malformed, or longer than the receive buffer.
	RxDropped uint64
	// ICRCErrors counts packets with a non-canonical IP header whose ICRC
	// did not verify; ICRCRestamped those that verified against the real
	// header and were handed to the transport with the canonical ICRC;
	// ICRCZeroID those accepted because their ICRC matches the canonical
	// header instead (Options.StrictICRC unset).
	ICRCErrors, ICRCRestamped, ICRCZeroID uint64
	// TxDropped counts packets not sent: longer than the netdev's MTU (as
	// read at New) or a UMEM frame, of the other address family, refused
	// for want of a neighbour, or no free frame after retrying. Packets
	// queued while the peer was resolved and dropped later are in the
	// port's NeighDropped.
	TxDropped uint64
	// RxQueueFull counts frames dropped because the link held its share of
	// the port's receive frames (the endpoint did not keep up).
	RxQueueFull uint64
	// Kernel XDP socket statistics (XDP_STATISTICS).
	KernelRxDropped, KernelRxRingFull, KernelFillRingEmpty uint64
}
