package rocev2

// The passive side of the connection manager: listeners, received REQs, Accept (REP)
// and Reject (REJ), the RTU (IBTA Vol.1 §12.6, §12.9; RDMA-CM's rdma_listen/rdma_accept).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

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
