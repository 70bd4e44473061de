package rocev2

import (
	"log/slog"
	"time"

	"github.com/softrnic/softrnic/roce"
)

// Config are the transport defaults of an Endpoint (the verbs QP attributes of
// ibv_modify_qp that a ConnAttr does not override) and its limits. The zero value
// is the default configuration: every zero field means the default its comment
// gives, and the values that mean "none" or "infinite" on the wire are the named
// constants below. The limits and timeouts are tabled in the package documentation.
type Config struct {
	MTU roce.MTU // path MTU (0: MTU1024, what a 1500-byte Ethernet gives)
	// Timeout is the local ACK timeout exponent: 4.096 µs × 2^Timeout, 1..31
	// (0: 14 ≈ 67 ms; ACKTimeoutInfinite: never time out, the wire's 0). Requests
	// unacknowledged that long are retransmitted. An ACK or response that comes while
	// the timer runs postpones it by a whole timeout from when it would have expired,
	// so a retransmission comes one to two timeouts after the last ACK or response.
	Timeout uint8
	// RetryCnt is how often a request is retransmitted after an ACK timeout or
	// a PSN-sequence NAK before the WQE completes with RetryExcErr (0: 7, the
	// most the CM's 3-bit field carries; NoRetry: none). Larger values apply to
	// QPs connected with Endpoint.Connect; the CM negotiates 0..7.
	RetryCnt uint8
	// RNRRetry is how often an RNR NAK is retried (0: RNRRetryInfinite, the
	// wire's 7; NoRetry: none; 1..6).
	RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code this responder sends (IBTA table 45;
	// 0: 12 = 0.64 ms; RNRTimerLongest: 655.36 ms, the wire's code 0).
	MinRNRTimer roce.RNRTimer
	MaxRdAtomic int // outstanding Reads/atomics as requester (ORD; 0: 128, rxe's and siw's most)
	MaxDestRd   int // inbound Reads/atomics as responder (IRD; 0: 128)
	// Window is the most request packets (PSNs) an RC connection leaves unacknowledged
	// (0: 512). The connection's window adapts below it, starting at min(Window, 128)
	// and halving after a loss (window.go has the rules; Conn.Window reports it).
	Window   int
	AckEvery int // set AckReq at least every this many packets (0: 64)
	// WholeWrites sends every RC RDMA WRITE as one message (WRITE First, Middle…,
	// Last; IBTA 9.2) also over a link that sends with UDP GSO (UDPLink.GSO). By
	// default such a link sends an RC RDMA WRITE (not one with Immediate data)
	// longer than the path MTU as one WRITE Only message per packet, each with the
	// RETH of its part (the remote address and length of the bytes it carries): all
	// of its packets then have one size, and UDP GSO sends a run of equal datagrams
	// as one super-datagram, where a WRITE First's RETH, 16 bytes the Middle packets
	// lack, starts a new run in every message (64 KiB WRITEs over loopback went from
	// 0.61–0.80 to 0.80–0.94 of raw UDP GSO in alternating runs of the builds before and
	// after the change: bench/README.md). The responder's memory ends the same: a WRITE without Immediate data
	// completes nothing there, and its parts are placed in PSN order as the packets
	// of one message are. What differs at the peer is the MSN it counts and a RETH in
	// every packet (16 bytes more on the wire each). A WRITE with Immediate data is
	// always one message: its receive completion reports the message's whole length.
	WholeWrites bool
	PKey        uint16 // 0: 0xFFFF
	// PeerPort, when set, is the UDP port of every peer's RoCE link: Dial sends to
	// it when the address names no UDP port, and the passive side answers there
	// whatever port a request came from, and accepts a QP's packets from any port
	// of the peer's IP. 0 (the default) applies Annex A17.3 instead: a request
	// from source port 0 or 0xC000-0xFFFF (flow entropy: kernel and hardware
	// RoCEv2) is answered on 4791, any other source port is the sender's own
	// listening port (a softrnic endpoint) and is answered there; Dial sends to
	// the address's UDP port, 4791 if it names none.
	PeerPort uint16
	// StrictICRC requires IPv4 ICRCs to verify exactly with IP ID 0 (what
	// softrnic sends without GSO: UDPOptions.GSO numbers segments' IDs and
	// fixes their ICRCs to match). By default a UDP-socket receiver, which
	// cannot see the sender's IP ID, verifies an IPv4 ICRC exactly when it
	// matches with ID 0 and otherwise solves for the ID
	// (roce.SolveICRCIPv4ID): the packet is accepted, and counted in
	// ICRCIDSolved, iff some ID makes it consistent, a 16-bit check (a random
	// corruption passes with probability 2^-16; every single-bit error is
	// caught). Rxe and GSO senders use non-zero IDs, so keep this off for them.
	// IPv6 ICRCs and in-memory links are always verified exactly.
	StrictICRC bool

	// KeepAlive is how long an RC connection may carry no packet before it
	// probes the peer with a zero-length RDMA WRITE (0: 15 s; NoTimeout: never;
	// checked every quarter interval). RoCE has no other way to learn that an
	// idle peer died: the probe, like any request, is retransmitted RetryCnt
	// times and then moves the QP to Error (ErrRetryExceeded). So a dead peer is
	// noticed within 1¼ × KeepAlive + (1+RetryCnt) × the ACK timeout when idle,
	// (1+RetryCnt) × the ACK timeout when requests are outstanding.
	KeepAlive time.Duration

	// MaxPendingRequests bounds the connection requests (REQs) the endpoint
	// holds before the application accepts or rejects them, over all its
	// listeners (0: 1024; Unlimited). Beyond it a REQ is answered with REJ
	// "no resources" and counted in CMRejectedLimit.
	MaxPendingRequests int
	// MaxPassiveConns bounds the connections accepted through the endpoint's
	// listeners that are alive at once (0: 4096; Unlimited). Beyond it a REQ is
	// rejected as above.
	MaxPassiveConns int
	// Logger receives the endpoint's rare operational messages (link errors,
	// once per episode). nil: slog.Default().
	Logger *slog.Logger
}

// Explicit values for the fields whose zero value means a default.
const (
	// ACKTimeoutInfinite in Config.Timeout disables the local ACK timer (the
	// wire's timeout 0): a request whose ACK is lost is never retransmitted
	// unless a NAK asks for it, and a dead peer is never noticed.
	ACKTimeoutInfinite uint8 = 0xFF
	// NoRetry in Config.RetryCnt, Config.RNRRetry, ConnParam.RetryCount or
	// ConnParam.RNRRetryCount means no retries at all (the wire's 0).
	NoRetry uint8 = 0xFF
	// RNRRetryInfinite retries RNR NAKs without limit (the wire's 7).
	RNRRetryInfinite uint8 = 7
	// RNRTimerLongest in Config.MinRNRTimer is the 655.36 ms RNR timer (the
	// wire's code 0).
	RNRTimerLongest roce.RNRTimer = 0x20
	// Unlimited in a limit (Config.MaxPendingRequests, Config.MaxPassiveConns,
	// CMConfig.Backlog, CMConfig.MaxConns) removes it.
	Unlimited = -1
	// NoTimeout in Config.KeepAlive or a CMConfig duration disables it.
	NoTimeout time.Duration = -1
)

// Defaults of Config.
const (
	DefaultTimeout            = 14 // ≈ 67 ms
	DefaultRetryCnt           = 7
	DefaultMinRNRTimer        = roce.RNRTimer(12) // 0.64 ms
	DefaultMaxRdAtomic        = 128
	DefaultWindow             = 512
	DefaultAckEvery           = 64
	DefaultKeepAlive          = 15 * time.Second
	DefaultMaxPendingRequests = 1024
	DefaultMaxPassiveConns    = 4096
)

func (c *Config) norm() Config {
	var n Config
	if c != nil {
		n = *c
	}
	if !n.MTU.Valid() {
		n.MTU = roce.MTU1024
	}
	switch {
	case n.Timeout == 0:
		n.Timeout = DefaultTimeout
	case n.Timeout > 31 && n.Timeout != ACKTimeoutInfinite:
		n.Timeout = 31
	}
	if n.RetryCnt == 0 {
		n.RetryCnt = DefaultRetryCnt
	}
	switch {
	case n.RNRRetry == 0:
		n.RNRRetry = RNRRetryInfinite
	case n.RNRRetry > 7 && n.RNRRetry != NoRetry:
		n.RNRRetry = RNRRetryInfinite
	}
	switch {
	case n.MinRNRTimer == 0:
		n.MinRNRTimer = DefaultMinRNRTimer
	case n.MinRNRTimer > 31:
		n.MinRNRTimer = RNRTimerLongest
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&n.MaxRdAtomic, DefaultMaxRdAtomic)
	def(&n.MaxDestRd, DefaultMaxRdAtomic)
	def(&n.Window, DefaultWindow)
	def(&n.AckEvery, DefaultAckEvery)
	if n.PKey == 0 {
		n.PKey = roce.DefaultPKey
	}
	switch {
	case n.KeepAlive == 0:
		n.KeepAlive = DefaultKeepAlive
	case n.KeepAlive < 0:
		n.KeepAlive = NoTimeout
	}
	limit(&n.MaxPendingRequests, DefaultMaxPendingRequests)
	limit(&n.MaxPassiveConns, DefaultMaxPassiveConns)
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
	return n
}

// limit applies a limit's default to 0 and keeps Unlimited (any negative value).
func limit(v *int, d int) {
	switch {
	case *v == 0:
		*v = d
	case *v < 0:
		*v = Unlimited
	}
}

// under reports whether n is below the limit l (Unlimited: always).
func under(n, l int) bool { return l < 0 || n < l }

// DefaultConfig returns the defaults (rc_pingpong's QP attributes: timeout 14,
// retry_cnt 7, rnr_retry 7, min_rnr_timer 12): the zero Config with the defaults
// written out.
func DefaultConfig() *Config { c := (*Config)(nil).norm(); return &c }

// qpParams are the attributes of one connected QP in wire terms (IBTA §9.7: the
// ACK timeout exponent with 0 = infinite, 3-bit retry counts with RNR 7 =
// infinite, the RNR timer code): the endpoint's Config, or what the CM
// negotiated for the connection.
type qpParams struct {
	MTU         roce.MTU
	Timeout     uint8 // 0: no ACK timer
	RetryCnt    uint8 // 0..7
	RNRRetry    uint8 // 0..7, 7 = infinite
	MinRNRTimer roce.RNRTimer
	MaxRdAtomic int
	MaxDestRd   int
	Window      int
	AckEvery    int
	PKey        uint16
}

// params converts a normalized Config to wire terms.
func (c *Config) params() qpParams {
	p := qpParams{MTU: c.MTU, Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry,
		MinRNRTimer: c.MinRNRTimer, MaxRdAtomic: c.MaxRdAtomic, MaxDestRd: c.MaxDestRd,
		Window: c.Window, AckEvery: c.AckEvery, PKey: c.PKey}
	if p.Timeout == ACKTimeoutInfinite {
		p.Timeout = 0
	}
	if p.RetryCnt == NoRetry {
		p.RetryCnt = 0
	}
	if p.RNRRetry == NoRetry {
		p.RNRRetry = 0
	}
	if p.MinRNRTimer == RNRTimerLongest {
		p.MinRNRTimer = 0
	}
	return p
}
