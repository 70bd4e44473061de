package rping

// This file is the only place rping uses a connection manager: it listens, accepts and
// dials over iWARP (rnic/iwarp, MPA rev 2 as rping gets it from siw) or RoCEv2
// (rnic/rocev2 with the IB CM, as rping gets it from rxe), as Options.RoCE selects.

import (
	"context"
	"net"
	"strconv"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// connDepth is what rping's rdma_conn_param asks for: IRD = ORD = 1.
const connDepth = 1

// iwarpConfig is the MPA configuration rping uses on siw: rev 2 (enhanced, IRD/ORD word),
// client-server model, CRC only when asked.
func iwarpConfig(o *Options) *iwarp.Config {
	return &iwarp.Config{MPA: mpa.Config{Rev: 2, CRC: o.CRC, MaxPrivateData: mpa.SiwMaxPrivateData}}
}

// conn is an established connection of either transport.
type conn struct {
	iw *iwarp.Conn
	ro *rocev2.Conn
}

// done is closed when the connection has finished.
func (c *conn) done() <-chan struct{} {
	if c.ro != nil {
		return c.ro.Done()
	}
	return c.iw.Done()
}

// mpa returns the negotiated MPA parameters of an iWARP connection.
func (c *conn) mpa() (mpa.Params, bool) {
	if c.iw == nil {
		return mpa.Params{}, false
	}
	return c.iw.Params(), true
}

// close releases the connection (its QP is the caller's).
func (c *conn) close() {
	if c.iw != nil {
		_ = c.iw.Close()
	}
}

// dial connects qp to the server at o.Addr:o.Port (rdma_connect): over RoCEv2 when ep is
// not nil, else over iWARP.
func dial(ctx context.Context, ep *rocev2.Endpoint, qp *rnic.QP, o *Options) (*conn, error) {
	addr := net.JoinHostPort(o.Addr, strconv.Itoa(o.Port))
	if ep != nil {
		c, err := rocev2.Dial(ctx, ep, qp, addr, nil, rocev2.ConnParam{IRD: connDepth, ORD: connDepth})
		if err != nil {
			return nil, err
		}
		return &conn{ro: c}, nil
	}
	cfg, err := hostlink.Process().IWARPConfig(qp.Device(), iwarpConfig(o)) // --xdp, --pcap
	if err != nil {
		return nil, err
	}
	c, err := iwarp.Dial(ctx, qp, addr, cfg, iwarp.ConnParam{IRD: connDepth, ORD: connDepth})
	if err != nil {
		return nil, err
	}
	return &conn{iw: c}, nil
}

// listener is a listening endpoint of either transport.
type listener struct {
	iw *iwarp.Listener
	ro *rocev2.Listener
}

// listen listens on host:o.Port (rdma_bind_addr + rdma_listen): over RoCEv2 when ep is
// not nil, else over iWARP on dev.
func listen(dev *rnic.Device, ep *rocev2.Endpoint, host string, o *Options) (*listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(o.Port))
	if ep != nil {
		ln, err := rocev2.Listen(ep, addr, nil)
		if err != nil {
			return nil, err
		}
		return &listener{ro: ln}, nil
	}
	ln, err := hostlink.Process().IWARPListen(dev, addr, iwarpConfig(o)) // --xdp, --pcap
	if err != nil {
		return nil, err
	}
	return &listener{iw: ln}, nil
}

// addr is the listening address: a *net.TCPAddr (iWARP) or a *net.UDPAddr (RoCEv2: the
// link's address with the RDMA-CM port).
func (l *listener) addr() net.Addr {
	if l.ro != nil {
		return net.UDPAddrFromAddrPort(l.ro.Addr().AddrPort())
	}
	return l.iw.Addr()
}

func (l *listener) close() {
	if l.ro != nil {
		_ = l.ro.Close()
	} else {
		_ = l.iw.Close()
	}
}

// request is a connection request waiting for accept or reject.
type request struct {
	iw *iwarp.ConnRequest
	ro *rocev2.ConnRequest
}

// accept waits for the next connection request (RDMA_CM_EVENT_CONNECT_REQUEST).
func (l *listener) accept(ctx context.Context) (*request, error) {
	if l.ro != nil {
		r, err := l.ro.Accept(ctx)
		if err != nil {
			return nil, err
		}
		return &request{ro: r}, nil
	}
	r, err := l.iw.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &request{iw: r}, nil
}

func (r *request) remoteAddr() string {
	if r.ro != nil {
		return r.ro.RemoteAddr().String()
	}
	return r.iw.RemoteAddr().String()
}

func (r *request) ird() int {
	if r.ro != nil {
		return r.ro.IRD()
	}
	return r.iw.IRD()
}

func (r *request) ord() int {
	if r.ro != nil {
		return r.ro.ORD()
	}
	return r.iw.ORD()
}

// accept binds qp to the connection (rdma_accept).
func (r *request) accept(qp *rnic.QP) (*conn, error) {
	if r.ro != nil {
		c, err := r.ro.Accept(qp, rocev2.ConnParam{IRD: connDepth, ORD: connDepth})
		if err != nil {
			return nil, err
		}
		return &conn{ro: c}, nil
	}
	c, err := r.iw.Accept(qp, iwarp.ConnParam{IRD: connDepth, ORD: connDepth})
	if err != nil {
		return nil, err
	}
	return &conn{iw: c}, nil
}

// reject refuses the request (rdma_reject).
func (r *request) reject() {
	if r.ro != nil {
		_ = r.ro.Reject(nil)
	} else {
		_ = r.iw.Reject(nil)
	}
}
