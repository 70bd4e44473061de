//go:build linux

package bench

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/safchain/ethtool"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netstack"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// xdpVeth is two namespaces joined by a veth pair (MTU 1500): namespace 0 holds an
// AF_XDP port with the user-space TCP stack on it, namespace 1 only the kernel's TCP.
type xdpVeth struct {
	env  *netnstest.Env
	port *afxdp.Port
	st   *netstack.Stack
}

func newXDPVeth(b *testing.B) *xdpVeth {
	netnstest.RequirePriv(b)
	e := netnstest.New(b, 1500, 1)
	v := &xdpVeth{env: e}
	// GRO on the receiving veths, as a NIC has it; checksumming and segmentation
	// offloads stay at veth's defaults (on)
	for i := range 2 {
		netnstest.In(b, e.NS[i], func() {
			et, err := ethtool.NewEthtool()
			if err != nil {
				b.Fatal(err)
			}
			defer et.Close()
			if err := et.Change(e.Dev[i], map[string]bool{"rx-gro": true}); err != nil {
				b.Fatal(err)
			}
		})
	}
	netnstest.In(b, e.NS[0], func() {
		var err error
		if v.port, err = afxdp.Open(afxdp.Options{Interface: e.Dev[0], Addr: e.Addr[0]}); err != nil {
			b.Fatal(err)
		}
	})
	var err error
	if v.st, err = netstack.New(v.port, nil); err != nil {
		v.port.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = v.st.Close()
		_ = v.port.Close()
	})
	return v
}

// xdpEnd is one softrnic with a QP, CQs and a region, in a namespace.
type xdpEnd struct {
	ns  func(func())
	dev *rnic.Device
	tr  *cm.Transport
	*end
	mr *rnic.MR
}

// newXDPEnd opens a softrnic in namespace i: on the stack when st is set.
func (v *xdpVeth) newXDPEnd(b *testing.B, i int, st *netstack.Stack, crc bool, region int) *xdpEnd {
	addr := v.env.Addr[i].String()
	x := &xdpEnd{ns: func(f func()) { netnstest.In(b, v.env.NS[i], f) }}
	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = crc
	o := &cm.Options{IWARP: cfg}
	if st != nil {
		o.TCP = st
	}
	d, err := rnic.Open(rnic.Config{LocalAddr: addr})
	if err != nil {
		b.Fatal(err)
	}
	x.dev = d
	e := &end{dev: d}
	e.pd, _ = d.AllocPD()
	e.scq, _ = d.CreateCQ(4096)
	e.rcq, _ = d.CreateCQ(4096)
	if e.qp, err = d.CreateQP(e.pd, rnic.QPAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: rnic.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024}}); err != nil {
		b.Fatal(err)
	}
	go func() {
		for range d.Events() {
		}
	}()
	x.end = e
	if x.tr, err = cm.Open(d, cm.IWARP, addr, o); err != nil {
		b.Fatal(err)
	}
	if x.mr, err = e.pd.RegMR(filled(region), rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.tr.Close(); d.Close() })
	return x
}

// xdpConnect makes srv listen and cli dial it.
func xdpConnect(b *testing.B, srv, cli *xdpEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ln *cm.Listener
	srv.ns(func() {
		var err error
		if ln, err = srv.tr.Listen(":0"); err != nil {
			b.Fatal(err)
		}
	})
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			_, err = r.Accept(srv.qp, cm.Param{IRD: 16, ORD: 16})
		}
		done <- err
	}()
	var err error
	cli.ns(func() {
		_, err = cli.tr.Dial(ctx, cli.qp, net.JoinHostPort(srv.tr.LocalIP().String(), strconv.Itoa(ln.Port())), cm.Param{IRD: 16, ORD: 16})
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// writes posts n RDMA WRITEs of size bytes from cli into srv's region (at most 64 in
// flight, every 16th signaled) and ends with a zero-length READ, so every byte has been
// placed when it returns.
func (cli *xdpEnd) writes(b *testing.B, srv *xdpEnd, n, size int) time.Duration {
	start := time.Now()
	var wc [64]rnic.Completion
	inflight, signaled := 0, 0
	ctx := context.Background()
	for i := 0; i < n; i++ {
		for inflight >= 64 {
			k, err := cli.scq.Wait(ctx, wc[:])
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range wc[:k] {
				if c.Status != rnic.StatusSuccess {
					b.Fatalf("write: %+v", c)
				}
				inflight -= 16
			}
		}
		var fl rnic.SendFlags
		if i%16 == 15 {
			fl = rnic.Signaled
			signaled++
		}
		if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, Flags: fl, SGL: []rnic.SGE{cli.mr.SGE(0, size)},
			RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpRead, Flags: rnic.Signaled, RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}); err != nil {
		b.Fatal(err)
	}
	for {
		k, err := cli.scq.Wait(ctx, wc[:1])
		if err != nil || k != 1 || wc[0].Status != rnic.StatusSuccess {
			b.Fatalf("write/read: %v %+v", err, wc[0])
		}
		if wc[0].WRID == 1 {
			return time.Since(start)
		}
	}
}

// rawSink is the raw kernel TCP baseline: a server in namespace 1 that reads an 8-byte
// count and then as many bytes, and answers one byte.
func rawSink(b *testing.B, v *xdpVeth) net.Conn {
	var l net.Listener
	netnstest.In(b, v.env.NS[1], func() {
		var err error
		if l, err = net.Listen("tcp", netip.AddrPortFrom(v.env.Addr[1], 0).String()); err != nil {
			b.Fatal(err)
		}
	})
	go func() {
		defer l.Close()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		var hdr [8]byte
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			for n := int64(binary.BigEndian.Uint64(hdr[:])); n > 0; {
				k, err := c.Read(buf[:min(int64(len(buf)), n)])
				if err != nil {
					return
				}
				n -= int64(k)
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	var c net.Conn
	netnstest.In(b, v.env.NS[0], func() {
		var err error
		if c, err = net.Dial("tcp", l.Addr().String()); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { c.Close() })
	return c
}

// rawWrites streams n writes of size bytes and waits for the sink's answer.
func rawWrites(b *testing.B, c net.Conn, buf []byte, n int) time.Duration {
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n)*uint64(len(buf)))
	start := time.Now()
	if _, err := c.Write(hdr[:]); err != nil {
		b.Fatal(err)
	}
	for range n {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := io.ReadFull(c, hdr[:1]); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkIWARPOverAFXDP compares, on one veth pair in the same run, RDMA WRITE from
// softrnic's iWARP over AF_XDP (the user-space TCP of link/netstack) with RDMA WRITE
// from softrnic on the kernel's TCP, both to softrnic on the kernel's TCP in the other
// namespace, and a raw kernel TCP stream over the same veth. Rounds alternate, so the
// load of the machine hits all three alike. Reported: MB/s of each and the AF_XDP
// figure's ratio to the other two (>1: AF_XDP faster).
func BenchmarkIWARPOverAFXDP(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, size := range []int{64 << 10, 1 << 20} {
			b.Run(crcName(crc)+"/"+sizeName(size), func(b *testing.B) {
				v := newXDPVeth(b)
				// two targets in namespace 1, one per client
				xcli := v.newXDPEnd(b, 0, v.st, crc, size)
				kcli := v.newXDPEnd(b, 0, nil, crc, size)
				xsrv := v.newXDPEnd(b, 1, nil, crc, size)
				ksrv := v.newXDPEnd(b, 1, nil, crc, size)
				xdpConnect(b, xsrv, xcli)
				xdpConnect(b, ksrv, kcli)
				raw := rawSink(b, v)
				buf := filled(size)
				// warm up: windows open, neighbours resolved
				xcli.writes(b, xsrv, 16, size)
				kcli.writes(b, ksrv, 16, size)
				rawWrites(b, raw, buf, 16)
				var tx, tk, tr time.Duration
				b.SetBytes(int64(size))
				b.ResetTimer()
				for _, n := range rounds(b.N) {
					tx += xcli.writes(b, xsrv, n, size)
					b.StopTimer()
					tk += kcli.writes(b, ksrv, n, size)
					tr += rawWrites(b, raw, buf, n)
					b.StartTimer()
				}
				b.StopTimer()
				mb := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
				b.ReportMetric(mb(tk), "kernel-iwarp-MB/s")
				b.ReportMetric(mb(tr), "raw-tcp-MB/s")
				b.ReportMetric(tk.Seconds()/tx.Seconds(), "x-kernel-iwarp")
				b.ReportMetric(tr.Seconds()/tx.Seconds(), "x-raw-tcp")
				if s := v.st.Stats(); s.ChecksumErrors != 0 {
					b.Fatalf("stack %+v", s)
				}
			})
		}
	}
}
