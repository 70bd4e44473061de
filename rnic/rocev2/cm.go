package rocev2

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// Connection management: the IB CM (IBTA Vol.1 chapter 12) as RDMA-CM uses it
// over RoCEv2 — REQ/REP/RTU, REJ, MRA and DREQ/DREP MADs in UD SEND_ONLY
// packets to QP1 (Q_Key 0x80010000), with RDMA-CM's TCP port-space service
// IDs and the 36-byte cma_hdr at the start of the REQ private data. The API
// mirrors rnic/iwarp: Listen, Listener.Accept, ConnRequest.Accept/Reject, Dial.

// CMConfig are the CM timers of an endpoint's connection manager.
type CMConfig struct {
	// ResponseTimeout is the CM response timeout exponent (4.096 µs × 2^v;
	// default 20 ≈ 4.3 s, RDMA-CM's CMA_CM_RESPONSE_TIMEOUT).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is resent (default 15).
	MaxRetries int
	// Backlog is the number of pending requests per listener (default 128).
	Backlog int
}

func (c *CMConfig) norm() CMConfig {
	var n CMConfig
	if c != nil {
		n = *c
	}
	if n.ResponseTimeout == 0 {
		n.ResponseTimeout = 20
	}
	if n.MaxRetries <= 0 {
		n.MaxRetries = 15
	}
	if n.Backlog <= 0 {
		n.Backlog = 128
	}
	return n
}

// ConnParam are the per-connection parameters of Dial and ConnRequest.Accept
// (struct rdma_conn_param).
type ConnParam struct {
	PrivateData   []byte // ≤ 56 bytes in a REQ (after the cma_hdr), ≤ 196 in a REP
	IRD, ORD      int    // responder resources / initiator depth; 0 means 16
	RetryCount    uint8  // 0 means 7
	RNRRetryCount uint8  // 0 means 7 (infinite)
}

// Errors of the connection manager.
var (
	ErrCMClosed        = errors.New("rocev2: listener closed")
	ErrCMTimeout       = errors.New("rocev2: CM response timeout")
	ErrPrivateDataLong = errors.New("rocev2: private data too long")
	errCMUsed          = errors.New("rocev2: connection request already answered")
)

// RejectError is returned by Dial when the peer answered with a REJ.
type RejectError struct {
	Reason      roce.RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rocev2: connection rejected: %v (%d bytes private data)", e.Reason, len(e.PrivateData))
}

type cmKey struct {
	addr netip.Addr
	id   uint32 // the peer's comm ID
}

// cmConn is the CM state of one connection (either side).
type cmConn struct {
	localID, remoteID uint32
	peer              netip.AddrPort // where MADs go
	tid               uint64
	conn              *Conn
	active            bool

	mu       sync.Mutex
	state    int
	last     []byte // last MAD sent (for retries and duplicates)
	timer    *time.Timer
	retries  int
	reply    chan cmEvent // active side: REP/REJ/timeout
	dreqDone chan struct{}
}

const (
	cmReqSent = iota
	cmReqRcvd
	cmRepSent
	cmEstablished
	cmDreqSent
	cmClosed
)

type cmEvent struct {
	rep *roce.REP
	rej *roce.REJ
	err error
}

type cmAgent struct {
	e   *Endpoint
	cfg CMConfig

	mu        sync.Mutex
	listeners map[uint16]*Listener
	byLocal   map[uint32]*cmConn
	byRemote  map[cmKey]*cmConn
	psn       roce.PSN
	txbuf     []byte
}

// CM returns the endpoint's connection manager, creating it with cfg on the
// first call (later calls ignore cfg).
func (e *Endpoint) cm(cfg *CMConfig) *cmAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cma == nil {
		a := &cmAgent{e: e, cfg: cfg.norm(), listeners: make(map[uint16]*Listener), byLocal: make(map[uint32]*cmConn),
			byRemote: make(map[cmKey]*cmConn), psn: roce.PSN(rand.Uint32() & roce.PSNMask)}
		e.cma = a
		e.gsi = a.input
	} else if cfg != nil {
		e.cma.mu.Lock()
		e.cma.cfg = cfg.norm()
		e.cma.mu.Unlock()
	}
	return e.cma
}

func (a *cmAgent) config() CMConfig {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

func (a *cmAgent) timeout() time.Duration { return roce.TimeoutExp(a.config().ResponseTimeout) }

// peerPort is the UDP port MADs and data go to on a peer that sent from src.
func (a *cmAgent) peerAddr(src netip.AddrPort) netip.AddrPort {
	if a.e.cfg.PeerPort != 0 {
		return netip.AddrPortFrom(src.Addr(), a.e.cfg.PeerPort)
	}
	return src
}

// send sends one CM MAD to QP1 at dst.
func (a *cmAgent) send(dst netip.AddrPort, mad []byte) {
	a.mu.Lock()
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, PSN: a.psn,
		QKey: roce.GSIQKey, SrcQP: 1}
	a.psn = a.psn.Add(1)
	b := h.Append(a.txbuf[:0], len(mad))
	b = append(b, mad...)
	b = finish(b, len(mad), a.e.link.LocalAddr(), dst)
	a.txbuf = b
	_ = a.e.link.Send([][]byte{b}, dst)
	a.mu.Unlock()
}

func newCommID() uint32 {
	for {
		if v := rand.Uint32(); v != 0 {
			return v
		}
	}
}

// arm (re)starts the retry timer of c: resend c.last until MaxRetries, then fail.
func (a *cmAgent) arm(c *cmConn, fail func()) {
	d := a.timeout()
	c.mu.Lock() // the callback takes c.mu first, so it sees c.timer set
	defer c.mu.Unlock()
	c.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		if c.state == cmEstablished || c.state == cmClosed || (c.state != cmReqSent && c.state != cmRepSent && c.state != cmDreqSent) {
			c.mu.Unlock()
			return
		}
		if c.retries >= a.config().MaxRetries {
			c.mu.Unlock()
			fail()
			return
		}
		c.retries++
		mad := c.last
		c.timer.Reset(a.timeout())
		c.mu.Unlock()
		a.send(c.peer, mad)
	})
}

func (a *cmAgent) forget(c *cmConn) {
	a.mu.Lock()
	if a.byLocal[c.localID] == c {
		delete(a.byLocal, c.localID)
	}
	k := cmKey{c.peer.Addr(), c.remoteID}
	if a.byRemote[k] == c {
		delete(a.byRemote, k)
	}
	a.mu.Unlock()
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
	switch h.AttrID {
	case roce.AttrREQ:
		if m, err := roce.ParseREQ(data); err == nil {
			a.onREQ(h, &m, from)
		}
	case roce.AttrREP:
		if m, err := roce.ParseREP(data); err == nil {
			a.onREP(&m)
		}
	case roce.AttrRTU:
		if m, err := roce.ParseRTU(data); err == nil {
			a.onRTU(&m)
		}
	case roce.AttrREJ:
		if m, err := roce.ParseREJ(data); err == nil {
			a.onREJ(&m)
		}
	case roce.AttrMRA:
		if m, err := roce.ParseMRA(data); err == nil {
			if c := a.lookupLocal(m.RemoteCommID); c != nil {
				c.mu.Lock()
				if c.timer != nil {
					// The peer needs longer: wait its service timeout plus ours.
					c.timer.Reset(roce.TimeoutExp(m.ServiceTimeout) + a.timeout())
				}
				c.mu.Unlock()
			}
		}
	case roce.AttrDREQ:
		if m, err := roce.ParseDREQ(data); err == nil {
			a.onDREQ(h, &m, from)
		}
	case roce.AttrDREP:
		if m, err := roce.ParseDREP(data); err == nil {
			if c := a.lookupLocal(m.RemoteCommID); c != nil {
				c.mu.Lock()
				if c.state == cmDreqSent {
					c.state = cmClosed
					if c.timer != nil {
						c.timer.Stop()
					}
					close(c.dreqDone)
				}
				c.mu.Unlock()
				a.forget(c)
			}
		}
	}
}

func (a *cmAgent) lookupLocal(id uint32) *cmConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byLocal[id]
}

func (a *cmAgent) sendREJ(dst netip.AddrPort, tid uint64, localID, remoteID uint32, what roce.CMMsgType, reason roce.RejectReason, pd []byte) {
	m := roce.REJ{LocalCommID: localID, RemoteCommID: remoteID, MsgRejected: what, Reason: reason}
	copy(m.PrivateData[:], pd)
	a.send(dst, roce.AppendCMMAD(nil, tid, &m))
}

func (a *cmAgent) onREQ(h roce.MADHeader, m *roce.REQ, from netip.AddrPort) {
	peer := a.peerAddr(from)
	a.mu.Lock()
	if c := a.byRemote[cmKey{peer.Addr(), m.LocalCommID}]; c != nil {
		a.mu.Unlock()
		// Duplicate REQ: repeat the REP, or ask for patience while the
		// application decides (RDMA-CM's delayed MRA).
		c.mu.Lock()
		st, last := c.state, c.last
		c.mu.Unlock()
		switch st {
		case cmRepSent, cmEstablished:
			a.send(peer, last)
		case cmReqRcvd:
			mra := roce.MRA{LocalCommID: c.localID, RemoteCommID: c.remoteID, MsgMRAed: roce.CMMsgREQ, ServiceTimeout: 24}
			a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &mra))
		}
		return
	}
	ps, port, ok := roce.ServiceIDPort(m.ServiceID)
	l := a.listeners[port]
	a.mu.Unlock()
	if !ok || ps != roce.PortSpaceTCP || l == nil {
		a.sendREJ(peer, h.TransactionID, 0, m.LocalCommID, roce.CMMsgREQ, roce.RejInvalidServiceID, nil)
		return
	}
	cma, err := roce.ParseCMAHeader(m.PrivateData[:])
	if err != nil || cma.Version != roce.CMAVersion || m.TransportType != roce.CMTransportRC {
		a.sendREJ(peer, h.TransactionID, 0, m.LocalCommID, roce.CMMsgREQ, roce.RejConsumerDefined, nil)
		return
	}
	c := &cmConn{localID: newCommID(), remoteID: m.LocalCommID, peer: peer, tid: h.TransactionID, state: cmReqRcvd}
	r := &ConnRequest{l: l, c: c, req: *m, cma: cma, from: from}
	a.mu.Lock()
	for a.byLocal[c.localID] != nil {
		c.localID = newCommID()
	}
	a.byLocal[c.localID] = c
	a.byRemote[cmKey{peer.Addr(), c.remoteID}] = c
	a.mu.Unlock()
	select {
	case l.reqs <- r:
	default:
		a.forget(c)
		a.sendREJ(peer, h.TransactionID, c.localID, c.remoteID, roce.CMMsgREQ, roce.RejNoResources, nil)
	}
}

func (a *cmAgent) onREP(m *roce.REP) {
	c := a.lookupLocal(m.RemoteCommID)
	if c == nil || !c.active {
		return
	}
	c.mu.Lock()
	switch c.state {
	case cmReqSent:
		c.state = cmEstablished // Dial finishes it (connect QP, RTU)
		c.remoteID = m.LocalCommID
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		a.mu.Lock()
		a.byRemote[cmKey{c.peer.Addr(), c.remoteID}] = c
		a.mu.Unlock()
		c.reply <- cmEvent{rep: m}
		return
	case cmEstablished:
		// Duplicate REP: our RTU was lost.
		last := c.last
		c.mu.Unlock()
		if last != nil {
			a.send(c.peer, last)
		}
		return
	}
	c.mu.Unlock()
}

func (a *cmAgent) onRTU(m *roce.RTU) {
	c := a.lookupLocal(m.RemoteCommID)
	if c == nil || c.active {
		return
	}
	c.mu.Lock()
	if c.state == cmRepSent {
		c.state = cmEstablished
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	c.mu.Unlock()
}

func (a *cmAgent) onREJ(m *roce.REJ) {
	c := a.lookupLocal(m.RemoteCommID)
	if c == nil {
		return
	}
	c.mu.Lock()
	st := c.state
	if st == cmReqSent || st == cmRepSent {
		c.state = cmClosed
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	c.mu.Unlock()
	switch st {
	case cmReqSent:
		a.forget(c)
		c.reply <- cmEvent{rej: m}
	case cmRepSent:
		a.forget(c)
		if c.conn != nil {
			c.conn.Disconnect(false)
		}
	}
}

func (a *cmAgent) onDREQ(h roce.MADHeader, m *roce.DREQ, from netip.AddrPort) {
	peer := a.peerAddr(from)
	rep := roce.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}
	c := a.lookupLocal(m.RemoteCommID)
	if c != nil {
		rep.LocalCommID = c.localID
		c.mu.Lock()
		conn := c.conn
		wasOpen := c.state != cmClosed
		c.state = cmClosed
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		a.forget(c)
		if conn != nil && wasOpen {
			conn.remoteClosed.Store(true)
			conn.Disconnect(false)
		}
	}
	a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &rep))
}

// connDone is called when a CM-managed Conn stops: send a DREQ (with
// retries) unless the peer already disconnected.
func (a *cmAgent) connDone(c *cmConn) {
	c.mu.Lock()
	if c.state != cmEstablished && c.state != cmRepSent {
		c.mu.Unlock()
		a.forget(c)
		return
	}
	c.state = cmDreqSent
	c.dreqDone = make(chan struct{})
	m := roce.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.conn.rqpn}
	c.last = roce.AppendCMMAD(nil, c.tid, &m)
	c.retries = 0
	if c.timer != nil {
		c.timer.Stop()
	}
	mad := c.last
	c.mu.Unlock()
	a.arm(c, func() {
		c.mu.Lock()
		c.state = cmClosed
		c.mu.Unlock()
		a.forget(c)
	})
	a.send(c.peer, mad)
}

// ---- passive side ----

// Listener receives RDMA-CM connection requests for one port (service ID
// 0x0000000001060000 | port, the RDMA_PS_TCP port space).
type Listener struct {
	a    *cmAgent
	port uint16
	reqs chan *ConnRequest
	quit chan struct{}
	once sync.Once
}

// Listen listens for connection requests on ep for addr "[ip]:port" (the IP
// part is ignored: the endpoint's link decides which address is served).
func Listen(ep *Endpoint, addr string, cfg *CMConfig) (*Listener, error) {
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, err
	}
	a := ep.cm(cfg)
	l := &Listener{a: a, port: uint16(port), reqs: make(chan *ConnRequest, a.config().Backlog), quit: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if l.port == 0 {
		for p := uint16(1024 + rand.IntN(60000)); ; p++ {
			if a.listeners[p] == nil && p != 0 {
				l.port = p
				break
			}
		}
	}
	if a.listeners[l.port] != nil {
		return nil, fmt.Errorf("rocev2: port %d already has a listener", l.port)
	}
	a.listeners[l.port] = l
	return l, nil
}

// Port returns the listening port.
func (l *Listener) Port() uint16 { return l.port }

// Addr returns the endpoint's address with the listening port.
func (l *Listener) Addr() netip.AddrPort {
	return netip.AddrPortFrom(l.a.e.LocalAddr().Addr(), l.port)
}

// Close stops listening and rejects pending requests.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.quit)
		l.a.mu.Lock()
		if l.a.listeners[l.port] == l {
			delete(l.a.listeners, l.port)
		}
		l.a.mu.Unlock()
		for {
			select {
			case r := <-l.reqs:
				_ = r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.quit:
		return nil, ErrCMClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ConnRequest is a received REQ.
type ConnRequest struct {
	l    *Listener
	c    *cmConn
	req  roce.REQ
	cma  roce.CMAHeader
	from netip.AddrPort
	mu   sync.Mutex
	used bool
}

// PrivateData returns the initiator's private data after the cma_hdr.
func (r *ConnRequest) PrivateData() []byte { return r.req.PrivateData[roce.CMAHeaderLen:] }

// IRD returns the initiator's responder resources.
func (r *ConnRequest) IRD() int { return int(r.req.ResponderResources) }

// ORD returns the initiator's initiator depth.
func (r *ConnRequest) ORD() int { return int(r.req.InitiatorDepth) }

// REQ returns the parsed REQ.
func (r *ConnRequest) REQ() roce.REQ { return r.req }

// RemoteAddr returns the initiator's address and port from the cma_hdr.
func (r *ConnRequest) RemoteAddr() netip.AddrPort { return netip.AddrPortFrom(r.cma.Src, r.cma.Port) }

// LocalAddr returns the destination address and port the initiator asked for.
func (r *ConnRequest) LocalAddr() netip.AddrPort { return netip.AddrPortFrom(r.cma.Dst, r.l.port) }

func (r *ConnRequest) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used {
		return false
	}
	r.used = true
	return true
}

func depth(v int) int {
	if v <= 0 {
		return 16
	}
	return min(v, 255)
}

func retry(v uint8) uint8 {
	if v == 0 || v > 7 {
		return 7
	}
	return v
}

// Accept connects qp (Idle) to the initiator and sends the REP; the QP is in
// RTS on return (the RTU is awaited in the background, the REP resent until
// it or the first packet arrives).
func (r *ConnRequest) Accept(qp *rnic.QP, p ConnParam) (*Conn, error) {
	if !r.take() {
		return nil, errCMUsed
	}
	if len(p.PrivateData) > len(roce.REP{}.PrivateData) {
		_ = r.reject(nil)
		return nil, ErrPrivateDataLong
	}
	a, c, m := r.l.a, r.c, &r.req
	mtu := m.PathMTU
	if !mtu.Valid() || mtu > a.e.cfg.MTU {
		mtu = a.e.cfg.MTU
	}
	cfg := a.e.cfg
	cfg.MaxRdAtomic = min(depth(p.ORD), max(int(m.ResponderResources), 1))
	cfg.MaxDestRd = depth(p.IRD)
	cfg.RetryCnt = m.RetryCount & 7
	cfg.RNRRetry = m.RNRRetryCount & 7 // the REQ carries the counts the initiator wants us to use
	if m.Primary.LocalACKTimeout != 0 {
		cfg.Timeout = max(m.Primary.LocalACKTimeout, cfg.Timeout)
	}
	// Starting PSNs follow Linux's IB CM (cm.c: cm_req_handler sets sq_psn,
	// ib_send_cm_rep rq_psn): each Starting PSN is the one its sender expects
	// to receive, so we send from the REQ's and expect the REP's.
	psn := roce.PSN(rand.Uint32() & roce.PSNMask)
	conn, err := a.e.connect(qp, ConnAttr{Type: RC, Remote: c.peer, RemoteQPN: m.LocalQPN, SendPSN: m.StartingPSN,
		RecvPSN: psn, MTU: mtu}, &cfg, func() { a.connDone(c) })
	if err != nil {
		_ = r.reject(nil)
		return nil, err
	}
	rep := roce.REP{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: qp.Num(), StartingPSN: psn,
		ResponderResources: uint8(cfg.MaxDestRd), InitiatorDepth: uint8(cfg.MaxRdAtomic), TargetACKDelay: 0,
		RNRRetryCount: retry(p.RNRRetryCount), LocalCAGUID: a.e.guid()} // for the initiator's QP
	copy(rep.PrivateData[:], p.PrivateData)
	c.mu.Lock()
	c.conn = conn
	c.state = cmRepSent
	c.last = roce.AppendCMMAD(nil, c.tid, &rep)
	mad := c.last
	c.mu.Unlock()
	a.arm(c, func() {
		c.mu.Lock()
		if conn.qp.QP().Counters().RxSegments.Load() > 0 {
			// No RTU, but the initiator's traffic arrived: the connection
			// is established (IBTA §12.9.6, communication established).
			c.state = cmEstablished
			c.mu.Unlock()
			return
		}
		c.state = cmClosed
		c.mu.Unlock()
		a.forget(c)
		conn.Disconnect(false)
	})
	a.send(c.peer, mad)
	return conn, nil
}

// Reject answers the request with a REJ (reason 28, consumer defined) carrying pd.
func (r *ConnRequest) Reject(pd []byte) error {
	if !r.take() {
		return errCMUsed
	}
	return r.reject(pd)
}

func (r *ConnRequest) reject(pd []byte) error {
	if len(pd) > len(roce.REJ{}.PrivateData) {
		return ErrPrivateDataLong
	}
	c := r.c
	c.mu.Lock()
	c.state = cmClosed
	c.mu.Unlock()
	r.l.a.forget(c)
	r.l.a.sendREJ(c.peer, c.tid, c.localID, c.remoteID, roce.CMMsgREQ, roce.RejConsumerDefined, pd)
	return nil
}

// ---- active side ----

// Dial connects qp (Idle) to an RDMA-CM listener at addr "ip:port" through
// ep: REQ (service ID of the TCP port space, cma_hdr + p.PrivateData),
// REP, then the QP goes to RTS and the RTU is sent. A REJ is a *RejectError.
func Dial(ctx context.Context, ep *Endpoint, qp *rnic.QP, addr string, cfg *CMConfig, p ConnParam) (*Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > len(roce.REQ{}.PrivateData)-roce.CMAHeaderLen {
		return nil, ErrPrivateDataLong
	}
	a := ep.cm(cfg)
	dst := netip.AddrPortFrom(ap.Addr().Unmap(), ep.cfg.PeerPort)
	if ep.cfg.PeerPort == 0 {
		dst = netip.AddrPortFrom(ap.Addr().Unmap(), ep.LocalAddr().Port())
	}
	return a.dial(ctx, qp, dst, ap.Port(), p)
}

// DialAddr is Dial with an explicit RoCE address of the peer (its UDP
// endpoint) besides the RDMA-CM port: for peers whose link is not on the
// endpoint's own UDP port (tests, several endpoints on one host).
func DialAddr(ctx context.Context, ep *Endpoint, qp *rnic.QP, peer netip.AddrPort, port uint16, cfg *CMConfig, p ConnParam) (*Conn, error) {
	return ep.cm(cfg).dial(ctx, qp, peer, port, p)
}

func (a *cmAgent) dial(ctx context.Context, qp *rnic.QP, dst netip.AddrPort, port uint16, p ConnParam) (*Conn, error) {
	e := a.e
	local := e.LocalAddr()
	c := &cmConn{localID: newCommID(), peer: dst, active: true, state: cmReqSent, reply: make(chan cmEvent, 1)}
	c.tid = uint64(rand.Uint32())<<32 | uint64(c.localID)
	psn := roce.PSN(rand.Uint32() & roce.PSNMask)
	cfg := e.cfg
	cc := a.config()
	req := roce.REQ{LocalCommID: c.localID, ServiceID: roce.ServiceID(roce.PortSpaceTCP, port),
		LocalCAGUID: e.guid(), LocalQPN: qp.Num(), ResponderResources: uint8(depth(p.IRD)),
		InitiatorDepth: uint8(depth(p.ORD)), RemoteCMResponseTimeout: cc.ResponseTimeout,
		TransportType: roce.CMTransportRC, StartingPSN: psn, LocalCMResponseTimeout: cc.ResponseTimeout,
		RetryCount: retry(p.RetryCount), PKey: roce.DefaultPKey, PathMTU: cfg.MTU, RNRRetryCount: retry(p.RNRRetryCount),
		MaxCMRetries: uint8(min(cc.MaxRetries, 15)),
		Primary: roce.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: roce.GIDFromAddr(local.Addr()),
			RemoteGID: roce.GIDFromAddr(dst.Addr()), HopLimit: 64, LocalACKTimeout: cfg.Timeout,
			FlowLabel: 0, TrafficClass: 0},
	}
	// The cma_hdr port is the active side's port; RoCE has none, so use a random one as rdma_cm does.
	cma := roce.NewCMAHeader(local.Addr(), dst.Addr(), uint16(1024+rand.IntN(60000)))
	pd := cma.Append(nil)
	pd = append(pd, p.PrivateData...)
	copy(req.PrivateData[:], pd)
	c.last = roce.AppendCMMAD(nil, c.tid, &req)
	a.mu.Lock()
	a.byLocal[c.localID] = c
	a.mu.Unlock()
	a.arm(c, func() {
		c.mu.Lock()
		c.state = cmClosed
		c.mu.Unlock()
		a.forget(c)
		select {
		case c.reply <- cmEvent{err: ErrCMTimeout}:
		default:
		}
	})
	a.send(dst, c.last)
	var ev cmEvent
	select {
	case ev = <-c.reply:
	case <-ctx.Done():
		c.mu.Lock()
		c.state = cmClosed
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		a.forget(c)
		return nil, ctx.Err()
	}
	switch {
	case ev.err != nil:
		return nil, ev.err
	case ev.rej != nil:
		return nil, &RejectError{Reason: ev.rej.Reason, PrivateData: append([]byte(nil), ev.rej.PrivateData[:]...)}
	}
	rep := ev.rep
	cfg.MaxRdAtomic = min(depth(p.ORD), max(int(rep.ResponderResources), 1))
	cfg.MaxDestRd = depth(p.IRD)
	cfg.RetryCnt = retry(p.RetryCount)
	cfg.RNRRetry = rep.RNRRetryCount & 7
	// Linux's IB CM convention (cm.c: ib_send_cm_req sets rq_psn from the
	// REQ, cm_rep_handler sq_psn from the REP): we expect the PSN we put in
	// the REQ and send from the REP's.
	conn, err := e.connect(qp, ConnAttr{Type: RC, Remote: dst, RemoteQPN: rep.LocalQPN, SendPSN: rep.StartingPSN,
		RecvPSN: psn, MTU: cfg.MTU}, &cfg, func() { a.connDone(c) })
	if err != nil {
		a.forget(c)
		a.sendREJ(dst, c.tid, c.localID, c.remoteID, roce.CMMsgREP, roce.RejNoQP, nil)
		return nil, err
	}
	conn.peerPD = append([]byte(nil), rep.PrivateData[:]...)
	rtu := roce.RTU{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	c.mu.Lock()
	c.conn = conn
	c.last = roce.AppendCMMAD(nil, c.tid, &rtu)
	mad := c.last
	c.mu.Unlock()
	a.send(dst, mad)
	return conn, nil
}

// PrivateData returns the private data of the peer's REP (active side) — all
// 196 bytes, as RDMA-CM delivers them.
func (c *Conn) PrivateData() []byte { return c.peerPD }
