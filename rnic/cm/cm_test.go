package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

var networks = []string{IWARP, RoCEv2}

// node is one side of a test: a device, a transport and a QP with its CQ and memory.
type node struct {
	dev *rnic.Device
	tr  *Transport
	pd  *rnic.PD
	cq  *rnic.CQ
	qp  *rnic.QP
	mr  *rnic.MR
	buf []byte
}

// newNode opens a device and a transport on network. RoCEv2 nodes share an in-memory
// network (net), one link per IP, so tests need no UDP port of the machine.
func newNode(t *testing.T, network string, mem *rocev2.MemNet, ip string) *node {
	t.Helper()
	var o Options
	if network == RoCEv2 {
		link, err := mem.NewLink(netip.AddrPortFrom(netip.MustParseAddr(ip), 4791), rocev2.Faults{})
		if err != nil {
			t.Fatal(err)
		}
		o.Link = link
	}
	return newNodeWith(t, network, ip, &o)
}

// newNodeWith opens a device and a transport with options o.
func newNodeWith(t *testing.T, network, ip string, o *Options) *node {
	t.Helper()
	dev, err := rnic.Open(rnic.Config{LocalAddr: ip})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	tr, err := Open(dev, network, ip, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	n := &node{dev: dev, tr: tr, buf: make([]byte, 1<<16)}
	n.pd, _ = dev.AllocPD()
	n.cq, _ = dev.CreateCQ(64)
	n.newQP(t)
	n.mr, err = n.pd.RegMR(n.buf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) newQP(t *testing.T) {
	qp, err := n.dev.CreateQP(n.pd, rnic.QPAttr{SendCQ: n.cq, RecvCQ: n.cq})
	if err != nil {
		t.Fatal(err)
	}
	n.qp = qp
}

func (n *node) wait(t *testing.T) rnic.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rnic.Completion
	if _, err := n.cq.Wait(ctx, wc[:]); err != nil {
		t.Fatal(err)
	}
	return wc[0]
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect runs Listen/Accept/Dial between srv and cli with private data both ways.
func connect(t *testing.T, srv, cli *node, reqPD, repPD []byte) (sc, cc *Conn) {
	t.Helper()
	ln, err := srv.tr.Listen(":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if ln.Network() != srv.tr.Network() {
		t.Fatalf("listener network %q", ln.Network())
	}
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx10(t))
		if err != nil {
			ch <- res{err: err}
			return
		}
		if !bytes.HasPrefix(r.PrivateData(), reqPD) { // RoCEv2: the whole fixed-size field
			ch <- res{err: errors.New("request private data " + string(r.PrivateData()))}
			return
		}
		c, err := r.Accept(srv.qp, Param{PrivateData: repPD})
		ch <- res{c, err}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	cc, err = cli.tr.Dial(ctx10(t), cli.qp, net.JoinHostPort(srv.tr.LocalIP().String(), port), Param{PrivateData: reqPD})
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.HasPrefix(cc.PrivateData(), repPD) {
		t.Fatalf("reply private data %q", cc.PrivateData())
	}
	return r.c, cc
}

// TestConnectTransfer: the same program connects, exchanges the server's buffer with a
// SEND, WRITEs and READs it one-sided, and disconnects, over either network.
func TestConnectTransfer(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			mem := rocev2.NewMemNet()
			srv, cli := newNode(t, network, mem, "127.0.0.1"), newNode(t, network, mem, "127.0.0.2")
			if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{srv.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			sc, cc := connect(t, srv, cli, []byte("hello"), []byte("welcome"))
			if sc.Network() != network || cc.QP() != cli.qp || sc.QP() != srv.qp {
				t.Fatal("conn identity")
			}
			if cc.IRD() <= 0 || cc.ORD() <= 0 || sc.IRD() <= 0 || sc.ORD() <= 0 {
				t.Fatal("depths", cc.IRD(), cc.ORD(), sc.IRD(), sc.ORD())
			}
			if iw := network == IWARP; iw != (cc.MULPDU() > 0) || iw != (sc.MULPDU() > 0) {
				t.Fatal("MULPDU", cc.MULPDU(), sc.MULPDU())
			}
			if cc.RemoteAddr() == nil || cc.LocalAddr() == nil || sc.RemoteAddr() == nil || sc.LocalAddr() == nil {
				t.Fatal("addresses")
			}
			// the server's region, advertised in a SEND
			adv := srv.mr.RemoteBuffer(4096, 4096).Append(cli.buf[:0])
			if err := cli.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cli.mr.SGE(0, len(adv))}}); err != nil {
				t.Fatal(err)
			}
			if c := cli.wait(t); c.Status != rnic.StatusSuccess || c.WRID != 2 {
				t.Fatalf("send %+v", c)
			}
			if c := srv.wait(t); c.Status != rnic.StatusSuccess || c.ByteLen != rnic.RemoteBufferLen {
				t.Fatalf("recv %+v", c)
			}
			rb, err := rnic.ParseRemoteBuffer(srv.buf)
			if err != nil {
				t.Fatal(err)
			}
			copy(cli.buf[8192:], bytes.Repeat([]byte("w"), 4096))
			if err := cli.qp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
				SGL: []rnic.SGE{cli.mr.SGE(8192, 4096)}, RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
				t.Fatal(err)
			}
			if c := cli.wait(t); c.Status != rnic.StatusSuccess {
				t.Fatalf("write %+v", c)
			}
			if err := cli.qp.PostSend(&rnic.SendWR{WRID: 4, Opcode: rnic.OpRead, Flags: rnic.Signaled,
				SGL: []rnic.SGE{cli.mr.SGE(16384, 4096)}, RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
				t.Fatal(err)
			}
			if c := cli.wait(t); c.Status != rnic.StatusSuccess || c.ByteLen != 4096 {
				t.Fatalf("read %+v", c)
			}
			if !bytes.Equal(cli.buf[16384:20480], bytes.Repeat([]byte("w"), 4096)) {
				t.Fatal("data read back")
			}
			if err := cc.Disconnect(ctx10(t)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sc.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the server's connection did not end")
			}
			if cli.qp.State() != rnic.QPError {
				t.Fatal(cli.qp.State())
			}
			// the server's transport has stopped: its memory is the test's to read
			if !bytes.Equal(srv.buf[4096:8192], bytes.Repeat([]byte("w"), 4096)) {
				t.Fatal("data written")
			}
		})
	}
}

func TestReject(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			mem := rocev2.NewMemNet()
			srv, cli := newNode(t, network, mem, "127.0.0.1"), newNode(t, network, mem, "127.0.0.2")
			ln, err := srv.tr.Listen(":0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if r, err := ln.Accept(ctx10(t)); err == nil {
					_ = r.Reject([]byte("go away"))
					if err := r.Reject(nil); !errors.Is(err, ErrAnswered) {
						t.Error("second answer:", err)
					}
				}
			}()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			_, err = cli.tr.Dial(ctx10(t), cli.qp, net.JoinHostPort("127.0.0.1", port), Param{})
			var rej *RejectError
			if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
				t.Fatalf("%v", err)
			}
			if rej.Unwrap() == nil {
				t.Fatal("reject without the transport's error")
			}
			// the QP may dial again
			if cli.qp.State() != rnic.QPIdle {
				t.Fatal(cli.qp.State())
			}
		})
	}
}

func TestRefusedAndClosed(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			mem := rocev2.NewMemNet()
			srv, cli := newNode(t, network, mem, "127.0.0.1"), newNode(t, network, mem, "127.0.0.2")
			ln, err := srv.tr.Listen(":0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			_ = ln.Close()
			if _, err := ln.Accept(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatal("accept after close:", err)
			}
			_, port, _ := net.SplitHostPort(addr)
			_, err = cli.tr.Dial(ctx10(t), cli.qp, net.JoinHostPort("127.0.0.1", port), Param{})
			if !errors.Is(err, ErrRefused) {
				t.Fatal("dial to a closed port:", err)
			}
			if network == IWARP && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatal("cause lost:", err)
			}
			_ = srv.tr.Close()
			if _, err := srv.tr.Listen(":0"); !errors.Is(err, ErrClosed) {
				t.Fatal("listen after close:", err)
			}
			if _, err := cli.tr.Dial(ctx10(t), cli.qp, "127.0.0.1:1", Param{PrivateData: make([]byte, 4096)}); !errors.Is(err, ErrPrivateDataTooLong) {
				t.Fatal(err)
			}
		})
	}
}

// TestErrorsReachSyscall: a port in use is EADDRINUSE through every layer.
func TestErrorsReachSyscall(t *testing.T) {
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	// a UDP port below 0xC000 (RoCEv2 links may not bind the entropy range), taken
	var pc net.PacketConn
	for i := 0; pc == nil && i < 100; i++ {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal("no UDP on loopback:", err)
		}
		if c.LocalAddr().(*net.UDPAddr).Port < 0xC000 {
			pc = c
		} else {
			defer c.Close()
		}
	}
	if pc == nil {
		t.Fatal("no UDP port below 0xC000 in 100 tries")
	}
	defer pc.Close()
	_, err := Open(dev, RoCEv2, pc.LocalAddr().String(), nil)
	var op *OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &op) || op.Op != "open" {
		t.Fatal(err)
	}
	tl, _ := net.Listen("tcp4", "127.0.0.1:0")
	defer tl.Close()
	tr, err := Open(dev, IWARP, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Listen(tl.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatal(err)
	}
	if _, err := Open(dev, "ib", "", nil); !errors.Is(err, ErrUnknownNetwork) {
		t.Fatal(err)
	}
	if _, err := Open(dev, IWARP, "not-an-ip", nil); !errors.Is(err, ErrBadAddress) {
		t.Fatal(err)
	}
}

// TestClassify: transport connect errors get their category and keep their cause.
func TestClassify(t *testing.T) {
	bg := context.Background()
	for _, c := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), ErrRefused},
		{fmt.Errorf("dial: %w", syscall.EHOSTUNREACH), ErrUnreachable},
		{fmt.Errorf("dial: %w", syscall.ENETUNREACH), ErrUnreachable},
		{&net.AddrError{Err: "no suitable address found"}, ErrUnreachable},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), ErrTimeout},
		{rocev2.ErrCMTimeout, ErrTimeout},
		{&rocev2.RejectError{Reason: roce.RejInvalidServiceID}, ErrRefused},
	} {
		got := classify(bg, c.err)
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("%v -> %v, want %v", c.err, got, c.want)
		}
	}
	var rej *RejectError
	if err := classify(bg, &iwarp.RejectError{PrivateData: []byte("no")}); !errors.As(err, &rej) || string(rej.PrivateData) != "no" {
		t.Error(err)
	}
	if err := classify(bg, &rocev2.RejectError{Reason: roce.RejConsumerDefined, PrivateData: []byte("no")}); !errors.As(err, &rej) {
		t.Error(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := classify(ctx, ctx.Err()); err != context.Canceled {
		t.Error("a cancelled dial is the context's error:", err)
	}
}

// TestGracefulDisconnectFinishesSends: sends posted before a graceful disconnect are sent
// and complete successfully (RFC 5040 §5.4 / uDAPL §6.6.17); only then does the
// connection close. The iWARP sender once took a disconnect seen before its first
// transmission for "close now" and flushed them.
func TestGracefulDisconnectFinishesSends(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			for round := 0; round < 20; round++ {
				mem := rocev2.NewMemNet()
				srv, cli := newNode(t, network, mem, "127.0.0.1"), newNode(t, network, mem, "127.0.0.2")
				const n = 8
				for i := 0; i < n; i++ {
					_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{srv.mr.SGE(0, 64)}})
				}
				_, cc := connect(t, srv, cli, nil, nil)
				for i := 0; i < n; i++ {
					if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled,
						SGL: []rnic.SGE{cli.mr.SGE(0, 8)}}); err != nil {
						t.Fatal(err)
					}
				}
				if err := cc.Disconnect(ctx10(t)); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					if c := cli.wait(t); c.Status != rnic.StatusSuccess || c.WRID != uint64(i) {
						t.Fatalf("round %d: send %d completed %+v", round, i, c)
					}
				}
			}
		})
	}
}
