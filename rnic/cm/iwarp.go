package cm

import (
	"context"
	"net"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// iWARP: the service port is the TCP port; connection requests are MPA Request frames.

func listenIWARP(t *Transport, addr string) (listenerImpl, error) {
	l, err := iwarp.Listen(t.dev, addr, t.iw)
	if err != nil {
		return nil, err
	}
	return iwListener{l}, nil
}

func dialIWARP(ctx context.Context, t *Transport, qp *rnic.QP, addr string, p Param) (connImpl, error) {
	c, err := iwarp.Dial(ctx, qp, addr, t.iw, iwarp.ConnParam{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD})
	if err != nil {
		return nil, err
	}
	return iwConn{c}, nil
}

type iwListener struct{ l *iwarp.Listener }

func (l iwListener) accept(ctx context.Context) (requestImpl, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return iwRequest{r}, nil
}
func (l iwListener) addr() net.Addr { return l.l.Addr() }
func (l iwListener) port() int {
	if a, ok := l.l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
func (l iwListener) close() error { return l.l.Close() }

type iwRequest struct{ r *iwarp.ConnRequest }

func (r iwRequest) privateData() []byte  { return r.r.PrivateData() }
func (r iwRequest) ird() int             { return r.r.IRD() }
func (r iwRequest) ord() int             { return r.r.ORD() }
func (r iwRequest) localAddr() net.Addr  { return r.r.LocalAddr() }
func (r iwRequest) remoteAddr() net.Addr { return r.r.RemoteAddr() }
func (r iwRequest) reject(pd []byte) error {
	return r.r.Reject(pd)
}
func (r iwRequest) accept(qp *rnic.QP, p Param) (connImpl, error) {
	c, err := r.r.Accept(qp, iwarp.ConnParam{PrivateData: p.PrivateData, IRD: p.IRD, ORD: p.ORD})
	if err != nil {
		return nil, err
	}
	return iwConn{c}, nil
}

type iwConn struct{ c *iwarp.Conn }

func (c iwConn) peerPrivateData() []byte { return c.c.PeerPrivateData() }
func (c iwConn) ird() int                { return c.c.IRD() }
func (c iwConn) ord() int                { return c.c.ORD() }
func (c iwConn) localAddr() net.Addr     { return c.c.LocalAddr() }
func (c iwConn) remoteAddr() net.Addr    { return c.c.RemoteAddr() }
func (c iwConn) done() <-chan struct{}   { return c.c.Done() }
func (c iwConn) abort()                  { c.c.Disconnect(false) }
