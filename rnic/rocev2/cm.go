package rocev2

// Connection management: the IB CM (IBTA Vol.1 chapter 12) as RDMA-CM uses it
// over RoCEv2 — REQ/REP/RTU, REJ, MRA and DREQ/DREP MADs in UD SEND_ONLY
// packets to QP1 (Q_Key 0x80010000), with RDMA-CM's TCP port-space service
// IDs and the 36-byte cma_hdr at the start of the REQ private data. The API
// mirrors rnic/iwarp: Listen, Listener.Accept, ConnRequest.Accept/Reject, Dial.
//
// This file is the agent every connection shares: MAD reception and checks,
// retransmission, disconnection (DREQ/DREP), REJ, MRA and timewait.
// cm_passive.go and cm_active.go are the two sides of connection setup.
//
// Connection states (IBTA Vol.1 ch. 12, the CM state machine; Linux cm.c names, reduced to what RC over RDMA-CM uses):
//
//	state        side     left by
//	ReqSent      active   REP → Established (RTU sent); REJ, timeout, ctx → Timewait
//	ReqRcvd      passive  Accept → RepSent (REP sent); Reject, REJ, AcceptTimeout → Timewait
//	RepSent      passive  RTU or the first packet → Established; REJ, REP timeout → Timewait
//	Established  both     the QP ends → DreqSent; DREQ received → Timewait (DREP sent)
//	DreqSent     both     DREP, DREQ or DREQ timeout → Timewait
//	Timewait     both     after the CM response timeout: forgotten
//
// A MAD is taken only if it names one of our comm IDs, its own comm ID is the
// peer's (once known), and it comes from the peer's address; others are dropped
// and counted in Endpoint.CMDropped. MADs are retried (REQ, REP, DREQ) every
// response timeout, MaxRetries times; duplicates are answered from the last MAD
// sent (REQ → REP or MRA, REP → RTU, DREQ → DREP, REQ in Timewait → its REJ).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/softrnic/softrnic/roce"
)

// CMConfig are the settings of a listener (Listen) or of one connection attempt
// (Dial). The zero value is the default configuration; the limits and timeouts
// are tabled in the package documentation.
type CMConfig struct {
	// ResponseTimeout is the CM response timeout exponent: a REQ, REP or DREQ
	// unanswered for 4.096 µs × 2^v is resent (0: 20 ≈ 4.3 s, RDMA-CM's
	// CMA_CM_RESPONSE_TIMEOUT; at most 31).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is resent before the attempt
	// fails (0: 15, the most the REQ's 4-bit field carries; CMNoRetry: never).
	MaxRetries int
	// Backlog bounds the listener's pending requests: received, not yet
	// accepted or rejected (0: 128; Unlimited). Beyond it a REQ is answered
	// with REJ "no resources".
	Backlog int
	// MaxConns bounds the listener's accepted connections alive at once (0:
	// 1024; Unlimited). Beyond it a REQ is rejected as above.
	MaxConns int
	// AcceptTimeout is how long a request may wait for Accept or Reject
	// before it is rejected with REJ "timeout" (0: 60 s; NoTimeout). While it
	// waits, duplicate REQs are answered with MRAs.
	AcceptTimeout time.Duration
	// FirstMessageTimeout ends an accepted connection on which no packet was
	// received or sent within this time after Accept (0: 60 s; NoTimeout): a
	// peer that completes REQ/RTU and then stays silent does not hold a QP for
	// ever. The connection ends as a disconnect (DREQ sent) whose error is
	// ErrFirstMessageTimeout.
	FirstMessageTimeout time.Duration
}

// CMNoRetry in CMConfig.MaxRetries sends each REQ, REP or DREQ once.
const CMNoRetry = -1

// Defaults of CMConfig.
const (
	DefaultResponseTimeout     = 20
	DefaultMaxCMRetries        = 15
	DefaultBacklog             = 128
	DefaultMaxConns            = 1024
	DefaultAcceptTimeout       = 60 * time.Second
	DefaultFirstMessageTimeout = 60 * time.Second
)

func (c *CMConfig) norm() CMConfig {
	var n CMConfig
	if c != nil {
		n = *c
	}
	switch {
	case n.ResponseTimeout == 0:
		n.ResponseTimeout = DefaultResponseTimeout
	case n.ResponseTimeout > 31:
		n.ResponseTimeout = 31
	}
	switch {
	case n.MaxRetries == 0:
		n.MaxRetries = DefaultMaxCMRetries
	case n.MaxRetries < 0:
		n.MaxRetries = 0
	case n.MaxRetries > 15:
		n.MaxRetries = 15
	}
	limit(&n.Backlog, DefaultBacklog)
	limit(&n.MaxConns, DefaultMaxConns)
	dur := func(v *time.Duration, d time.Duration) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = NoTimeout
		}
	}
	dur(&n.AcceptTimeout, DefaultAcceptTimeout)
	dur(&n.FirstMessageTimeout, DefaultFirstMessageTimeout)
	return n
}

func (c *CMConfig) timeout() time.Duration { return roce.TimeoutExp(c.ResponseTimeout) }

// ConnParam are the per-connection parameters of Dial and ConnRequest.Accept
// (struct rdma_conn_param).
type ConnParam struct {
	PrivateData   []byte // ≤ 56 bytes in a REQ (after the cma_hdr), ≤ 196 in a REP
	IRD, ORD      int    // responder resources / initiator depth; 0 means 16, at most 255
	RetryCount    uint8  // 0 means 7; NoRetry: none
	RNRRetryCount uint8  // 0 means 7 (infinite); NoRetry: none
}

// Errors of the connection manager.
var (
	ErrCMClosed        = errors.New("rocev2: listener closed")
	ErrCMTimeout       = errors.New("rocev2: CM response timeout")
	ErrPrivateDataLong = errors.New("rocev2: private data too long")
	// ErrRejected is wrapped by every *RejectError.
	ErrRejected = errors.New("rocev2: connection rejected")
	// ErrStaleConn: the peer rejected a connection as stale (REJ reason 10,
	// IBTA Vol.1 ch. 12: it still holds a connection from this QP number; connect
	// with a new QP), or a connection ended because its peer started a new one
	// from the same QP number. errors.Is(err, ErrStaleConn) holds for a
	// *RejectError with that reason.
	ErrStaleConn = errors.New("rocev2: stale connection")
	// ErrLimit is returned by Accept when a connection limit is reached.
	ErrLimit  = errors.New("rocev2: connection limit reached")
	errCMUsed = errors.New("rocev2: connection request already answered")
)

// RejectError is returned by Dial when the peer answered with a REJ, and ends a
// passive connection whose REP the peer rejected.
type RejectError struct {
	Reason      roce.RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rocev2: connection rejected: %v (%d bytes private data)", e.Reason, len(e.PrivateData))
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }

// Is reports ErrStaleConn for a stale-connection reject.
func (e *RejectError) Is(target error) bool {
	return target == ErrStaleConn && e.Reason == roce.RejStaleConn
}

type cmKey struct {
	addr netip.Addr
	id   uint32 // the peer's comm ID, or its QPN in byQPN
}

// cmConn is the CM state of one connection (either side).
type cmConn struct {
	cfg       CMConfig
	localID   uint32
	peer      netip.AddrPort // the peer's link: where MADs and data go
	remoteQPN uint32
	tid       uint64
	// peerTimeout is the response timeout exponent the peer retries with
	// (passive: the REQ's Remote CM Response Timeout).
	peerTimeout uint8
	active      bool
	l           *Listener // passive: the listener it counts against

	// remoteID is the peer's comm ID, known from the REQ (passive) or the REP
	// (active); guarded by the agent's mu.
	remoteID uint32

	mu       sync.Mutex
	state    int
	conn     *Conn
	req      *ConnRequest // passive, while pending
	pending  bool         // counted in the pending requests
	counted  bool         // counted in the passive connections
	last     []byte       // last MAD sent (for retries and duplicates)
	timer    *time.Timer
	armed    uint32 // generation of the retry timer (arm)
	retries  int
	reply    chan cmEvent // active side: REP/REJ/timeout
	resolved bool         // established by an RTU or the first packet
	rej      []byte       // the REJ we ended it with (resent for duplicate REQs)
	endErr   error        // why the peer ended it before it was established
}

const (
	cmReqSent = iota
	cmReqRcvd
	cmRepSent
	cmEstablished
	cmDreqSent
	cmTimewait
)

type cmEvent struct {
	rep *roce.REP
	rej *roce.REJ
	err error
}

type cmAgent struct {
	e *Endpoint

	mu        sync.Mutex
	listeners map[uint16]*Listener
	byLocal   map[uint32]*cmConn // by our comm ID
	byRemote  map[cmKey]*cmConn  // by the peer's IP and comm ID
	byQPN     map[cmKey]*cmConn  // live connections by the peer's IP and QPN (stale detection)
	pending   int                // requests not yet answered, over all listeners
	conns     int                // passive connections alive, over all listeners
	tw        []*cmConn          // in Timewait, in the order they entered it
	psn       roce.PSN
	txbuf     []byte
	sidr      *sidrAgent // UD service ID resolution (sidr.go), made on first use
}

// maxTimewait bounds the connections kept in Timewait; beyond it the oldest is
// forgotten early.
const maxTimewait = 4096

// cm creates the endpoint's connection manager.
func (e *Endpoint) cm() *cmAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cma == nil {
		a := &cmAgent{e: e, listeners: make(map[uint16]*Listener), byLocal: make(map[uint32]*cmConn),
			byRemote: make(map[cmKey]*cmConn), byQPN: make(map[cmKey]*cmConn), psn: roce.PSN(rand.Uint32() & roce.PSNMask)}
		e.cma = a
		e.gsi = a.input
	}
	return e.cma
}

// send sends one CM MAD to QP1 at dst.
func (a *cmAgent) send(dst netip.AddrPort, mad []byte) {
	a.mu.Lock()
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, PSN: a.psn,
		QKey: roce.GSIQKey, SrcQP: 1}
	a.psn = a.psn.Add(1)
	b := h.Append(a.txbuf[:0], len(mad))
	b = append(b, mad...)
	b = finish(b, len(mad), a.e.gsiLink.LocalAddr(), dst)
	a.txbuf = b
	a.e.sendOn(a.e.gsiLink, [][]byte{b}, dst)
	a.mu.Unlock()
}

// newLocal registers c under a fresh random comm ID (comm IDs
// must not repeat soon; random as Linux's cm.c allocates them).
func (a *cmAgent) newLocal(c *cmConn) {
	for {
		id := rand.Uint32()
		if id != 0 && a.byLocal[id] == nil {
			c.localID = id
			a.byLocal[id] = c
			return
		}
	}
}

// arm (re)starts the retry timer of c: resend c.last every response timeout
// until MaxRetries, then call fail. c.mu is held by the caller.
func (a *cmAgent) arm(c *cmConn, fail func()) {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.retries = 0
	c.armed++
	gen := c.armed
	c.timer = time.AfterFunc(c.cfg.timeout(), func() { a.retry(c, gen, fail) })
}

// retry is the retry timer armed as generation gen: a callback that fired while
// the timer was being replaced finds a newer generation and does nothing.
func (a *cmAgent) retry(c *cmConn, gen uint32, fail func()) {
	c.mu.Lock()
	if gen != c.armed || c.state != cmReqSent && c.state != cmRepSent && c.state != cmDreqSent || c.resolved {
		c.mu.Unlock()
		return
	}
	if c.retries >= c.cfg.MaxRetries {
		c.mu.Unlock()
		fail()
		return
	}
	c.retries++
	mad := c.last
	c.timer.Reset(c.cfg.timeout())
	c.mu.Unlock()
	a.send(c.peer, mad)
}

// timewaitDur is how long a connection stays in Timewait: two of the longer of
// our response timeout and the peer's retry interval (the REQ's remote CM
// response timeout, at most 2^24 × 4.096 µs ≈ 69 s), so a retransmission sent
// just before our answer arrived still finds it.
func (c *cmConn) timewaitDur() time.Duration {
	return 2 * max(c.cfg.timeout(), roce.TimeoutExp(min(c.peerTimeout, mraServiceTimeout)))
}

// timewait moves c to Timewait (c.mu held): duplicates of its last exchange are
// still answered for timewaitDur, then it is forgotten. It releases
// what c counted against the limits.
func (a *cmAgent) timewait(c *cmConn) {
	if c.state == cmTimewait {
		return
	}
	c.state = cmTimewait
	c.conn, c.req = nil, nil // Timewait keeps only what answers duplicates
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(c.timewaitDur(), func() { a.forget(c) })
	a.mu.Lock()
	a.release(c)
	if k := (cmKey{c.peer.Addr(), c.remoteQPN}); a.byQPN[k] == c {
		delete(a.byQPN, k)
	}
	a.tw = append(a.tw, c)
	if len(a.tw) > maxTimewait {
		old := a.tw[0]
		a.tw = slices.Delete(a.tw, 0, 1)
		a.forgetLocked(old)
	}
	a.mu.Unlock()
}

// release gives back what c counts against the limits (a.mu held).
func (a *cmAgent) release(c *cmConn) {
	if c.pending {
		c.pending = false
		a.pending--
		c.l.pending--
	}
	if c.counted {
		c.counted = false
		a.conns--
		c.l.conns--
	}
}

func (a *cmAgent) forget(c *cmConn) {
	a.mu.Lock()
	a.forgetLocked(c)
	if i := slices.Index(a.tw, c); i >= 0 {
		a.tw = slices.Delete(a.tw, i, i+1) // clears the vacated slot: no stale reference
	}
	a.mu.Unlock()
}

func (a *cmAgent) forgetLocked(c *cmConn) {
	if a.byLocal[c.localID] == c {
		delete(a.byLocal, c.localID)
	}
	if k := (cmKey{c.peer.Addr(), c.remoteID}); a.byRemote[k] == c {
		delete(a.byRemote, k)
	}
	if k := (cmKey{c.peer.Addr(), c.remoteQPN}); a.byQPN[k] == c {
		delete(a.byQPN, k)
	}
	a.release(c)
}

// input handles a packet to QP1 (called by the receive goroutine; must not block).
func (a *cmAgent) input(p *roce.Packet, from netip.AddrPort) {
	if p.DETH == nil || p.DETH.QKey() != roce.GSIQKey {
		return
	}
	h, data, err := roce.ParseMAD(p.Payload)
	if err != nil || !h.IsCM() || h.Method != roce.MADMethodSend {
		return
	}
	peer := a.e.peerLinkAddr(from)
	switch h.AttrID {
	case roce.AttrREQ:
		if m, err := roce.ParseREQ(data); err == nil {
			a.onREQ(h, &m, peer)
		}
	case roce.AttrREP:
		if m, err := roce.ParseREP(data); err == nil {
			if c := a.match(m.RemoteCommID, m.LocalCommID, peer, true); c != nil {
				a.onREP(c, &m)
			}
		}
	case roce.AttrRTU:
		if m, err := roce.ParseRTU(data); err == nil {
			if c := a.match(m.RemoteCommID, m.LocalCommID, peer, false); c != nil {
				a.onRTU(c)
			}
		}
	case roce.AttrREJ:
		if m, err := roce.ParseREJ(data); err == nil {
			// A REJ of our REQ comes before we know the peer's comm ID.
			if c := a.match(m.RemoteCommID, m.LocalCommID, peer, true); c != nil {
				a.onREJ(c, &m)
			}
		}
	case roce.AttrMRA:
		if m, err := roce.ParseMRA(data); err == nil {
			if c := a.match(m.RemoteCommID, m.LocalCommID, peer, true); c != nil {
				c.mu.Lock()
				if (c.state == cmReqSent || c.state == cmRepSent) && c.timer != nil {
					// The peer needs longer (the MRA service timeout, IBTA Vol.1 ch. 12): wait its service timeout plus ours.
					c.timer.Reset(roce.TimeoutExp(m.ServiceTimeout&0x1F) + c.cfg.timeout())
				}
				c.mu.Unlock()
			}
		}
	case roce.AttrDREQ:
		if m, err := roce.ParseDREQ(data); err == nil {
			a.onDREQ(h, &m, peer)
		}
	case roce.AttrSIDRREQ, roce.AttrSIDRREP:
		a.sidrInput(h, data, peer)
	case roce.AttrDREP:
		if m, err := roce.ParseDREP(data); err == nil {
			if c := a.match(m.RemoteCommID, m.LocalCommID, peer, false); c != nil {
				c.mu.Lock()
				if c.state == cmDreqSent {
					a.timewait(c)
				}
				c.mu.Unlock()
			}
		}
	}
}

// match returns the connection a MAD names: ours is our comm ID, theirs the
// sender's, which must be the peer's once known (any while the peer's may still
// be unknown: a REP, or a REJ of our REQ, when early is set); the MAD must come
// from the peer's link. Anything else is counted and dropped.
func (a *cmAgent) match(ours, theirs uint32, from netip.AddrPort, early bool) *cmConn {
	a.mu.Lock()
	c := a.byLocal[ours]
	// the source check of the QP's packets (fromPeer): with Config.PeerPort the peer's
	// IP decides, whatever port it was dialed at ("ip:port@udpport")
	ok := c != nil && a.e.fromPeer(from, c.peer) && (c.remoteID == theirs || early && c.remoteID == 0)
	a.mu.Unlock()
	if !ok {
		a.e.CMDropped.Add(1)
		return nil
	}
	return c
}

func (a *cmAgent) sendREJ(dst netip.AddrPort, tid uint64, localID, remoteID uint32, what roce.CMMsgType, reason roce.RejectReason, pd []byte) []byte {
	m := roce.REJ{LocalCommID: localID, RemoteCommID: remoteID, MsgRejected: what, Reason: reason}
	copy(m.PrivateData[:], pd)
	mad := roce.AppendCMMAD(nil, tid, &m)
	a.send(dst, mad)
	return mad
}

func (a *cmAgent) onREJ(c *cmConn, m *roce.REJ) {
	rej := &RejectError{Reason: m.Reason, PrivateData: append([]byte(nil), m.PrivateData[:]...)}
	c.mu.Lock()
	st, conn, req := c.state, c.conn, c.req
	switch st {
	case cmReqSent, cmReqRcvd, cmRepSent, cmEstablished, cmDreqSent:
		// Established: the peer gave up on an RTU it never got (Linux
		// cm_rej_handler enters timewait too).
		c.endErr = rej
		a.timewait(c)
	default:
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	switch {
	case st == cmReqSent:
		c.reply <- cmEvent{rej: m}
	case st == cmReqRcvd:
		req.expire(rej) // the initiator gave up before the application answered
	case conn != nil && st != cmDreqSent:
		conn.abort(rej)
	}
}

func (a *cmAgent) onDREQ(h roce.MADHeader, m *roce.DREQ, peer netip.AddrPort) {
	a.mu.Lock()
	c := a.byLocal[m.RemoteCommID]
	a.mu.Unlock()
	if c == nil {
		// Not (or no longer) ours: answer, as Linux's cm_issue_drep does, so a
		// peer whose DREP was lost after we forgot the connection stops retrying.
		rep := roce.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}
		a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &rep))
		return
	}
	if a.match(m.RemoteCommID, m.LocalCommID, peer, false) == nil {
		return
	}
	c.mu.Lock()
	conn := c.conn
	if conn != nil && m.RemoteQPN&roce.QPNMask != conn.QP().Num() {
		c.mu.Unlock()
		a.e.CMDropped.Add(1)
		return
	}
	switch c.state {
	case cmRepSent, cmEstablished:
		a.timewait(c)
	case cmDreqSent, cmTimewait: // both sides disconnecting, or a duplicate (our DREP was lost)
		a.timewait(c)
		conn = nil
	default:
		c.mu.Unlock()
		a.e.CMDropped.Add(1)
		return
	}
	rep := roce.DREP{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	c.mu.Unlock()
	if conn != nil {
		conn.remoteClosed.Store(true)
		a.e.drainData() // the peer's last packets may wait on the data link
		conn.abort(ErrPeerDisconnected)
	}
	a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &rep))
}

// connDone is called when a CM-managed Conn stops: send a DREQ (with
// retries) unless the peer already disconnected.
func (a *cmAgent) connDone(c *cmConn) {
	c.mu.Lock()
	if c.state != cmEstablished && c.state != cmRepSent {
		a.timewait(c)
		c.mu.Unlock()
		return
	}
	c.state = cmDreqSent
	c.resolved = false
	m := roce.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
	c.last = roce.AppendCMMAD(nil, c.tid, &m)
	mad := c.last
	a.arm(c, func() {
		c.mu.Lock()
		a.timewait(c)
		c.mu.Unlock()
	})
	c.mu.Unlock()
	a.send(c.peer, mad)
}

// stale handles a REQ or REP from the peer at ip whose QP qpn is still
// connected here under another comm ID (IBTA Vol.1 ch. 12; Linux cm.c
// cm_insert_remote_qpn): the old connection is stale — the peer lost it — so it
// ends (ErrStaleConn, with a DREQ), and the caller rejects the new attempt
// with reason 10. It reports whether a stale connection was found.
func (a *cmAgent) stale(ip netip.Addr, qpn, remoteID uint32) bool {
	a.mu.Lock()
	old := a.byQPN[cmKey{ip, qpn}]
	a.mu.Unlock()
	if old == nil || old.remoteID == remoteID {
		return false
	}
	a.e.CMStale.Add(1)
	old.mu.Lock()
	conn, req := old.conn, old.req
	st := old.state
	old.endErr = ErrStaleConn
	if st == cmReqRcvd || st == cmReqSent {
		a.timewait(old)
	}
	old.mu.Unlock()
	switch {
	case conn != nil:
		conn.abort(ErrStaleConn) // connDone sends the DREQ
	case req != nil:
		req.expire(ErrStaleConn)
	case st == cmReqSent:
		select {
		case old.reply <- cmEvent{err: ErrStaleConn}:
		default:
		}
	}
	return true
}

// close ends the agent with the endpoint: timers stop, pending requests fail.
func (a *cmAgent) close() {
	a.mu.Lock()
	cs := make([]*cmConn, 0, len(a.byLocal))
	for _, c := range a.byLocal {
		cs = append(cs, c)
	}
	ls := make([]*Listener, 0, len(a.listeners))
	for _, l := range a.listeners {
		ls = append(ls, l)
	}
	a.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, c := range cs {
		c.mu.Lock()
		if c.timer != nil {
			c.timer.Stop()
		}
		st := c.state
		c.state = cmTimewait
		c.mu.Unlock()
		if st == cmReqSent {
			select {
			case c.reply <- cmEvent{err: ErrEndpointClosed}:
			default:
			}
		}
		a.forget(c)
	}
}

func depth(v int) int {
	if v <= 0 {
		return 16
	}
	return min(v, 255)
}

// retry maps a ConnParam retry count to the wire's 3 bits.
func retry(v uint8) uint8 {
	switch {
	case v == NoRetry:
		return 0
	case v == 0 || v > 7:
		return 7
	}
	return v
}
