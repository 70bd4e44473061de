package cm

import (
	"context"
	"net"

	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// iWARP: the service port is the TCP port; connection requests are MPA Request frames.

func listenIWARP(t *Transport, addr string) (listenerImpl, error) {
	if t.tcp == nil && t.capture == nil {
		l, err := iwarp.Listen(t.dev, addr, t.iw)
		if err != nil {
			return nil, err
		}
		return iwListener{l}, nil
	}
	var ln net.Listener
	var err error
	if t.tcp != nil {
		ln, err = t.tcp.Listen("tcp", addr)
	} else {
		lc := net.ListenConfig{KeepAlive: -1} // as iwarp.Listen: keepalive is set per connection
		ln, err = lc.Listen(context.Background(), "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if t.capture != nil {
		ln = capture.WrapListener(ln, t.capture)
	}
	return iwListener{iwarp.Serve(t.dev, ln, t.iw)}, nil
}

// dialTCP is the iwarp.Config.Dial of a transport with a TCP stack or a capture: the
// stack's connection, or the kernel's from the device's address as iwarp dials, wrapped
// for the capture.
func (t *Transport) dialTCP(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	var err error
	if t.tcp != nil {
		c, err = t.tcp.DialContext(ctx, network, address)
	} else {
		d := net.Dialer{KeepAlive: -1} // iwarp sets keepalive per connection
		if ip := t.dev.Config().LocalIP(); ip != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
		}
		c, err = d.DialContext(ctx, network, address)
	}
	if err != nil {
		return nil, err
	}
	if t.capture != nil {
		c = capture.WrapConn(c, t.capture)
	}
	return c, nil
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
