package cm

import (
	"context"
	"net"
	"sync"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// The transport-specific halves of Listener, ConnRequest and Conn (iwarp.go, rocev2.go).
type (
	listenerImpl interface {
		accept(ctx context.Context) (requestImpl, error)
		addr() net.Addr
		port() int
		close() error
	}
	requestImpl interface {
		privateData() []byte
		ird() int
		ord() int
		localAddr() net.Addr
		remoteAddr() net.Addr
		accept(qp *rnic.QP, p Param) (connImpl, error)
		reject(pd []byte) error
	}
	connImpl interface {
		peerPrivateData() []byte
		ird() int
		ord() int
		localAddr() net.Addr
		remoteAddr() net.Addr
		done() <-chan struct{}
		abort()
	}
)

// Listener receives connection requests for one service port.
type Listener struct {
	t    *Transport
	impl listenerImpl
	once sync.Once
}

// Accept waits for the next connection request, until ctx ends or the listener is closed
// (an error wrapping ErrClosed). Each request must be answered with Accept or Reject
// within the transport's connection timeout, else the peer's connect fails.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	r, err := l.impl.accept(ctx)
	if err != nil {
		if ctx.Err() == nil {
			err = closedErr(err)
		}
		return nil, &OpError{Op: "accept", Net: l.t.network, Addr: l.impl.addr().String(), Err: err}
	}
	return &ConnRequest{t: l.t, impl: r}, nil
}

// Addr returns the listening address (with the port chosen for ":0").
func (l *Listener) Addr() net.Addr { return l.impl.addr() }

// Port returns the service port listened on (the TCP port for iWARP, the RDMA-CM port
// for RoCEv2).
func (l *Listener) Port() int { return l.impl.port() }

// Network returns "iwarp" or "rocev2".
func (l *Listener) Network() string { return l.t.network }

// Close stops listening; pending requests are refused and Accept returns ErrClosed.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.impl.close()
		l.t.forget(l)
	})
	return err
}

// ConnRequest is an incoming connection request.
type ConnRequest struct {
	t    *Transport
	impl requestImpl
	mu   sync.Mutex
	used bool
}

// PrivateData returns the initiator's private data.
func (r *ConnRequest) PrivateData() []byte { return r.impl.privateData() }

// IRD returns the initiator's inbound Read depth (its responder resources).
func (r *ConnRequest) IRD() int { return r.impl.ird() }

// ORD returns the initiator's outbound Read depth (its initiator depth).
func (r *ConnRequest) ORD() int { return r.impl.ord() }

// LocalAddr returns the address the request arrived at.
func (r *ConnRequest) LocalAddr() net.Addr { return r.impl.localAddr() }

// RemoteAddr returns the initiator's address.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.impl.remoteAddr() }

func (r *ConnRequest) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used {
		return false
	}
	r.used = true
	return true
}

// Accept binds qp (an Idle QP of the transport's device) to the connection and sends the
// accept message with p.PrivateData; the QP is in RTS on return.
func (r *ConnRequest) Accept(qp *rnic.QP, p Param) (*Conn, error) {
	op := func(err error) error {
		return &OpError{Op: "accept", Net: r.t.network, Addr: r.impl.remoteAddr().String(), Err: err}
	}
	if !r.take() {
		return nil, op(ErrAnswered)
	}
	if qp == nil || qp.Device() != r.t.dev {
		_ = r.impl.reject(nil)
		return nil, op(rnic.ErrInvalidArg)
	}
	if len(p.PrivateData) > r.t.MaxPrivateData(MsgAccept) {
		_ = r.impl.reject(nil)
		return nil, op(ErrPrivateDataTooLong)
	}
	c, err := r.impl.accept(qp, p)
	if err != nil {
		return nil, op(err)
	}
	return newConn(r.t, qp, c), nil
}

// Reject refuses the request, carrying pd to the initiator (which gets a *RejectError).
func (r *ConnRequest) Reject(pd []byte) error {
	op := func(err error) error {
		return &OpError{Op: "reject", Net: r.t.network, Addr: r.impl.remoteAddr().String(), Err: err}
	}
	if !r.take() {
		return op(ErrAnswered)
	}
	if len(pd) > r.t.MaxPrivateData(MsgReject) {
		_ = r.impl.reject(nil)
		return op(ErrPrivateDataTooLong)
	}
	if err := r.impl.reject(pd); err != nil {
		return op(err)
	}
	return nil
}

// Conn is an established connection: its QP is in RTS until the connection ends.
type Conn struct {
	t    *Transport
	qp   *rnic.QP
	impl connImpl
}

func newConn(t *Transport, qp *rnic.QP, impl connImpl) *Conn {
	return &Conn{t: t, qp: qp, impl: impl}
}

// Network returns "iwarp" or "rocev2".
func (c *Conn) Network() string { return c.t.network }

// MPA returns the MPA parameters an iWARP connection negotiated (revision, CRC, Markers,
// peer-to-peer mode and RTR, IRD/ORD words); ok is false for RoCEv2.
func (c *Conn) MPA() (p mpa.Params, ok bool) {
	if iw, isIW := c.impl.(iwConn); isIW {
		return iw.c.Params(), true
	}
	return p, false
}

// MULPDU returns the largest ULPDU an iWARP connection puts in one FPDU it sends (RFC 5044
// §4.5: from the TCP MSS and Markers), or 0 for RoCEv2.
func (c *Conn) MULPDU() int {
	if iw, isIW := c.impl.(iwConn); isIW {
		return iw.c.MULPDU()
	}
	return 0
}

// QP returns the connected queue pair.
func (c *Conn) QP() *rnic.QP { return c.qp }

// PrivateData returns the private data the peer sent with its connect (on the accepting
// side) or accept (on the dialing side) message. RoCEv2 delivers the whole fixed-size
// field, as RDMA-CM does.
func (c *Conn) PrivateData() []byte { return c.impl.peerPrivateData() }

// IRD returns the negotiated inbound Read/atomic depth.
func (c *Conn) IRD() int { return c.impl.ird() }

// ORD returns the negotiated outbound Read/atomic depth.
func (c *Conn) ORD() int { return c.impl.ord() }

// LocalAddr returns the local address of the connection.
func (c *Conn) LocalAddr() net.Addr { return c.impl.localAddr() }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.impl.remoteAddr() }

// Done is closed when the connection has ended and the QP's work has been flushed.
func (c *Conn) Done() <-chan struct{} { return c.impl.done() }

// Err returns why the connection ended (nil while it is up, or after a clean disconnect
// by either side): a Terminate, an LLP error, retry exhaustion … It is the QP's error.
func (c *Conn) Err() error { return c.qp.Err() }

// Disconnect closes the connection gracefully (RFC 5040 §5.4 / IB DREQ): queued sends
// finish, then the connection closes and the QP goes to Error, flushing receives. It
// waits until Done or ctx ends; then the close becomes abortive and ctx's error is
// returned.
func (c *Conn) Disconnect(ctx context.Context) error {
	c.qp.Disconnect()
	select {
	case <-c.impl.done():
		return nil
	case <-ctx.Done():
		c.impl.abort()
		<-c.impl.done()
		return ctx.Err()
	}
}

// Close aborts the connection (TCP reset / no DREQ wait) and waits until the QP's work has
// been flushed.
func (c *Conn) Close() error {
	c.impl.abort()
	<-c.impl.done()
	return nil
}

// Abort starts an abortive close and returns at once; Done is closed when it has finished.
// It is for callers that must not block (event handlers, code holding locks the
// completion path takes).
func (c *Conn) Abort() { c.impl.abort() }
