package rocev2

import (
	"errors"
	"net/netip"
	"time"
)

// Link carries RoCEv2 UDP payloads (BTH through ICRC) between endpoints. It is
// batch-first, in the manner of wireguard-go's conn.Bind: one call moves up to
// BatchSize packets, so a socket implementation can use sendmmsg/recvmmsg and
// UDP GSO/GRO.
//
// Send and Recv may be called concurrently with each other; the engine calls
// Recv from one goroutine only. Send must not retain bufs after it returns.
type Link interface {
	// Send transmits every buffer in bufs as one datagram to dst.
	Send(bufs [][]byte, dst netip.AddrPort) error
	// Recv waits for at least one datagram and fills bufs[i] (each with
	// capacity ≥ MaxPacket), sizes[i] and from[i] for n datagrams. It returns
	// ErrLinkClosed after Close.
	Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (n int, err error)
	// LocalAddr is the address and UDP port packets leave from; the ICRC covers them.
	LocalAddr() netip.AddrPort
	// BatchSize is the largest batch Send and Recv handle in one call.
	BatchSize() int
	// Close unblocks Recv and releases the link.
	Close() error
}

// MaxPacket is the largest UDP payload the transport sends or accepts: the
// headers of the largest opcode, a 4096-byte payload, pad and ICRC.
const MaxPacket = 4096 + 80 + 4

// ErrLinkClosed is returned by a closed link.
var ErrLinkClosed = errors.New("rocev2: link closed")

// GSILink is a Link whose GSI traffic — the UD packets to and from QP1, which carry
// the IB CM's MADs (IBTA Vol.1 §13.4, ch. 12) — travels on a link of its own, GSI.
// A process attached to the softrnic daemon's device has one (package host): the
// daemon owns QP1 of the device's address for every process on it, routes each
// incoming MAD to the process whose connection or listener it names, and sends each
// process's MADs on the device's socket; the process's other packets go through
// its own (steered) socket. An Endpoint on a GSILink sends every CM MAD on GSI,
// computing its ICRC with GSI's LocalAddr, and receives from GSI in a second
// goroutine, which takes UD packets to QP1 only (others are counted in RxDropped).
// GSI's LocalAddr must have the link's IP: the CM names it in REQ and REP.
// The Endpoint closes GSI when it closes.
//
// Listen and ListenUD claim their service ID (roce.ServiceID of the port) with
// ClaimService before they listen, so that requests for it are routed here; the
// error (syscall.EADDRINUSE when another process listens there) fails the Listen.
// Closing the listener calls ReleaseService.
type GSILink interface {
	Link
	GSI() Link
	ClaimService(id uint64) error
	ReleaseService(id uint64)
}

// RecvAddrLink is a Link whose packets arrive at another address than they leave
// from: the relay link of rnic/rocev2/steer sends from an ephemeral port of the
// device's IP and receives what peers sent to the device's port. The endpoint
// verifies received ICRCs (which cover the destination port) against RecvAddr.
type RecvAddrLink interface {
	Link
	RecvAddr() netip.AddrPort
}

// PendingLink is a Link that can tell whether received datagrams wait to be read. On a
// GSILink, a peer's DREQ (on the GSI link) can overtake the peer's last packets (on
// the data link, not yet read): before a DREQ ends a connection, the endpoint lets its
// data path read what is pending (bounded by drainTimeout), so a message the peer
// acknowledged before disconnecting completes as sent instead of flushed.
type PendingLink interface {
	Pending() bool
}

// viewLink is a Link that can hand out received packets in its own buffers: recvView
// is Recv, except that it may replace bufs[i] with a view of the link's memory, valid
// until the next call (UDPLink with GRO: no copy out of the coalesced datagram). The
// endpoint's receive loop, which keeps nothing of a packet past its batch, uses it.
type viewLink interface {
	recvView(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error)
}

// eachLink is a Link whose receive can run as a loop inside one wait on its socket
// (UDPLink): recvEach calls fn with each batch recvView would return, until the link
// closes (ErrLinkClosed) or fails, and after a batch that found the socket drained it
// waits for the poller without first reading the socket empty. stop (nil: never) is
// asked after each batch and before each wait for the poller; when it reports true,
// recvEach returns errRecvStopped. setRecvDeadline sets the socket's read deadline: one
// in the past makes a recvEach waiting for the poller return os.ErrDeadlineExceeded
// (how another goroutine interrupts it: rxdrive.go). The endpoint's receive loop uses it.
type eachLink interface {
	recvEach(bufs [][]byte, sizes []int, from []netip.AddrPort, fn func(n int), stop func() bool) error
	setRecvDeadline(t time.Time)
}

// errRecvStopped ends a recvEach whose stop function reported true.
var errRecvStopped = errors.New("rocev2: receive stopped")

// gatherLink is a Link that sends packets given in parts: packet i is head[i], body[i]
// and tail[i] in that order (body and tail may be nil or empty). Connections send a
// request's payload straight from registered memory through it (UDPLink: the parts are
// the iovecs of its sendmmsg); on other links they copy it into the packet buffer.
type gatherLink interface {
	sendParts(head, body, tail [][]byte, dst netip.AddrPort) error
}
