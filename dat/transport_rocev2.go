package dat

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// The RoCEv2 transport: the IA's engine device on a RoCEv2 endpoint over a
// UDP socket (instance data "rocev2 <ip>[:<udp port>]", port 4791 by
// default); connections through the IB CM as RDMA-CM uses it, the
// connection qualifier being the RDMA_PS_TCP port of the service ID.
// A peer IA is reached at its IP on the same UDP port as ours.

func init() {
	transportFactories["rocev2"] = func(ia *IA) (transport, error) {
		ap := netip.AddrPortFrom(netip.MustParseAddr(ia.local.String()).Unmap(), uint16(ia.udpPort))
		if ap.Port() == 0 {
			ap = netip.AddrPortFrom(ap.Addr(), roce.UDPPort)
		}
		link, err := rocev2.ListenUDP(ap, nil)
		if err != nil {
			return nil, err
		}
		return &roceTransport{ia: ia, ep: rocev2.NewEndpoint(ia.dev, link, nil)}, nil
	}
}

type roceTransport struct {
	ia *IA
	ep *rocev2.Endpoint
}

func (t *roceTransport) maxPrivateData(op pdOp) int {
	switch op {
	case pdConnect:
		return len(roce.REQ{}.PrivateData) - roce.CMAHeaderLen
	case pdAccept:
		return len(roce.REP{}.PrivateData)
	}
	return len(roce.REJ{}.PrivateData)
}

func (t *roceTransport) listen(addr string) (tlistener, error) {
	l, err := rocev2.Listen(t.ep, addr, nil)
	if err != nil {
		return nil, err
	}
	return roceListener{l}, nil
}

func (t *roceTransport) dial(ctx context.Context, qp *rnic.QP, addr string, p connParams) (tconn, []byte, error) {
	c, err := rocev2.Dial(ctx, t.ep, qp, addr, nil, rocev2.ConnParam{PrivateData: p.privateData, IRD: p.ird, ORD: p.ord})
	if err != nil {
		return nil, nil, err
	}
	ra, _ := net.ResolveTCPAddr("tcp", addr)
	la := net.TCPAddrFromAddrPort(t.ep.LocalAddr())
	return roceConn{c, la, ra}, append([]byte(nil), c.PrivateData()...), nil
}

func (t *roceTransport) classify(err error) (EventNumber, []byte) {
	var rej *rocev2.RejectError
	switch {
	case errors.As(err, &rej):
		if rej.Reason == roce.RejConsumerDefined {
			return ConnectionEventPeerRejected, rej.PrivateData
		}
		return ConnectionEventNonPeerRejected, nil // no listener, stale, …
	case errors.Is(err, rocev2.ErrCMTimeout), errors.Is(err, context.DeadlineExceeded):
		return ConnectionEventTimedOut, nil
	}
	return ConnectionEventNonPeerRejected, nil
}

// peerClosed: the IB CM reports a peer's disconnect (DREQ) as
// EventDisconnected already; fatal QP errors are broken connections.
func (t *roceTransport) peerClosed(error) bool { return false }

func (t *roceTransport) close() { _ = t.ep.Close() }

type roceListener struct{ l *rocev2.Listener }

func (l roceListener) accept(ctx context.Context) (treq, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return roceReq{r}, nil
}

func (l roceListener) addr() *net.TCPAddr { return net.TCPAddrFromAddrPort(l.l.Addr()) }
func (l roceListener) close()             { _ = l.l.Close() }

type roceReq struct{ r *rocev2.ConnRequest }

func (r roceReq) privateData() []byte    { return r.r.PrivateData() }
func (r roceReq) remoteAddr() net.Addr   { return net.TCPAddrFromAddrPort(r.r.RemoteAddr()) }
func (r roceReq) localAddr() net.Addr    { return net.TCPAddrFromAddrPort(r.r.LocalAddr()) }
func (r roceReq) reject(pd []byte) error { return r.r.Reject(pd) }
func (r roceReq) accept(qp *rnic.QP, p connParams) (tconn, error) {
	c, err := r.r.Accept(qp, rocev2.ConnParam{PrivateData: p.privateData, IRD: p.ird, ORD: p.ord})
	if err != nil {
		return nil, err
	}
	return roceConn{c, r.localAddr(), r.remoteAddr()}, nil
}

type roceConn struct {
	c      *rocev2.Conn
	la, ra net.Addr
}

func (c roceConn) disconnect(graceful bool) { c.c.Disconnect(graceful) }
func (c roceConn) localAddr() net.Addr      { return c.la }
func (c roceConn) remoteAddr() net.Addr     { return c.ra }
