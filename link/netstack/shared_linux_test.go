//go:build linux

package netstack

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/xdp"
	"github.com/softrnic/softrnic/roce"
)

type roceSide struct {
	dev      *rnic.Device
	pd       *rnic.PD
	scq, rcq *rnic.CQ
	qp       *rnic.QP
	ep       *rocev2.Endpoint
}

func newRoCESide(t *testing.T, l rocev2.Link) *roceSide {
	t.Helper()
	d, err := rnic.Open(rnic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &roceSide{dev: d}
	s.pd, _ = d.AllocPD()
	s.scq, _ = d.CreateCQ(256)
	s.rcq, _ = d.CreateCQ(256)
	if s.qp, err = d.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: rnic.QPCap{MaxSendWR: 64}}); err != nil {
		t.Fatal(err)
	}
	s.ep = rocev2.NewEndpoint(d, l, rocev2.DefaultConfig())
	t.Cleanup(func() { _ = s.qp.Destroy(); _ = s.ep.Close(); _ = d.Close() })
	return s
}

// TestSharedPort runs the RoCEv2 AF_XDP link and the userspace TCP stack
// on one port (one XDP program, one socket and UMEM) at the same time: 1
// MiB RDMA WRITEs to a UDP-link RoCE peer while 1 MiB is echoed through a
// kernel TCP peer, both in the other namespace.
func TestSharedPort(t *testing.T) {
	r := newRig(t, 0, false)
	var lb rocev2.Link
	netnstest.In(t, r.env.NS[1], func() {
		var err error
		if lb, err = rocev2.ListenUDP(netip.AddrPortFrom(r.env.Addr[1], roce.UDPPort), nil); err != nil {
			t.Fatal(err)
		}
	})
	la, err := xdp.New(xdp.Options{Port: r.port, Addr: netip.AddrPortFrom(r.env.Addr[0], roce.UDPPort)})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newRoCESide(t, la), newRoCESide(t, lb)
	if _, err := a.ep.Connect(a.qp, rocev2.ConnAttr{Remote: lb.LocalAddr(), RemoteQPN: b.qp.Num(), SendPSN: 1, RecvPSN: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ep.Connect(b.qp, rocev2.ConnAttr{Remote: la.LocalAddr(), RemoteQPN: a.qp.Num(), SendPSN: 2, RecvPSN: 1}); err != nil {
		t.Fatal(err)
	}

	kl := r.kernelListen(t, false)
	done := echo(kl)
	tcpErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
		if err != nil {
			tcpErr <- err
			return
		}
		defer c.Close()
		msg := pattern(1<<20, 9)
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		go func() { _, _ = c.Write(msg) }()
		got := make([]byte, len(msg))
		if _, err := readFull(c, got); err != nil {
			tcpErr <- err
			return
		}
		if !bytes.Equal(got, msg) {
			tcpErr <- errDiffer
			return
		}
		tcpErr <- nil
	}()

	const n = 1 << 20
	src := pattern(n, 3)
	smr, err := a.pd.RegMR(src, rnic.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	dmr, err := b.pd.RegMR(dst, rnic.AccessLocalWrite|rnic.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]rnic.Completion, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 8 {
		if err := a.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled,
			SGL: []rnic.SGE{smr.SGE(0, n)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.scq.Wait(ctx, wc); err != nil || wc[0].Status != 0 {
			t.Fatalf("WRITE %d: %v %+v", i, err, wc[0])
		}
	}
	// b reads dst only after a SEND's receive completion (ordering the
	// race detector can see)
	if err := b.qp.PostRecv(&rnic.RecvWR{WRID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&rnic.SendWR{WRID: 9, Opcode: rnic.OpSend}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.rcq.Wait(ctx, wc); err != nil || wc[0].Status != 0 {
		t.Fatalf("SEND: %v %+v", err, wc[0])
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("RDMA WRITE data differ")
	}
	if err := <-tcpErr; err != nil {
		t.Fatalf("TCP echo beside RoCE: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("kernel echo: %v", err)
	}
	ps, ls := r.port.Stats(), la.Stats()
	t.Logf("port %+v", ps)
	t.Logf("RoCE link %+v", ls)
	t.Logf("stack %+v", r.st.Stats())
	if ls.RxPackets == 0 || r.st.Stats().SegmentsReceived == 0 || ps.RxPackets < ls.RxPackets {
		t.Fatalf("the port did not carry both: port %+v, link %+v", ps, ls)
	}
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}
	// the stack keeps working on the port after the RoCE link left
	kl2 := r.kernelListen(t, false)
	done2 := echo(kl2)
	c, err := r.st.DialContext(ctx, "tcp", kl2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, []byte("still here"))
	c.Close()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
}

var errDiffer = &net.OpError{Op: "echo", Err: net.UnknownNetworkError("echoed bytes differ")}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
