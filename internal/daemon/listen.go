package daemon

// This file is the only place the daemon uses a connection manager: its memory target's
// listeners over iWARP (rnic/iwarp) and RoCEv2 (rnic/rocev2 with the IB CM), and the
// accept of a request with the target's advertisement as private data.

import (
	"context"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// Transport names, as the control protocol reports them.
const (
	transportIWARP  = "iwarp"
	transportRoCEv2 = "rocev2"
)

// listener is one listener of the memory target.
type listener struct {
	iw *iwarp.Listener
	ro *rocev2.Listener
}

// listenIWARP listens for iWARP connections on addr (host:port), requesting MPA CRC32c
// when crc is set.
func listenIWARP(dev *rnic.Device, addr string, crc bool) (*listener, error) {
	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = crc
	ln, err := hostlink.Process().IWARPListen(dev, addr, cfg) // -xdp, -pcap
	if err != nil {
		return nil, err
	}
	return &listener{iw: ln}, nil
}

// listenRoCEv2 listens for IB CM connections on the endpoint at addr (ip:RDMA-CM port).
func listenRoCEv2(ep *rocev2.Endpoint, addr string) (*listener, error) {
	ln, err := rocev2.Listen(ep, addr, nil)
	if err != nil {
		return nil, err
	}
	return &listener{ro: ln}, nil
}

func (l *listener) transport() string {
	if l.ro != nil {
		return transportRoCEv2
	}
	return transportIWARP
}

// addr is the listening address (iWARP: host:port; RoCEv2: the RDMA-CM address).
func (l *listener) addr() string {
	if l.ro != nil {
		return l.ro.Addr().String()
	}
	return l.iw.Addr().String()
}

// cmPort is the RDMA-CM port of a RoCEv2 listener.
func (l *listener) cmPort() uint16 {
	if l.ro != nil {
		return l.ro.Port()
	}
	return 0
}

func (l *listener) close() error {
	if l.ro != nil {
		return l.ro.Close()
	}
	return l.iw.Close()
}

// request is a connection request waiting for accept or reject.
type request struct {
	iw *iwarp.ConnRequest
	ro *rocev2.ConnRequest
}

// accept waits for the next connection request; it fails only when ctx ends or the
// listener is closed.
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

// ord is the initiator's ORD (0 from an MPA rev 1 peer).
func (r *request) ord() int {
	if r.ro != nil {
		return r.ro.ORD()
	}
	return r.iw.ORD()
}

// accept binds qp to the connection with the private data pd, IRD ird and ORD 1; it
// returns the MULPDU of the FPDUs this side sends (iWARP; 0 for RoCEv2).
func (r *request) accept(qp *rnic.QP, pd []byte, ird int) (mulpdu int, err error) {
	if r.ro != nil {
		_, err := r.ro.Accept(qp, rocev2.ConnParam{PrivateData: pd, IRD: ird, ORD: 1})
		return 0, err
	}
	c, err := r.iw.Accept(qp, iwarp.ConnParam{PrivateData: pd, IRD: ird, ORD: 1})
	if err != nil {
		return 0, err
	}
	return c.MULPDU(), nil
}

// reject refuses the request.
func (r *request) reject() {
	if r.ro != nil {
		_ = r.ro.Reject(nil)
	} else {
		_ = r.iw.Reject(nil)
	}
}
