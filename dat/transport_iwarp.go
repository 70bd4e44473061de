package dat

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// The iWARP transport: connection qualifiers are TCP ports, connection
// requests are MPA Request frames (RFC 5044 §7.1) and private data rides in
// the MPA Request/Reply.

func init() {
	transportFactories["iwarp"] = func(ia *IA) (transport, error) {
		if c := ia.prov.IWARP; c != nil {
			cfg := *c
			return &iwarpTransport{ia: ia, cfg: &cfg}, nil
		}
		cfg := iwarp.DefaultConfig()
		cfg.Extensions = true // RFC 7306 atomics and immediate data (dat↔dat)
		return &iwarpTransport{ia: ia, cfg: cfg}, nil
	}
}

type iwarpTransport struct {
	ia  *IA
	cfg *iwarp.Config
}

func (t *iwarpTransport) listen(addr string) (tlistener, error) {
	l, err := iwarp.Listen(t.ia.dev, addr, t.cfg)
	if err != nil {
		return nil, err
	}
	return iwarpListener{l}, nil
}

func (t *iwarpTransport) dial(ctx context.Context, qp *rnic.QP, addr string, p connParams) (tconn, []byte, error) {
	c, err := iwarp.Dial(ctx, qp, addr, t.cfg, iwarp.ConnParam{PrivateData: p.privateData, IRD: p.ird, ORD: p.ord})
	if err != nil {
		return nil, nil, err
	}
	return iwarpConn{c}, append([]byte(nil), c.PeerPrivateData()...), nil
}

func (t *iwarpTransport) classify(err error) (EventNumber, []byte) {
	var rej *iwarp.RejectError
	switch {
	case errors.As(err, &rej):
		return ConnectionEventPeerRejected, rej.PrivateData
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnectionEventNonPeerRejected, nil
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EINVAL):
		// EINVAL: the IA's address cannot reach the remote (e.g. a loopback IA)
		return ConnectionEventUnreachable, nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ConnectionEventTimedOut, nil
	}
	var ae *net.AddrError
	if errors.As(err, &ae) { // no local address of the remote's family
		return ConnectionEventUnreachable, nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ConnectionEventTimedOut, nil
	}
	return ConnectionEventNonPeerRejected, nil
}

// peerClosed: an abortive close by the peer (TCP RST) surfaces as an LLP
// read error or a socket write error (reset, broken pipe); it is the peer's
// (abrupt) disconnect, not a broken connection.
func (t *iwarpTransport) peerClosed(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// maxPrivateData: the MPA cap (256, siw's) covers the RFC 6581 IRD/ORD word
// that enhanced (rev 2) frames carry before the Consumer's private data.
func (t *iwarpTransport) maxPrivateData(pdOp) int { return t.cfg.MPA.MaxPrivateData - 4 }

func (t *iwarpTransport) close() {}

type iwarpListener struct{ l *iwarp.Listener }

func (l iwarpListener) accept(ctx context.Context) (treq, error) {
	r, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return iwarpReq{r}, nil
}

func (l iwarpListener) addr() *net.TCPAddr {
	a, _ := l.l.Addr().(*net.TCPAddr)
	return a
}

func (l iwarpListener) close() { _ = l.l.Close() }

type iwarpReq struct{ r *iwarp.ConnRequest }

func (r iwarpReq) privateData() []byte  { return r.r.PrivateData() }
func (r iwarpReq) remoteAddr() net.Addr { return r.r.RemoteAddr() }
func (r iwarpReq) localAddr() net.Addr  { return r.r.LocalAddr() }
func (r iwarpReq) reject(pd []byte) error {
	return r.r.Reject(pd)
}
func (r iwarpReq) accept(qp *rnic.QP, p connParams) (tconn, error) {
	c, err := r.r.Accept(qp, iwarp.ConnParam{PrivateData: p.privateData, IRD: p.ird, ORD: p.ord})
	if err != nil {
		return nil, err
	}
	return iwarpConn{c}, nil
}

type iwarpConn struct{ c *iwarp.Conn }

func (c iwarpConn) disconnect(graceful bool) { c.c.Disconnect(graceful) }
func (c iwarpConn) localAddr() net.Addr      { return c.c.LocalAddr() }
func (c iwarpConn) remoteAddr() net.Addr     { return c.c.RemoteAddr() }
