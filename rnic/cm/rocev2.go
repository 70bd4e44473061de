package cm

import (
	"context"
	"net"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// RoCEv2: the service port is the RDMA-CM port of the RDMA_PS_TCP service ID; connection
// requests are IB CM REQs to QP1 carrying RDMA-CM's cma_hdr.

// Private-data capacities of the IB CM messages as RDMA-CM uses them (IBTA Vol.1 §12.6).
var (
	maxREQPrivateData = len(roce.REQ{}.PrivateData) - roce.CMAHeaderLen
	maxREPPrivateData = len(roce.REP{}.PrivateData)
	maxREJPrivateData = len(roce.REJ{}.PrivateData)
)

func listenRoCE(t *Transport, addr string) (listenerImpl, error) {
	l, err := rocev2.Listen(t.ep, addr, t.cc)
	if err != nil {
		return nil, err
	}
	return rcListener{l}, nil
}

func dialRoCE(ctx context.Context, t *Transport, qp *rnic.QP, addr string, p Param) (connImpl, error) {
	c, err := rocev2.Dial(ctx, t.ep, qp, addr, t.cc, rocev2.ConnParam{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD})
	if err != nil {
		return nil, err
	}
	return rcConn{c}, nil
}

type rcListener struct{ l *rocev2.Listener }

func (l rcListener) accept(ctx context.Context) (requestImpl, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return rcRequest{r}, nil
}
func (l rcListener) addr() net.Addr { return l.l.Addr() }
func (l rcListener) port() int      { return int(l.l.Port()) }
func (l rcListener) close() error   { return l.l.Close() }

type rcRequest struct{ r *rocev2.ConnRequest }

func (r rcRequest) privateData() []byte    { return r.r.PrivateData() }
func (r rcRequest) ird() int               { return r.r.IRD() }
func (r rcRequest) ord() int               { return r.r.ORD() }
func (r rcRequest) localAddr() net.Addr    { return r.r.LocalAddr() }
func (r rcRequest) remoteAddr() net.Addr   { return r.r.RemoteAddr() }
func (r rcRequest) reject(pd []byte) error { return r.r.Reject(pd) }
func (r rcRequest) accept(qp *rnic.QP, p Param) (connImpl, error) {
	c, err := r.r.Accept(qp, rocev2.ConnParam{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD})
	if err != nil {
		return nil, err
	}
	return rcPassive{rcConn{c}, r.r.PrivateData()}, nil
}

// rcConn is a RoCEv2 connection; on the dialing side the peer's private data is the REP's.
type rcConn struct{ c *rocev2.Conn }

func (c rcConn) peerPrivateData() []byte { return c.c.PrivateData() }
func (c rcConn) ird() int                { return c.c.IRD() }
func (c rcConn) ord() int                { return c.c.ORD() }
func (c rcConn) localAddr() net.Addr     { return c.c.LocalAddr() }
func (c rcConn) remoteAddr() net.Addr    { return c.c.RemoteAddr() }
func (c rcConn) done() <-chan struct{}   { return c.c.Done() }
func (c rcConn) abort()                  { c.c.Disconnect(false) }

// rcPassive is an accepted connection: the peer's private data is the REQ's.
type rcPassive struct {
	rcConn
	pd []byte
}

func (c rcPassive) peerPrivateData() []byte { return c.pd }
