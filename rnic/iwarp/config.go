package iwarp

import (
	"errors"
	"fmt"
	"time"

	"github.com/softrnic/softrnic/mpa"
)

// Config are the MPA and transport options of one endpoint (listener or dialer).
type Config struct {
	// MPA is the MPA startup configuration (revision, CRC, Markers, P2P and RTR types,
	// private-data cap). Its IRD/ORD are overridden by ConnParam.
	MPA mpa.Config
	// MULPDU caps the ULPDU (DDP header + payload) of sent FPDUs; 0 derives it from the
	// TCP MSS (RFC 5044 §4.5), or uses the 64 KiB maximum on loopback without Markers.
	// Values below mpa.MinMULPDU are raised to it.
	MULPDU int
	// Extensions enables the RFC 7306 atomics and immediate data. Both ends must enable
	// it (there is no wire negotiation for it; Linux siw does not support it).
	Extensions bool
	// Timeout bounds the MPA exchange (default 10 s, siw's MPAREQ_TIMEOUT).
	Timeout time.Duration
	// Backlog is the number of pending connection requests a listener keeps (default 128).
	Backlog int
	// Disconnect bounds a graceful disconnect (default 5 s); then the close is abortive.
	Disconnect time.Duration
	// Settle delays the initiator's first FPDU (the RTR in peer-to-peer mode) after the
	// MPA Reply. Linux siw sends its Reply before it attaches its receive handler, and an
	// FPDU arriving in between stays unread (tests/interop/README.md finding 1); a short
	// delay avoids it. Dial returns at once; only the first transmission waits, so the
	// cost is one delay per connection, paid by the first operation. The default,
	// DefaultSettle, is the delay the interop runs needed against siw under QEMU; on real
	// hardware siw's window is far shorter, and 0 disables the workaround (safe against
	// any responder but siw). No delay is applied when the responder is a Listener of this
	// process (Dial recognizes the TCP connection), so in-process use never pays it.
	Settle time.Duration

	testORD int // tests: override the negotiated ORD to exceed the peer's IRD
}

// DefaultConfig returns the default configuration: MPA rev 2 with CRC, no Markers,
// peer-to-peer mode with Write and Read RTRs, the siw 256-byte private-data cap, and
// DefaultSettle for siw responders.
func DefaultConfig() *Config {
	return &Config{MPA: mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite | mpa.RTRRead,
		MaxPrivateData: mpa.SiwMaxPrivateData}, Settle: DefaultSettle}
}

// DefaultSettle is the default Config.Settle: 20 ms was not enough for siw 6.1 under
// QEMU, 200 ms made 10 of 10 connections succeed (tests/interop/README.md finding 1).
const DefaultSettle = 200 * time.Millisecond

func (c *Config) norm() Config {
	if c == nil {
		c = DefaultConfig()
	}
	n := *c
	if n.Timeout <= 0 {
		n.Timeout = 10 * time.Second
	}
	if n.Backlog <= 0 {
		n.Backlog = 128
	}
	if n.Disconnect <= 0 {
		n.Disconnect = 5 * time.Second
	}
	if n.MPA.MaxPrivateData <= 0 {
		n.MPA.MaxPrivateData = mpa.SiwMaxPrivateData
	}
	return n
}

// ConnParam are the per-connection parameters of Dial and ConnRequest.Accept.
type ConnParam struct {
	PrivateData []byte // ULP private data for the MPA Request or Reply
	IRD, ORD    int    // inbound/outbound RDMA Read (and atomic) depth; 0 means 16
}

// ErrClosed is returned by a closed Listener.
var ErrClosed = errors.New("iwarp: listener closed")

// RejectError is returned by Dial when the peer rejected the connection (MPA Reply with
// the R bit, RFC 5044 §7.1.2); it carries the peer's private data.
type RejectError struct {
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("iwarp: connection rejected by peer (%d bytes private data)", len(e.PrivateData))
}

// Unwrap returns mpa.ErrRejected.
func (e *RejectError) Unwrap() error { return mpa.ErrRejected }
