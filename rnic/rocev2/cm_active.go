package rocev2

// The active side of the connection manager: Dial sends the REQ, waits for the REP or
// REJ and answers with the RTU (IBTA Vol.1 ch. 12; RDMA-CM's rdma_connect).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

func (a *cmAgent) onREP(c *cmConn, m *roce.REP) {
	if !c.active {
		a.e.CMDropped.Add(1)
		return
	}
	c.mu.Lock()
	switch c.state {
	case cmReqSent:
		c.state = cmEstablished // Dial finishes it (connect QP, RTU)
		a.mu.Lock()
		c.remoteID = m.LocalCommID
		a.byRemote[cmKey{c.peer.Addr(), c.remoteID}] = c
		a.mu.Unlock()
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		c.reply <- cmEvent{rep: m}
		return
	case cmEstablished:
		// Duplicate REP (Linux cm.c cm_rep_handler): our RTU was lost; send it again.
		last, conn := c.last, c.conn
		c.mu.Unlock()
		if conn != nil {
			a.send(c.peer, last)
		}
		return
	}
	c.mu.Unlock()
}

// Dial connects qp (Idle) to an RDMA-CM listener at addr ("ip:port", or
// "ip:port@udpport" for a peer whose RoCE link is not on UDP port 4791; see
// Addr) through ep, with cfg's timers (nil: the defaults): REQ (service ID of
// the TCP port space, cma_hdr + p.PrivateData), REP, then the QP goes to RTS
// and the RTU is sent. A REJ is a *RejectError (errors.Is(err, ErrRejected));
// no answer after the retries is ErrCMTimeout; a context that ends first gives
// its error.
func Dial(ctx context.Context, ep *Endpoint, qp *rnic.QP, addr string, cfg *CMConfig, p ConnParam) (*Conn, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return DialAddr(ctx, ep, qp, a, cfg, p)
}

// DialAddr is Dial with the peer's address parsed.
func DialAddr(ctx context.Context, ep *Endpoint, qp *rnic.QP, addr Addr, cfg *CMConfig, p ConnParam) (*Conn, error) {
	if len(p.PrivateData) > len(roce.REQ{}.PrivateData)-roce.CMAHeaderLen {
		return nil, ErrPrivateDataLong
	}
	if ep.closed.Load() {
		return nil, ErrEndpointClosed
	}
	c, err := ep.cm().dial(ctx, qp, ep.dialLinkAddr(addr), addr.Port, cfg.norm(), p)
	if err != nil {
		return nil, fmt.Errorf("rocev2: dial %v: %w", addr, err)
	}
	return c, nil
}

func (a *cmAgent) dial(ctx context.Context, qp *rnic.QP, dst netip.AddrPort, port uint16, cc CMConfig, p ConnParam) (*Conn, error) {
	e := a.e
	local := e.LocalAddr()
	c := &cmConn{cfg: cc, peer: dst, active: true, state: cmReqSent, reply: make(chan cmEvent, 1)}
	a.mu.Lock()
	a.newLocal(c)
	a.mu.Unlock()
	c.tid = uint64(rand.Uint32())<<32 | uint64(c.localID)
	psn := roce.PSN(rand.Uint32() & roce.PSNMask)
	pp := e.params
	req := roce.REQ{LocalCommID: c.localID, ServiceID: roce.ServiceID(roce.PortSpaceTCP, port),
		LocalCAGUID: e.guid(), LocalQPN: qp.Num(), ResponderResources: uint8(depth(p.IRD)),
		InitiatorDepth: uint8(depth(p.ORD)), RemoteCMResponseTimeout: cc.ResponseTimeout,
		TransportType: roce.CMTransportRC, StartingPSN: psn, LocalCMResponseTimeout: cc.ResponseTimeout,
		RetryCount: retry(p.RetryCount), PKey: roce.DefaultPKey, PathMTU: pp.MTU, RNRRetryCount: retry(p.RNRRetryCount),
		MaxCMRetries: uint8(cc.MaxRetries),
		Primary: roce.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: roce.GIDFromAddr(local.Addr()),
			RemoteGID: roce.GIDFromAddr(dst.Addr()), HopLimit: 64, LocalACKTimeout: pp.Timeout,
			FlowLabel: 0, TrafficClass: 0},
	}
	// The cma_hdr port is the active side's port; RoCE has none, so use a random one as rdma_cm does.
	cmLocal := uint16(1024 + rand.IntN(60000))
	cma := roce.NewCMAHeader(local.Addr(), dst.Addr(), cmLocal)
	pd := cma.Append(nil)
	pd = append(pd, p.PrivateData...)
	copy(req.PrivateData[:], pd)
	c.mu.Lock()
	c.last = roce.AppendCMMAD(nil, c.tid, &req)
	mad := c.last
	a.arm(c, func() {
		c.mu.Lock()
		a.timewait(c)
		c.mu.Unlock()
		select {
		case c.reply <- cmEvent{err: ErrCMTimeout}:
		default:
		}
	})
	c.mu.Unlock()
	a.send(dst, mad)
	var ev cmEvent
	select {
	case ev = <-c.reply:
	case <-ctx.Done():
		c.mu.Lock()
		if c.state == cmReqSent {
			// Abandoned (Linux cm_destroy_id in REQ_SENT): tell the peer.
			c.rej = a.sendREJ(dst, c.tid, c.localID, 0, roce.CMMsgOther, roce.RejTimeout, nil)
			a.timewait(c)
			c.mu.Unlock()
			return nil, ctx.Err()
		}
		c.mu.Unlock()
		ev = <-c.reply // the REP, REJ or timeout that won the race
	}
	switch {
	case ev.err != nil:
		return nil, ev.err
	case ev.rej != nil:
		return nil, &RejectError{Reason: ev.rej.Reason, PrivateData: append([]byte(nil), ev.rej.PrivateData[:]...)}
	}
	rep := ev.rep
	rqpn := rep.LocalQPN & roce.QPNMask
	fail := func(reason roce.RejectReason, err error) (*Conn, error) {
		c.mu.Lock()
		c.rej = a.sendREJ(dst, c.tid, c.localID, c.remoteID, roce.CMMsgREP, reason, nil)
		a.timewait(c)
		c.mu.Unlock()
		return nil, err
	}
	if a.stale(dst.Addr(), rqpn, rep.LocalCommID) {
		return fail(roce.RejStaleConn, ErrStaleConn)
	}
	c.mu.Lock()
	c.remoteQPN = rqpn
	c.mu.Unlock()
	if ctx.Err() != nil {
		return fail(roce.RejTimeout, ctx.Err())
	}
	pp.MaxRdAtomic = min(depth(p.ORD), max(int(rep.ResponderResources), 1))
	pp.MaxDestRd = depth(p.IRD)
	pp.RetryCnt = retry(p.RetryCount)
	pp.RNRRetry = rep.RNRRetryCount & 7
	// Linux's IB CM convention (cm.c: ib_send_cm_req sets rq_psn from the
	// REQ, cm_rep_handler sq_psn from the REP): we expect the PSN we put in
	// the REQ and send from the REP's.
	conn, err := e.connect(qp, ConnAttr{Type: RC, Remote: dst, RemoteQPN: rqpn, SendPSN: rep.StartingPSN,
		RecvPSN: psn, MTU: pp.MTU}, connOpts{params: &pp, onDone: func() { a.connDone(c) }, cmLocal: cmLocal, cmPeer: port})
	if err != nil {
		return fail(roce.RejNoQP, err)
	}
	conn.peerPD = append([]byte(nil), rep.PrivateData[:]...)
	rtu := roce.RTU{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	c.mu.Lock()
	if c.state != cmEstablished {
		// Ended while we connected the QP (endpoint closed).
		c.mu.Unlock()
		conn.abort(ErrEndpointClosed)
		<-conn.Done()
		return nil, ErrEndpointClosed
	}
	c.conn = conn
	c.last = roce.AppendCMMAD(nil, c.tid, &rtu)
	mad = c.last
	c.mu.Unlock()
	a.mu.Lock()
	a.byQPN[cmKey{dst.Addr(), rqpn}] = c
	a.mu.Unlock()
	a.send(dst, mad)
	return conn, nil
}

// PrivateData returns the private data of the peer's REP (active side) — all
// 196 bytes, as RDMA-CM delivers them.
func (c *Conn) PrivateData() []byte { return c.peerPD }
