package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/broker"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
)

// daemon is a broker with the daemon's own endpoint receiving on its link, as the
// softrnic daemon runs it.
type daemon struct {
	b    *broker.Broker
	dev  *rnic.Device
	ep   *rocev2.Endpoint
	sock string
}

func startDaemon(t *testing.T, mode steer.Mode) *daemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "t0.sock")
	b, err := broker.New(broker.Config{Name: "t0", Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: attach.Path(sock), Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	if mode == steer.ModeAuto && b.Mode() != steer.ModeBPF {
		t.Logf("BPF steering not permitted here (%v): testing the relay", b.Mode())
	}
	dev, err := rnic.Open(rnic.Config{Name: "t0", LocalAddr: "127.0.0.1", QPNumbers: b.QPNumbers()})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{b: b, dev: dev, ep: rocev2.NewEndpoint(dev, b.Link(), nil), sock: sock}
	t.Cleanup(func() { d.stop() })
	return d
}

// opts attach to the test daemon; its port is not 4791, so peers are told where to
// answer (rocev2.Config.PeerPort): the A17 rule would answer a source port in the
// ephemeral range on 4791.
func (d *daemon) opts() *host.Options {
	return &host.Options{Socket: d.sock, RoCE: &rocev2.Config{PeerPort: d.b.Addr().Port()}}
}

func (d *daemon) stop() {
	d.ep.Close()
	d.dev.Close()
	d.b.Close()
}

// res is one side's verbs resources.
type res struct {
	d   *host.Device
	pd  *rnic.PD
	cq  *rnic.CQ
	qp  *rnic.QP
	mr  *rnic.MR
	buf []byte
}

func newRes(t *testing.T, d *host.Device) *res {
	t.Helper()
	r := &res{d: d, buf: make([]byte, 1<<16)}
	var err error
	r.pd, _ = d.RNIC().AllocPD()
	r.cq, _ = d.RNIC().CreateCQ(256)
	if r.qp, err = d.RNIC().CreateQP(r.pd, rnic.QPAttr{SendCQ: r.cq, RecvCQ: r.cq}); err != nil {
		t.Fatal(err)
	}
	if r.mr, err = r.pd.RegMR(r.buf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return r
}

func waitWC(t *testing.T, cq *rnic.CQ) rnic.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]rnic.Completion, 1)
	if _, err := cq.Wait(ctx, wc); err != nil {
		t.Fatalf("completion: %v", err)
	}
	return wc[0]
}

// connectPair connects a's QP to a listener of b's on port through the daemon's CM.
func connectPair(t *testing.T, a, b *res, port int) (*cm.Conn, *cm.Conn) {
	t.Helper()
	ln, err := b.d.Transport().Listen(fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acc := make(chan *cm.Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			acc <- nil
			return
		}
		c, err := req.Accept(b.qp, cm.Param{PrivateData: []byte("ok")})
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	addr := fmt.Sprintf("%s:%d@%d", b.d.Addr().Addr(), port, b.d.Addr().Port())
	ca, err := a.d.Transport().Dial(ctx, a.qp, addr, cm.Param{PrivateData: []byte("hi")})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	cb := <-acc
	if cb == nil {
		t.FailNow()
	}
	return ca, cb
}

// TestAttachedProcesses: two devices attached to one daemon's device share its RoCEv2
// address; one connects to the other through the daemon's CM routing; a WRITE and a
// SEND cross with their bytes checked; both QPs are numbered by the daemon and listed
// by it; a second listener on a claimed port is refused with EADDRINUSE; closing one
// device disconnects the other's QP and frees its numbers. Run with BPF steering
// (where permitted) and with the relay.
func TestAttachedProcesses(t *testing.T) {
	for _, mode := range []steer.Mode{steer.ModeAuto, steer.ModeRelay} {
		t.Run(mode.String(), func(t *testing.T) {
			dm := startDaemon(t, mode)
			open := func() *host.Device {
				d, err := host.Open("t0", dm.opts())
				if err != nil {
					t.Fatal(err)
				}
				if !d.Attached() || d.Addr() != dm.b.Addr() {
					t.Fatalf("device attached %v at %v, want the daemon's %v", d.Attached(), d.Addr(), dm.b.Addr())
				}
				return d
			}
			da, db := open(), open()
			defer db.Close()
			a, b := newRes(t, da), newRes(t, db)
			ca, cb := connectPair(t, a, b, 7001)
			if !bytes.HasPrefix(ca.PrivateData(), []byte("ok")) || !bytes.HasPrefix(cb.PrivateData(), []byte("hi")) {
				t.Fatalf("private data %q / %q", ca.PrivateData(), cb.PrivateData())
			}
			lb, err := db.Transport().Listen(":7101")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := da.Transport().Listen(":7101"); !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("a second process listening on a claimed port: %v", err)
			}
			lb.Close()
			la, err := da.Transport().Listen(":7101") // released: free again
			if err != nil {
				t.Fatalf("listening on a released port: %v", err)
			}
			la.Close()
			// WRITE a→b, then SEND a→b
			for i := range a.buf {
				a.buf[i] = byte(i*13 + 1)
			}
			if err := b.qp.PostRecv(&rnic.RecvWR{WRID: 9, SGL: []rnic.SGE{b.mr.SGE(32768, 4096)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
				SGL: []rnic.SGE{a.mr.SGE(0, 20000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, a.cq); wc.Status != rnic.StatusSuccess {
				st, _ := dm.b.Steering()
				for _, r := range []*res{a, b} {
					e := r.d.Transport().Endpoint()
					t.Logf("ep %v: rxdrop %d icrc %d wrongsrc %d solved %d", e.LocalAddr(), e.RxDropped.Load(), e.ICRCErrors.Load(), e.RxWrongSource.Load(), e.ICRCIDSolved.Load())
				}
				t.Fatalf("WRITE: %+v; steering %+v", wc, st)
			}
			if err := a.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled,
				SGL: []rnic.SGE{a.mr.SGE(20000, 4096)}}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, b.cq); wc.Status != rnic.StatusSuccess || wc.ByteLen != 4096 {
				t.Fatalf("SEND received: %+v", wc)
			}
			waitWC(t, a.cq)
			if !bytes.Equal(b.buf[:20000], a.buf[:20000]) || !bytes.Equal(b.buf[32768:32768+4096], a.buf[20000:24096]) {
				t.Fatal("bytes differ after WRITE and SEND")
			}
			qps := dm.b.ListQPs(context.Background())
			found := map[uint32]broker.ProcessQP{}
			for _, q := range qps {
				found[q.QPN] = q
			}
			for _, q := range []*rnic.QP{a.qp, b.qp} {
				e, ok := found[q.Num()]
				if !ok || e.State != "RTS" || e.Transport != "rocev2" || e.Peer == "" || e.TxBytes+e.RxBytes == 0 {
					t.Fatalf("daemon's list lacks QP %d in RTS with a peer and traffic: %+v", q.Num(), qps)
				}
			}
			// a's device closes (its CM disconnects); b's QP leaves RTS, a's numbers are freed
			if err := da.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-b.qp.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("b's QP still %v after a's device closed", b.qp.State())
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(dm.b.Processes()) != 1 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if ps := dm.b.Processes(); len(ps) != 1 || ps[0].QPs != 1 {
				t.Fatalf("processes after one detached: %+v", ps)
			}
		})
	}
}

// TestDaemonGone: when the daemon goes away, an attached device fails: Done closes, its
// connected QP leaves RTS, and creating a QP returns an error instead of hanging.
func TestDaemonGone(t *testing.T) {
	dm := startDaemon(t, steer.ModeAuto)
	da, err := host.Open("t0", dm.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := host.Open("t0", dm.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, b := newRes(t, da), newRes(t, db)
	connectPair(t, a, b, 7002)
	dm.stop()
	select {
	case <-da.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("device not failed after the daemon went")
	}
	if !errors.Is(da.Err(), host.ErrDaemonGone) {
		t.Fatalf("Err = %v", da.Err())
	}
	select {
	case <-a.qp.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("QP still %v after the daemon went", a.qp.State())
	}
	if _, err := da.RNIC().CreateQP(a.pd, rnic.QPAttr{SendCQ: a.cq, RecvCQ: a.cq}); !errors.Is(err, host.ErrDaemonGone) {
		t.Fatalf("CreateQP without a daemon: %v", err)
	}
}

// TestOpenWithoutDaemon: Open fails with ErrNoDaemon (wrapping the socket's error)
// unless Options.Local asks for an in-process device.
func TestOpenWithoutDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	if _, err := host.Open("none", &host.Options{Socket: sock}); !errors.Is(err, host.ErrNoDaemon) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Open without a daemon: %v", err)
	}
	d, err := host.Open("none", &host.Options{Socket: sock, Local: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Attached() || d.Steering() != "in-process" || !d.Addr().Addr().IsLoopback() {
		t.Fatalf("in-process device: attached %v steering %q addr %v", d.Attached(), d.Steering(), d.Addr())
	}
}
