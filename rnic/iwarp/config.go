package iwarp

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/softrnic/softrnic/mpa"
)

// Config are the MPA and transport options of one endpoint (listener or dialer). A nil
// *Config means DefaultConfig(); in any Config a zero field takes the default given here
// (and in the table of limits in the package documentation), so &Config{} is safe.
type Config struct {
	// MPA is the MPA startup configuration (revision, CRC, Markers, P2P, the RTR types
	// accepted and offered, private-data cap). Its IRD/ORD are overridden by ConnParam.
	MPA mpa.Config
	// MULPDU caps the ULPDU (DDP header + payload) of sent FPDUs; 0 derives it from the
	// TCP MSS (RFC 5044 §4.5), or uses the 64 KiB maximum on loopback without Markers.
	// Values below mpa.MinMULPDU are raised to it.
	MULPDU int
	// Extensions enables the RFC 7306 atomics and immediate data. Both ends must enable
	// it (there is no wire negotiation for it; Linux siw does not support it).
	Extensions bool

	// Timeout bounds the MPA exchange in both roles (default 10 s, siw's MPAREQ_TIMEOUT):
	// an initiator waits that long for the Reply, a listener for the Request, and a
	// ConnRequest not answered by then is dropped. It is also how long an initiator
	// nudges a silent responder (see FirstFPDUTimeout and the package documentation).
	Timeout time.Duration
	// FirstFPDUTimeout is how long an accepted connection may wait for the initiator's
	// first FPDU (the RTR in peer-to-peer mode) after the MPA Reply (default Timeout; a
	// negative value means no limit). Then the connection is aborted and the QP moves to
	// Error with ErrFirstFPDUTimeout. An initiator that has sent nothing after a quarter
	// of its own FirstFPDUTimeout sends a zero-length RDMA Write, so an idle softrnic
	// initiator in the client-server model is not dropped by a softrnic responder.
	FirstFPDUTimeout time.Duration
	// Backlog is the number of connection requests a listener queues for Accept
	// (default 128); a request that finds the queue full is refused.
	Backlog int
	// MaxConns caps a listener's connections, pending (TCP accepted, MPA not finished
	// or not yet accepted) and established together (default 1024; negative: no cap).
	// A connection over the cap is refused by closing TCP before any MPA Reply.
	MaxConns int
	// MaxDeviceConns caps the accepted connections of all the listeners of one device,
	// pending and established (default 4096; negative: no cap). The cap of the listener
	// that accepts the TCP connection applies. Connections made with Dial do not count.
	MaxDeviceConns int
	// Disconnect bounds a graceful disconnect (default 5 s); then the close is abortive.
	Disconnect time.Duration
	// KeepAlive is the idle time before TCP keepalive probes start and the interval
	// between them (default 10 s; negative: keepalive off); after 3 unanswered probes
	// the kernel drops the connection and the QP moves to Error. TCP connections only.
	KeepAlive time.Duration
	// UserTimeout is TCP_USER_TIMEOUT (Linux): sent data left unacknowledged this long
	// ends the connection (default 30 s; negative: the kernel's default, ~15 minutes of
	// retransmissions). TCP connections only.
	UserTimeout time.Duration

	// Dial, if set, makes the LLP connection of Dial instead of a net.Dialer (whose
	// local address is the device's; see Dial). It may return any net.Conn, e.g. one
	// of a user-space TCP stack; see the package documentation for what a net.Conn
	// that is not a *net.TCPConn does not get.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Logger receives the listener's operational messages (accept errors and their
	// recovery); nil means slog.Default().
	Logger *slog.Logger

	testORD int // tests: override the negotiated ORD to exceed the peer's IRD
}

// DefaultConfig returns the default configuration: MPA rev 2 with CRC, no Markers,
// peer-to-peer mode accepting Write and Read RTRs and offering the Read RTR (a
// responder answers it with a zero-length Read Response, which proves the RTR was
// processed), and the siw 256-byte private-data cap.
func DefaultConfig() *Config {
	return &Config{MPA: mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite | mpa.RTRRead,
		Offer: mpa.RTRRead, MaxPrivateData: mpa.SiwMaxPrivateData}}
}

// Defaults of the Config fields (see the table of limits in the package documentation).
const (
	DefaultTimeout        = 10 * time.Second
	DefaultBacklog        = 128
	DefaultMaxConns       = 1024
	DefaultMaxDeviceConns = 4096
	DefaultDisconnect     = 5 * time.Second
	DefaultKeepAlive      = 10 * time.Second
	DefaultUserTimeout    = 30 * time.Second
)

func (c *Config) norm() Config {
	if c == nil {
		c = DefaultConfig()
	}
	n := *c
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if n.Timeout <= 0 {
		n.Timeout = DefaultTimeout
	}
	def(&n.FirstFPDUTimeout, n.Timeout)
	if n.Backlog <= 0 {
		n.Backlog = DefaultBacklog
	}
	if n.MaxConns == 0 {
		n.MaxConns = DefaultMaxConns
	}
	if n.MaxDeviceConns == 0 {
		n.MaxDeviceConns = DefaultMaxDeviceConns
	}
	if n.Disconnect <= 0 {
		n.Disconnect = DefaultDisconnect
	}
	def(&n.KeepAlive, DefaultKeepAlive)
	def(&n.UserTimeout, DefaultUserTimeout)
	if n.MPA.MaxPrivateData <= 0 {
		n.MPA.MaxPrivateData = mpa.SiwMaxPrivateData
	}
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
	return n
}

// ConnParam are the per-connection parameters of Dial and ConnRequest.Accept.
type ConnParam struct {
	PrivateData []byte // ULP private data for the MPA Request or Reply
	IRD, ORD    int    // inbound/outbound RDMA Read (and atomic) depth; 0 means 16
}
