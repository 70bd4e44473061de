package rping

// This file is the only place rping uses the connection manager (rnic/cm): it opens the
// device on iWARP (MPA rev 2 as rping gets it from siw) or RoCEv2 (the IB CM, as rping
// gets it from rxe), as Options.RoCE selects, and listens, accepts and dials.

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// connParam is what rping's rdma_conn_param asks for: IRD = ORD = 1.
var connParam = cm.Param{IRD: 1, ORD: 1}

// open opens the device on the network the options select, at local (RoCEv2: the
// link's address; iWARP: the listeners' default address, or none).
func open(o *Options, local netip.Addr) (*rnic.Device, *cm.Transport, error) {
	addr := ""
	if local.IsValid() {
		addr = local.String()
	}
	network := cm.IWARP
	if o.RoCE {
		network = cm.RoCEv2
	}
	// MPA rev 2 (enhanced, IRD/ORD word), client-server model, CRC only when asked, siw's
	// private-data cap.
	iw := &iwarp.Config{MPA: mpa.Config{Rev: 2, CRC: o.CRC, MaxPrivateData: mpa.SiwMaxPrivateData}}
	return tool.Open(rnic.Config{Name: o.Dev}, network, addr, &cm.Options{IWARP: iw})
}

// dial connects qp to the server at o.Addr:o.Port (rdma_connect).
func dial(ctx context.Context, t *cm.Transport, qp *rnic.QP, o *Options) (*cm.Conn, error) {
	return t.Dial(ctx, qp, net.JoinHostPort(o.Addr, strconv.Itoa(o.Port)), connParam)
}

// listen listens on host:o.Port (rdma_bind_addr + rdma_listen).
func listen(t *cm.Transport, host string, o *Options) (*cm.Listener, error) {
	return t.Listen(net.JoinHostPort(host, strconv.Itoa(o.Port)))
}

// accept binds qp to the connection request (rdma_accept).
func accept(r *cm.ConnRequest, qp *rnic.QP) (*cm.Conn, error) { return r.Accept(qp, connParam) }
