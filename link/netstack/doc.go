// Package netstack is a userspace TCP/IP stack on an AF_XDP port
// (link/afxdp) that yields standard net.Conn and net.Listener values, so a
// transport written against the net package (rnic/iwarp) runs over AF_XDP
// through a dial/listen hook with the same signatures as net.Dialer's
// DialContext and net.ListenConfig's Listen.
//
// The TCP is gVisor's netstack (gvisor.dev/gvisor/pkg/tcpip: the stack,
// ipv4/ipv6, transport/tcp and the gonet adapters), a maintained,
// production TCP (SACK, RACK, window scaling, receive-buffer moderation,
// CUBIC) used by gVisor, Tailscale and wireguard-go's netstack mode. This
// package adds only the link endpoint between it and the port and the port
// bookkeeping:
//
//   - Ports. Every TCP port the stack uses is first reserved in the kernel
//     by binding a kernel TCP socket to the same address and port without
//     listening (for a dial, port 0: the kernel chooses the ephemeral port),
//     so no kernel socket can take it and the kernel's own connect never
//     picks it; then the port is steered to the AF_XDP socket and the
//     gVisor endpoint is bound to it. A listener and its accepted
//     connections share one reservation; it is released (steering removed,
//     kernel socket closed) when the last of them has closed and the TIME_WAIT
//     interval (Config.TimeWait) has passed.
//
//   - Neighbours. The gVisor NIC is a layer-3 endpoint (no ARP or NDP of its
//     own: ARP and ND pass to the kernel). Outgoing packets take their
//     destination MAC from the port's neighbour cache, which follows the
//     kernel's neighbour and routing tables (netlink); packets for a peer
//     being resolved wait in the port's bounded queue.
//
//   - Checksums. The link endpoint verifies the IPv4 header and TCP checksums of
//     received packets in one pass (gVisor then skips its own) and completes a TCP
//     checksum left partial by a sender on the same host (a kernel TCP peer over veth
//     or tap with transmit checksum offload fills in only the pseudo-header sum, which
//     an AF_XDP socket receives as it is); such segments are counted
//     (Stats.PartialChecksums). gVisor computes the checksums of sent segments.
//
//   - Segmentation. The link endpoint offers gVisor "host" GSO: the TCP hands
//     it packets of up to 64 KiB, which it cuts into MSS-sized frames straight
//     into the UMEM (software TSO), so the TCP state machine runs once per 64
//     KiB rather than per segment. Received packets longer than a UMEM frame
//     (jumbo frames; GSO packets of a local sender in generic XDP mode) arrive
//     whole through the port's multi-buffer reception.
//
//   - Connections. Conns are the stack's own net.Conn over gVisor's endpoint,
//     with vectored reads and writes (mpa.VectoredReader/VectoredWriter) and
//     the kernel connection's options rnic/iwarp uses (half close, linger,
//     keepalive, user timeout, MSS); errors carry the kernel's errno.
//
// Each received segment is copied once from the UMEM into a gVisor
// buffer; each sent segment once from gVisor's buffers into a UMEM frame.
package netstack

import (
	"errors"
	"time"
)

// ErrNotSupported is returned by New where AF_XDP is unavailable.
var ErrNotSupported = errors.New("netstack: not supported")

// Config tunes a Stack; the zero value is usable.
type Config struct {
	// SendBuffer and ReceiveBuffer are the TCP buffer sizes per connection
	// (default 4 MiB each; receive-buffer moderation grows the receive
	// window up to ReceiveBuffer).
	SendBuffer, ReceiveBuffer int
	// TimeWait is how long a closed connection keeps its port (RFC 9293
	// §3.6.1 TIME-WAIT; default 5 s, shorter than the kernel's 60 s so a
	// busy endpoint does not hold thousands of kernel reservations).
	TimeWait time.Duration
}

// Stats are the stack's counters beside the port's.
type Stats struct {
	// TxNoNeighbour counts packets dropped because their next hop could
	// not be resolved; TxTooLong those longer than the port's MTU.
	TxNoNeighbour, TxTooLong uint64
	// PartialChecksums counts received segments whose TCP checksum was left
	// partial by a sender on the same host and completed here (see the
	// package comment).
	PartialChecksums uint64
	// Reservations is the number of ports currently held.
	Reservations int
	// From gVisor's TCP: segments sent and received, retransmitted
	// segments, segments with bad checksums, resets sent.
	SegmentsSent, SegmentsReceived, Retransmits, ChecksumErrors, ResetsSent uint64
}
