//go:build linux

// Package afxdp tests softrnic's iWARP over AF_XDP (rnic/cm with link/netstack's
// user-space TCP on a link/afxdp port) against softrnic on the kernel's TCP, across two
// network namespaces joined by a veth pair. The tests need root (they skip, saying so,
// without it or without AF_XDP sockets).
package afxdp

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netstack"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2/xdp"
)

// lossy drops a fraction of frames with a seeded generator while on.
type lossy struct {
	on   atomic.Bool
	mu   sync.Mutex
	rng  *rand.Rand
	rate float64
}

func newLossy(seed uint64, rate float64) *lossy {
	return &lossy{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rate: rate}
}

func (l *lossy) drop([]byte) bool {
	if !l.on.Load() {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < l.rate
}

// rig is namespace 0 with an AF_XDP port and the user-space TCP stack on it, and
// namespace 1 with the kernel's TCP, joined by a veth pair.
type rig struct {
	env        *netnstest.Env
	port       *afxdp.Port
	st         *netstack.Stack
	rxLoss     *lossy
	txLoss     *lossy
	xdpAddr    netip.Addr
	kernelAddr netip.Addr
}

// newRig builds the namespaces, the port (dropping rate of the frames in each
// direction while the loss is on) and the stack. o adjusts the port's options.
func newRig(t testing.TB, rate float64, o func(*afxdp.Options)) *rig {
	t.Helper()
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	r := &rig{env: e, rxLoss: newLossy(1, rate), txLoss: newLossy(2, rate), xdpAddr: e.Addr[0], kernelAddr: e.Addr[1]}
	po := afxdp.Options{Interface: e.Dev[0], Addr: r.xdpAddr, DropRx: r.rxLoss.drop, DropTx: r.txLoss.drop}
	if o != nil {
		o(&po)
	}
	netnstest.In(t, e.NS[0], func() {
		var err error
		if r.port, err = afxdp.Open(po); err != nil {
			t.Fatal(err)
		}
	})
	st, err := netstack.New(r.port, &netstack.Config{TimeWait: 100 * time.Millisecond})
	if err != nil {
		r.port.Close()
		t.Fatal(err)
	}
	r.st = st
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("port %+v", r.port.Stats())
			t.Logf("stack %+v", r.st.Stats())
		}
		_ = r.st.Close()
		_ = r.port.Close()
	})
	return r
}

// loss turns the injected loss on or off.
func (r *rig) loss(on bool) {
	r.rxLoss.on.Store(on)
	r.txLoss.on.Store(on)
}

// host is one softrnic: a device, an iWARP transport, a QP with its CQs and a region.
type host struct {
	name     string
	ns       func(func()) // runs f where the host's sockets are made
	dev      *rnic.Device
	tr       *cm.Transport
	pd       *rnic.PD
	scq, rcq *rnic.CQ
	qp       *rnic.QP
	mr       *rnic.MR
	buf      []byte
}

const (
	msgSize    = 1 << 20
	allAccess  = rnic.AccessLocalWrite | rnic.AccessRemoteWrite | rnic.AccessRemoteRead | rnic.AccessRemoteAtomic
	regionSize = 8*msgSize + 4096 // everyOperation's layout
)

// iwarpConfig is the configuration both ends use: RFC 7306 extensions on (atomics,
// immediate data), CRC as asked.
func iwarpConfig(crc bool) *iwarp.Config {
	c := iwarp.DefaultConfig()
	c.MPA.CRC = crc
	c.Extensions = true
	return c
}

// hostOpts describe a host: its network (cm.IWARP by default), whether it runs over the
// rig's AF_XDP port (else the kernel's sockets in namespace 1), MPA CRC, and a capture
// of its transport (cm.Options.Capture).
type hostOpts struct {
	network string
	xdp     bool
	crc     bool
	capture *capture.Writer
}

// newHost opens a host.
func (r *rig) newHost(t testing.TB, ho hostOpts) *host {
	t.Helper()
	if ho.network == "" {
		ho.network = cm.IWARP
	}
	h := &host{name: "kernel-" + ho.network, buf: make([]byte, regionSize)}
	addr := r.kernelAddr
	o := &cm.Options{IWARP: iwarpConfig(ho.crc), Capture: ho.capture}
	h.ns = func(f func()) { netnstest.In(t, r.env.NS[1], f) }
	if ho.xdp {
		h.name, addr = "afxdp-"+ho.network, r.xdpAddr
		h.ns = func(f func()) { f() }
		if ho.network == cm.IWARP {
			o.TCP = r.st
		} else {
			l, err := xdp.New(xdp.Options{Port: r.port, Addr: netip.AddrPortFrom(addr, 4791)})
			if err != nil {
				t.Fatal(err)
			}
			o.Link = l // the transport closes it
		}
	}
	var err error
	if h.dev, err = rnic.Open(rnic.Config{Name: h.name, LocalAddr: addr.String()}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range h.dev.Events() {
		}
	}()
	h.ns(func() { h.tr, err = cm.Open(h.dev, ho.network, addr.String(), o) })
	if err != nil {
		t.Fatal(err)
	}
	h.pd, _ = h.dev.AllocPD()
	h.scq, _ = h.dev.CreateCQ(1024)
	h.rcq, _ = h.dev.CreateCQ(1024)
	if h.qp, err = h.dev.CreateQP(h.pd, rnic.QPAttr{SendCQ: h.scq, RecvCQ: h.rcq,
		Cap: rnic.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}}); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(h.buf, allAccess); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.tr.Close()
		_ = h.qp.Destroy()
		_ = h.dev.Close()
	})
	return h
}

// connect makes srv listen and cli dial it; it returns both connections.
func connect(t testing.TB, srv, cli *host) (sc, cc *cm.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ln *cm.Listener
	srv.ns(func() {
		var err error
		if ln, err = srv.tr.Listen(":0"); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	type res struct {
		c   *cm.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			acc <- res{err: err}
			return
		}
		c, err := r.Accept(srv.qp, cm.Param{PrivateData: []byte("accept from " + srv.name)})
		acc <- res{c, err}
	}()
	addr := net.JoinHostPort(srv.tr.LocalIP().String(), strconv.Itoa(ln.Port()))
	var err error
	cli.ns(func() {
		cc, err = cli.tr.Dial(ctx, cli.qp, addr, cm.Param{PrivateData: []byte("dial from " + cli.name)})
	})
	if err != nil {
		t.Fatalf("%s dials %s: %v", cli.name, srv.name, err)
	}
	a := <-acc
	if a.err != nil {
		t.Fatalf("%s accepts: %v", srv.name, a.err)
	}
	// RoCEv2 delivers the whole fixed-size private-data field
	if !bytes.HasPrefix(cc.PrivateData(), []byte("accept from "+srv.name)) || a.c.RemoteAddr() == nil {
		t.Fatalf("private data %q", cc.PrivateData())
	}
	return a.c, cc
}

// wait takes one completion of cq.
func wait(t testing.TB, cq *rnic.CQ) rnic.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wc [1]rnic.Completion
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return wc[0]
}
