package rocev2

// The passive side of the connection manager: listeners, received REQs, Accept (REP)
// and Reject (REJ), the RTU (IBTA Vol.1 ch. 12; RDMA-CM's rdma_listen/rdma_accept).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// mraServiceTimeout is the service timeout our MRAs announce while the
// application decides on a request (2^24 × 4.096 µs ≈ 69 s, RDMA-CM's
// CMA_CM_MRA_SETTING), covering the default AcceptTimeout.
const mraServiceTimeout = 24

func (a *cmAgent) onREQ(h roce.MADHeader, m *roce.REQ, peer netip.AddrPort) {
	a.mu.Lock()
	if c := a.byRemote[cmKey{peer.Addr(), m.LocalCommID}]; c != nil {
		a.mu.Unlock()
		a.duplicateREQ(h, c, peer)
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
	qpn := m.LocalQPN & roce.QPNMask
	if a.stale(peer.Addr(), qpn, m.LocalCommID) {
		a.sendREJ(peer, h.TransactionID, 0, m.LocalCommID, roce.CMMsgREQ, roce.RejStaleConn, nil)
		return
	}
	a.mu.Lock()
	if l.closed || !under(a.pending, a.e.cfg.MaxPendingRequests) || !under(l.pending, l.cfg.Backlog) ||
		!under(a.conns, a.e.cfg.MaxPassiveConns) || !under(l.conns, l.cfg.MaxConns) {
		a.mu.Unlock()
		a.e.CMRejectedLimit.Add(1)
		a.sendREJ(peer, h.TransactionID, 0, m.LocalCommID, roce.CMMsgREQ, roce.RejNoResources, nil)
		return
	}
	c := &cmConn{cfg: l.cfg, remoteID: m.LocalCommID, peer: peer, remoteQPN: qpn, tid: h.TransactionID,
		peerTimeout: m.RemoteCMResponseTimeout & 0x1F, state: cmReqRcvd, l: l, pending: true}
	a.newLocal(c)
	a.byRemote[cmKey{peer.Addr(), c.remoteID}] = c
	a.byQPN[cmKey{peer.Addr(), qpn}] = c
	a.pending++
	l.pending++
	r := &ConnRequest{l: l, c: c, req: *m, cma: cma, peer: peer}
	c.req = r
	c.mu.Lock()
	if d := l.cfg.AcceptTimeout; d > 0 {
		c.timer = time.AfterFunc(d, func() { a.acceptTimeout(c, r) })
	}
	c.mu.Unlock()
	l.q = append(l.q, r)
	a.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// duplicateREQ answers a REQ we already have (Linux cm.c cm_req_handler, cm_dup_req_handler): the REP again once
// sent, an MRA while the application decides, our REJ again in Timewait.
func (a *cmAgent) duplicateREQ(h roce.MADHeader, c *cmConn, peer netip.AddrPort) {
	if c.peer != peer {
		a.e.CMDropped.Add(1)
		return
	}
	c.mu.Lock()
	st, last, rej := c.state, c.last, c.rej
	mra := roce.MRA{LocalCommID: c.localID, RemoteCommID: c.remoteID, MsgMRAed: roce.CMMsgREQ, ServiceTimeout: mraServiceTimeout}
	c.mu.Unlock()
	switch st {
	case cmRepSent, cmEstablished:
		a.send(peer, last)
	case cmReqRcvd:
		a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &mra))
	case cmTimewait:
		if rej != nil {
			a.send(peer, rej)
		}
	}
}

// acceptTimeout rejects a request the application left unanswered (CMConfig.AcceptTimeout).
func (a *cmAgent) acceptTimeout(c *cmConn, r *ConnRequest) {
	if !r.expire(ErrCMTimeout) {
		return
	}
	a.e.AcceptTimeouts.Add(1)
	c.mu.Lock()
	if c.state == cmReqRcvd {
		c.rej = a.sendREJ(c.peer, c.tid, c.localID, c.remoteID, roce.CMMsgREQ, roce.RejTimeout, nil)
		a.timewait(c)
	}
	c.mu.Unlock()
}

// onRTU completes a passive connection (IBTA Vol.1 ch. 12).
func (a *cmAgent) onRTU(c *cmConn) {
	if c.active {
		a.e.CMDropped.Add(1)
		return
	}
	a.established(c)
}

// established: the RTU, or the first packet on the QP (IBTA Vol.1 ch. 12, communication established; Linux ib_cm_notify: a
// connection whose RTU was lost is established by traffic), ends the REP's retries.
func (a *cmAgent) established(c *cmConn) {
	c.mu.Lock()
	if c.state == cmRepSent {
		c.state = cmEstablished
		c.resolved = true
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	c.mu.Unlock()
}

// Listener receives RDMA-CM connection requests for one port (service ID
// 0x0000000001060000 | port, the RDMA_PS_TCP port space).
type Listener struct {
	a     *cmAgent
	port  uint16
	cfg   CMConfig
	ready chan struct{} // a request was queued
	quit  chan struct{}
	once  sync.Once

	// guarded by a.mu
	q       []*ConnRequest // received, not yet taken by Accept
	pending int            // requests not yet answered (queued or taken)
	conns   int            // accepted connections alive
	closed  bool
}

// Listen listens for connection requests on ep at addr "[ip]:port" with cfg
// (nil: the defaults). The IP part is ignored: the endpoint's link decides which
// address is served; an "@udpport" suffix must name the link's port. Port 0
// picks a free one. A port that already has a listener is refused with an error
// wrapping syscall.EADDRINUSE.
func Listen(ep *Endpoint, addr string, cfg *CMConfig) (*Listener, error) {
	hp, up, hasUDP := strings.Cut(addr, "@")
	_, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadAddr, addr, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadAddr, addr, err)
	}
	if hasUDP && up != strconv.Itoa(int(ep.LocalAddr().Port())) {
		return nil, fmt.Errorf("%w %q: the endpoint's UDP port is %d", ErrBadAddr, addr, ep.LocalAddr().Port())
	}
	a := ep.cm()
	l := &Listener{a: a, port: uint16(port), cfg: cfg.norm(), ready: make(chan struct{}, 1), quit: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ep.closed.Load() {
		return nil, ErrEndpointClosed
	}
	free := func(p uint16) bool { return a.listeners[p] == nil }
	if l.port, err = ep.claimPort(roce.PortSpaceTCP, l.port, free); err != nil {
		return nil, fmt.Errorf("rocev2: listen on port %d: %w", port, err)
	}
	a.listeners[l.port] = l
	return l, nil
}

// Port returns the listening port.
func (l *Listener) Port() uint16 { return l.port }

// Addr returns the listener's address: the endpoint's IP and UDP port with the
// listening port.
func (l *Listener) Addr() Addr {
	la := l.a.e.LocalAddr()
	return Addr{IP: la.Addr(), Port: l.port, UDPPort: la.Port()}
}

// Close stops listening and rejects the requests Accept has not returned yet.
// Requests already returned stay answerable (until their AcceptTimeout).
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.quit)
		a := l.a
		a.mu.Lock()
		if a.listeners[l.port] == l {
			delete(a.listeners, l.port)
			a.e.releasePort(roce.PortSpaceTCP, l.port)
		}
		l.closed = true
		q := l.q
		l.q = nil
		a.mu.Unlock()
		for _, r := range q {
			_ = r.Reject(nil)
		}
	})
	return nil
}

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	for {
		l.a.mu.Lock()
		for len(l.q) > 0 {
			r := l.q[0]
			l.q[0] = nil
			l.q = l.q[1:]
			if !r.answered() {
				l.a.mu.Unlock()
				return r, nil
			}
		}
		l.a.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.quit:
			return nil, ErrCMClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ConnRequest is a received REQ.
type ConnRequest struct {
	l    *Listener
	c    *cmConn
	req  roce.REQ
	cma  roce.CMAHeader
	peer netip.AddrPort

	mu   sync.Mutex
	used bool
	err  error // why it can no longer be answered, if it expired
}

// PrivateData returns the initiator's private data after the cma_hdr.
func (r *ConnRequest) PrivateData() []byte { return r.req.PrivateData[roce.CMAHeaderLen:] }

// IRD returns the initiator's responder resources.
func (r *ConnRequest) IRD() int { return int(r.req.ResponderResources) }

// ORD returns the initiator's initiator depth.
func (r *ConnRequest) ORD() int { return int(r.req.InitiatorDepth) }

// REQ returns the parsed REQ.
func (r *ConnRequest) REQ() roce.REQ { return r.req }

// RemoteAddr returns the initiator's address: the IP and UDP port its RoCE link
// answers on (see Config.PeerPort) and its RDMA-CM port from the cma_hdr.
func (r *ConnRequest) RemoteAddr() Addr {
	return Addr{IP: r.peer.Addr(), Port: r.cma.Port, UDPPort: r.peer.Port()}
}

// LocalAddr returns the endpoint's address with the listening port.
func (r *ConnRequest) LocalAddr() Addr { return r.l.Addr() }

func (r *ConnRequest) take() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used {
		if r.err != nil {
			return fmt.Errorf("rocev2: connection request no longer answerable: %w", r.err)
		}
		return errCMUsed
	}
	r.used = true
	return nil
}

func (r *ConnRequest) answered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// expire makes an unanswered request unanswerable because of err; it reports
// whether it was unanswered.
func (r *ConnRequest) expire(err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used {
		return false
	}
	r.used, r.err = true, err
	return true
}

// Accept connects qp (Idle) to the initiator and sends the REP; the QP is in
// RTS on return (the RTU is awaited in the background, the REP resent until
// it or the first packet arrives). The connection ends if no packet is
// received or sent within CMConfig.FirstMessageTimeout.
func (r *ConnRequest) Accept(qp *rnic.QP, p ConnParam) (*Conn, error) {
	if err := r.take(); err != nil {
		return nil, err
	}
	if len(p.PrivateData) > len(roce.REP{}.PrivateData) {
		_ = r.reject(nil, roce.RejConsumerDefined)
		return nil, ErrPrivateDataLong
	}
	a, c, m, l := r.l.a, r.c, &r.req, r.l
	a.mu.Lock()
	if c.pending {
		c.pending = false
		a.pending--
		l.pending--
	}
	if !under(a.conns, a.e.cfg.MaxPassiveConns) || !under(l.conns, l.cfg.MaxConns) {
		a.mu.Unlock()
		a.e.CMRejectedLimit.Add(1)
		_ = r.reject(nil, roce.RejNoResources)
		return nil, ErrLimit
	}
	c.counted = true
	a.conns++
	l.conns++
	a.mu.Unlock()
	pp := a.e.params
	if m.PathMTU.Valid() && m.PathMTU < pp.MTU {
		pp.MTU = m.PathMTU
	}
	pp.MaxRdAtomic = min(depth(p.ORD), max(int(m.ResponderResources), 1))
	pp.MaxDestRd = depth(p.IRD)
	// The REQ carries the retry counts the initiator wants us to use.
	pp.RetryCnt = m.RetryCount & 7
	pp.RNRRetry = m.RNRRetryCount & 7
	if t := m.Primary.LocalACKTimeout & 0x1F; t != 0 && pp.Timeout != 0 {
		pp.Timeout = max(t, pp.Timeout)
	}
	// Starting PSNs follow Linux's IB CM (cm.c: cm_req_handler sets sq_psn,
	// ib_send_cm_rep rq_psn): each Starting PSN is the one its sender expects
	// to receive, so we send from the REQ's and expect the REP's.
	psn := roce.PSN(rand.Uint32() & roce.PSNMask)
	o := connOpts{params: &pp, onDone: func() { a.connDone(c) }, onFirst: func() { a.established(c) },
		cmLocal: l.port, cmPeer: r.cma.Port}
	if l.cfg.FirstMessageTimeout > 0 {
		o.firstMsg = l.cfg.FirstMessageTimeout
	}
	conn, err := a.e.connect(qp, ConnAttr{Type: RC, Remote: c.peer, RemoteQPN: m.LocalQPN, SendPSN: m.StartingPSN,
		RecvPSN: psn, MTU: pp.MTU}, o)
	if err != nil {
		_ = r.reject(nil, roce.RejNoQP)
		return nil, err
	}
	rep := roce.REP{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: qp.Num(), StartingPSN: psn,
		ResponderResources: uint8(pp.MaxDestRd), InitiatorDepth: uint8(pp.MaxRdAtomic), TargetACKDelay: 0,
		RNRRetryCount: retry(p.RNRRetryCount), LocalCAGUID: a.e.guid()} // for the initiator's QP
	copy(rep.PrivateData[:], p.PrivateData)
	c.mu.Lock()
	if c.state != cmReqRcvd {
		// The initiator gave up (REJ) or restarted (stale) while we decided.
		err := c.endErr
		if err == nil {
			err = ErrEndpointClosed
		}
		c.mu.Unlock()
		conn.abort(err)
		<-conn.Done()
		return nil, fmt.Errorf("rocev2: accept: %w", err)
	}
	c.conn = conn
	c.req = nil
	c.state = cmRepSent
	c.last = roce.AppendCMMAD(nil, c.tid, &rep)
	mad := c.last
	a.arm(c, func() {
		// Neither the RTU nor any packet came: reject the connection
		// (REJ "timeout": an initiator whose RTUs were all lost learns it failed) and end ours.
		c.mu.Lock()
		c.rej = a.sendREJ(c.peer, c.tid, c.localID, c.remoteID, roce.CMMsgREP, roce.RejTimeout, nil)
		a.timewait(c)
		c.mu.Unlock()
		conn.abort(ErrCMTimeout)
	})
	c.mu.Unlock()
	a.send(c.peer, mad)
	return conn, nil
}

// Reject answers the request with a REJ (reason 28, consumer defined) carrying pd.
func (r *ConnRequest) Reject(pd []byte) error {
	if err := r.take(); err != nil {
		return err
	}
	return r.reject(pd, roce.RejConsumerDefined)
}

func (r *ConnRequest) reject(pd []byte, reason roce.RejectReason) error {
	var err error
	if len(pd) > len(roce.REJ{}.PrivateData) {
		pd, err = nil, ErrPrivateDataLong // rejected all the same
	}
	a, c := r.l.a, r.c
	c.mu.Lock()
	if c.state == cmReqRcvd {
		c.rej = a.sendREJ(c.peer, c.tid, c.localID, c.remoteID, roce.CMMsgREQ, reason, pd)
		a.timewait(c)
	}
	c.mu.Unlock()
	return err
}
