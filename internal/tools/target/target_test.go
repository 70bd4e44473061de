package target

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// startTarget runs the target until the test ends; it returns the address to dial and the
// advertisement it printed.
func startTarget(t *testing.T, o Options) (string, rnic.RemoteBuffer, func() string) {
	t.Helper()
	type up struct {
		a   net.Addr
		adv rnic.RemoteBuffer
	}
	ch := make(chan up, 1)
	o.Listening = func(a net.Addr, adv rnic.RemoteBuffer) { ch <- up{a, adv} }
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o, &out) }()
	stop := func() string {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("target: %v", err)
		}
		return out.String()
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	select {
	case u := <-ch:
		return u.a.String(), u.adv, stop
	case err := <-done:
		t.Fatalf("target ended: %v\n%s", err, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("target not listening")
	}
	return "", rnic.RemoteBuffer{}, nil
}

// peer is a client device with one QP per connection.
type peer struct {
	dev *rnic.Device
	t   *cm.Transport
	pd  *rnic.PD
	buf []byte
	mr  *rnic.MR
}

func newPeer(t *testing.T, network, local string) *peer {
	t.Helper()
	var o *cm.Options
	if network == cm.IWARP {
		o = &cm.Options{IWARP: tool.IWARPConfig(false)}
	}
	dev, tr, err := tool.Open(rnic.Config{}, network, local, o)
	if dev != nil {
		t.Cleanup(func() { dev.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	p := &peer{dev: dev, t: tr, buf: make([]byte, 2<<20)}
	p.pd, _ = dev.AllocPD()
	if p.mr, err = p.pd.RegMR(p.buf, rnic.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *peer) dial(ctx context.Context, addr string) (*cm.Conn, *rnic.CQ, error) {
	cq, _ := p.dev.CreateCQ(16)
	qp, err := p.dev.CreateQP(p.pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, SignalAll: true})
	if err != nil {
		return nil, nil, err
	}
	c, err := p.t.Dial(ctx, qp, addr, cm.Param{ORD: 4})
	if err != nil {
		_ = qp.Destroy()
		return nil, nil, err
	}
	return c, cq, nil
}

// writeRead WRITEs a pattern at off in the target and READs it back.
func (p *peer) writeRead(ctx context.Context, c *cm.Conn, cq *rnic.CQ, adv rnic.RemoteBuffer, off, n int, seed byte) error {
	half := len(p.buf) / 2
	for i := range n {
		p.buf[i] = byte(i*13) ^ seed
	}
	clear(p.buf[half : half+n])
	wc := make([]rnic.Completion, 1)
	for _, op := range []rnic.Opcode{rnic.OpWrite, rnic.OpRead} {
		sge := p.mr.SGE(0, n)
		if op == rnic.OpRead {
			sge = p.mr.SGE(half, n)
		}
		if err := c.QP().PostSend(&rnic.SendWR{Opcode: op, SGL: []rnic.SGE{sge}, RemoteAddr: adv.Addr + uint64(off), RKey: adv.RKey}); err != nil {
			return err
		}
		if _, err := cq.Wait(ctx, wc); err != nil {
			return err
		}
		if wc[0].Status != rnic.StatusSuccess {
			return fmt.Errorf("%v: %v", op, wc[0].Status)
		}
	}
	if !bytes.Equal(p.buf[:n], p.buf[half:half+n]) {
		return fmt.Errorf("read back differs from what was written at %d", off)
	}
	return nil
}

// TestTarget: over iWARP and RoCEv2 (in-process), peers connect, find the region in
// the accept's private data, WRITE and READ it back; the connection past --max-conns is
// refused; the end line counts them.
func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		network string
		o       Options
	}{
		{cm.IWARP, Options{Addr: "127.0.0.1", MiB: 2, MaxConns: 2}},
		{cm.RoCEv2, Options{Addr: "127.0.0.1:0", RoCE: true, MiB: 2, MaxConns: 2}},
	} {
		t.Run(tc.network, func(t *testing.T) {
			addr, adv, stop := startTarget(t, tc.o)
			if adv.Len != 2<<20 {
				t.Fatalf("advertised %+v", adv)
			}
			p := newPeer(t, tc.network, "127.0.0.2")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var conns []*cm.Conn
			for i := range 2 {
				c, cq, err := p.dial(ctx, addr)
				if err != nil {
					t.Fatalf("dial %s: %v", addr, err)
				}
				conns = append(conns, c)
				got, err := rnic.ParseRemoteBuffer(c.PrivateData())
				if err != nil || got != adv {
					t.Fatalf("private data %x (%v), want the advertisement %+v", c.PrivateData(), err, adv)
				}
				if err := p.writeRead(ctx, c, cq, adv, i<<20, 64<<10, byte(i)); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := p.dial(ctx, addr); err == nil {
				t.Fatal("a third connection accepted with --max-conns 2")
			}
			// a connection that ends frees its place
			if err := conns[0].Disconnect(ctx); err != nil {
				t.Fatal(err)
			}
			var c *cm.Conn
			var cq *rnic.CQ
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; {
				if c, cq, err = p.dial(ctx, addr); err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("after a disconnect: %v", err)
			}
			if err := p.writeRead(ctx, c, cq, adv, 4096, 4096, 9); err != nil {
				t.Fatal(err)
			}
			out := stop()
			t.Logf("%s", out)
			if !strings.Contains(out, "target: 3 connections served, ") || strings.Contains(out, " 0 refused") {
				t.Fatalf("output:\n%s", out)
			}
		})
	}
}
