// Package xdp is an AF_XDP packet link for the RoCEv2 transport
// (rocev2.Link): the endpoint's packets bypass the kernel UDP stack in both
// directions.
//
// A [Link] binds an AF_XDP socket to one receive queue of a netdev (or one
// to each queue, [Options].AllQueues). A socket's UMEM (one memory area
// split into 4096-byte frames, half for reception, half for transmission;
// Recv and Send copy between them and the transport's buffers) is shared
// with the kernel
// through four single-producer/single-consumer rings: the fill ring hands
// free frames to the kernel for reception, the RX ring returns filled
// frames, the TX ring carries frames to transmit and the completion ring
// returns them once sent. Producer and consumer indices live in the shared
// mappings and are read and written atomically.
//
// An XDP program, built in Go with cilium/ebpf's asm package, is attached
// to the netdev. It redirects UDP packets for the link's IP address and UDP
// port (4791, the RoCEv2 port, IBTA Annex A17.2) that arrive on any queue
// to the socket in an XSK map entry for that queue and passes everything
// else (ARP, neighbour discovery, ICMP, other addresses and ports, IP
// fragments) to the kernel stack; a packet for a queue without a socket is
// passed too (the redirect's fallback action).
//
// Send builds the Ethernet, IP and UDP headers itself the way rxe does
// (rxe_net.c prepare4: DF set, IP ID 0, UDP checksum 0; over IPv6 the UDP
// checksum is filled in, RFC 8200 §8.1), so the ICRC the transport
// computed with IP ID 0 is right on the wire. The link is IPv4 or IPv6 as
// its local address is. The destination MAC comes from the kernel
// neighbour table (the route's gateway for off-link peers), cached for 30
// s; when the peer is unknown a datagram to its discard port (9) is sent
// through an ordinary UDP socket to make the kernel resolve it, and Send
// waits up to 3 s (an unresolved peer is then refused for a second).
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
// Without Options.AllQueues the link binds one queue; on a multi-queue NIC
// then steer UDP 4791 to it (ethtool -N <dev> flow-type udp4 dst-port 4791
// action <queue>) or use one queue (ethtool -L <dev> combined 1).
//
// Modes: the program attaches in driver mode when the netdev supports it
// (veth does), else in generic mode; sockets bind in copy mode, or
// zero-copy when asked ([Options].ZeroCopy) and the driver offers it
// (veth does not, so zero-copy is untested).
//
// Limits: Ethernet netdevs only, no VLAN tags or IPv6 extension headers;
// frames are 4096 bytes and copy mode reserves 256 bytes of headroom, so the
// largest packet is 3840 bytes and the path MTU at most 2048 (4096 needs
// larger or multi-buffer frames); one link per netdev (the netdev carries a
// single XDP program).
//
// Linux only; elsewhere New returns ErrNotSupported. New needs CAP_NET_RAW,
// CAP_NET_ADMIN and CAP_BPF (or root) and must run in the network namespace
// of the netdev; the link works from any goroutine afterwards.
package xdp

import (
	"errors"
	"net/netip"
)

// ErrNotSupported is returned by New where AF_XDP is unavailable (non-Linux
// systems).
var ErrNotSupported = errors.New("rocev2/xdp: not supported")

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

// Options configure a Link.
type Options struct {
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
	// read at New) or a UMEM frame, of the other address family, no
	// neighbour, or no free frame after retrying.
	TxDropped uint64
	// Kernel XDP socket statistics (XDP_STATISTICS).
	KernelRxDropped, KernelRxRingFull, KernelFillRingEmpty uint64
}
