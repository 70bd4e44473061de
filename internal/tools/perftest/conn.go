package perftest

// This file is the only place perftest uses a connection manager: it listens, accepts and
// dials over iWARP (rnic/iwarp, MPA rev 2 as perftest gets it from siw through rdma_cm) or
// RoCEv2 (rnic/rocev2 with the IB CM, as perftest -R gets it from rxe), as Options.RoCE
// selects.

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

// iwarpConfig is the MPA configuration perftest gets from siw through rdma_cm: rev 2 with
// the IRD/ORD word, client-server model, CRC only when asked.
func iwarpConfig(o *Options) *iwarp.Config {
	return &iwarp.Config{MPA: mpa.Config{Rev: 2, CRC: o.CRC, MaxPrivateData: mpa.SiwMaxPrivateData}}
}

// conn is an established connection; a RoCEv2 one lives in its endpoint and needs no
// handle here.
type conn struct {
	iw *iwarp.Conn
}

// mpa returns the negotiated MPA parameters of an iWARP connection.
func (c *conn) mpa() (mpa.Params, bool) {
	if c == nil || c.iw == nil {
		return mpa.Params{}, false
	}
	return c.iw.Params(), true
}

func (c *conn) close() {
	if c != nil && c.iw != nil {
		_ = c.iw.Close()
	}
}

// listener is a listening endpoint of either transport.
type listener struct {
	iw *iwarp.Listener
	ro *rocev2.Listener
}

// listen listens on host:o.Port: over RoCEv2 when ep is not nil, else over iWARP on dev.
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

// accept waits for the next connection request and accepts it on qp with IRD = ORD =
// depth (the responder takes min(initiator ORD, our IRD) and min(initiator IRD, our ORD)).
func (l *listener) accept(ctx context.Context, qp *rnic.QP, depth int) (*conn, error) {
	if l.ro != nil {
		req, err := l.ro.Accept(ctx)
		if err != nil {
			return nil, err
		}
		_, err = req.Accept(qp, rocev2.ConnParam{IRD: depth, ORD: depth})
		return &conn{}, err
	}
	req, err := l.iw.Accept(ctx)
	if err != nil {
		return nil, err
	}
	c, err := req.Accept(qp, iwarp.ConnParam{IRD: depth, ORD: depth})
	if err != nil {
		return nil, err
	}
	return &conn{iw: c}, nil
}

// dial connects qp to the server o.Peer:o.Port (rdma_connect) with IRD = ORD = depth:
// over RoCEv2 when ep is not nil, else over iWARP.
func dial(ctx context.Context, ep *rocev2.Endpoint, qp *rnic.QP, o *Options, depth int) (*conn, error) {
	addr := net.JoinHostPort(o.Peer, strconv.Itoa(o.Port))
	if ep != nil {
		_, err := rocev2.Dial(ctx, ep, qp, addr, nil, rocev2.ConnParam{IRD: depth, ORD: depth})
		if err != nil {
			return nil, err
		}
		return &conn{}, nil
	}
	cfg, err := hostlink.Process().IWARPConfig(qp.Device(), iwarpConfig(o)) // --xdp, --pcap
	if err != nil {
		return nil, err
	}
	c, err := iwarp.Dial(ctx, qp, addr, cfg, iwarp.ConnParam{IRD: depth, ORD: depth})
	if err != nil {
		return nil, err
	}
	return &conn{iw: c}, nil
}
