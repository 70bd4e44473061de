package rocev2

// The active side of the connection manager: Dial sends the REQ, waits for the REP or
// REJ and answers with the RTU (IBTA Vol.1 §12.6, §12.9; RDMA-CM's rdma_connect).

import (
	"context"
	"math/rand/v2"
	"net/netip"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

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
