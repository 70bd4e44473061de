package rocev2

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// Tests of issue 10: what a hostile or broken peer can make an endpoint do.

// rogue is a peer that speaks raw packets on a MemNet link; a goroutine collects
// the CM MADs it receives.
type rogue struct {
	link *MemLink
	mads chan any
}

func newRogue(t testing.TB, n *MemNet, addr netip.AddrPort) *rogue {
	t.Helper()
	l, err := n.NewLink(addr, Faults{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rogue{link: l, mads: make(chan any, 1<<16)}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		bufs, size, from := make([][]byte, l.BatchSize()), make([]int, l.BatchSize()), make([]netip.AddrPort, l.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, MaxPacket)
		}
		for {
			n, err := l.Recv(bufs, size, from)
			if err != nil {
				return
			}
			for i := range n {
				if m := parseCM(bufs[i][:size[i]]); m != nil {
					r.mads <- m
				}
			}
		}
	}()
	return r
}

// parseCM returns the CM message in a packet to QP1 (REP, REJ, MRA, DREQ, DREP), or nil.
func parseCM(b []byte) any {
	p, err := roce.ParsePacket(b)
	if err != nil || p.BTH.DestQP() != 1 {
		return nil
	}
	h, data, err := roce.ParseMAD(p.Payload)
	if err != nil {
		return nil
	}
	switch h.AttrID {
	case roce.AttrREQ:
		m, _ := roce.ParseREQ(data)
		return m
	case roce.AttrREP:
		m, _ := roce.ParseREP(data)
		return m
	case roce.AttrREJ:
		m, _ := roce.ParseREJ(data)
		return m
	case roce.AttrDREQ:
		m, _ := roce.ParseDREQ(data)
		return m
	case roce.AttrDREP:
		m, _ := roce.ParseDREP(data)
		return m
	case roce.AttrMRA:
		m, _ := roce.ParseMRA(data)
		return m
	}
	return nil
}

// mad sends a CM MAD to QP1 at dst.
func (r *rogue) mad(dst netip.AddrPort, tid uint64, m roce.CMMessage) {
	mad := roce.AppendCMMAD(nil, tid, m)
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, QKey: roce.GSIQKey, SrcQP: 1}
	b := append(h.Append(nil, len(mad)), mad...)
	_ = r.link.Send([][]byte{finish(b, len(mad), r.link.LocalAddr(), dst)}, dst)
}

// next returns the next MAD received within d, or nil.
func (r *rogue) next(d time.Duration) any {
	select {
	case m := <-r.mads:
		return m
	case <-time.After(d):
		return nil
	}
}

// all returns the MADs received within d.
func (r *rogue) all(d time.Duration) (out []any) {
	deadline := time.After(d)
	for {
		select {
		case m := <-r.mads:
			out = append(out, m)
		case <-deadline:
			return out
		}
	}
}

// req returns an RDMA-CM REQ for port from a QP number.
func rogueREQ(src, dst netip.Addr, port uint16, commID, qpn uint32) *roce.REQ {
	m := &roce.REQ{LocalCommID: commID, ServiceID: roce.ServiceID(roce.PortSpaceTCP, port), LocalQPN: qpn,
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 14, TransportType: roce.CMTransportRC,
		StartingPSN: 1, LocalCMResponseTimeout: 14, RetryCount: 7, PKey: 0xFFFF, PathMTU: roce.MTU1024, RNRRetryCount: 7,
		MaxCMRetries: 15}
	cma := roce.NewCMAHeader(src, dst, 40000)
	copy(m.PrivateData[:], cma.Append(nil))
	return m
}

// TestRoCEIdleAcceptedConnsBounded (issue 10 item 2): 1,000 REQ+RTU pairs from a
// peer that then stays silent, against an application that accepts every request
// with a new QP, leave no permanent QPs: at most MaxConns are alive at once (the
// rest refused with REJ "no resources" and counted), and each accepted one ends
// after the first-message timeout (counted), after which the application destroys
// its QP.
func TestRoCEIdleAcceptedConnsBounded(t *testing.T) {
	const pairs, maxConns = 1000, 64
	n := NewMemNet()
	o := &pairOpts{noConnect: true}
	srv := newSide(t, n, srvAddr, Faults{}, o)
	t.Cleanup(func() { srv.ep.Close(); srv.dev.Close() })
	atk := newRogue(t, n, netip.MustParseAddrPort("10.0.0.66:4791"))
	cm := &CMConfig{MaxConns: maxConns, FirstMessageTimeout: 500 * time.Millisecond, ResponseTimeout: 18}
	l, err := Listen(srv.ep, ":7174", cm)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var live, peak, accepted atomic.Int64
	var wg sync.WaitGroup
	go func() { // the application: accept everything, destroy QPs that end
		for {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			qp, err := srv.dev.CreateQP(srv.pd, rnic.QPAttr{SendCQ: srv.scq, RecvCQ: srv.rcq})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := r.Accept(qp, ConnParam{}); err != nil {
				_ = qp.Destroy()
				continue
			}
			accepted.Add(1)
			if v := live.Add(1); v > peak.Load() {
				peak.Store(v)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-qp.Done()
				_ = qp.Destroy()
				live.Add(-1)
			}()
		}
	}()
	g0 := runtime.NumGoroutine()
	dst := srvAddr
	rejects := 0
	for i := range pairs {
		atk.mad(dst, uint64(i), rogueREQ(atk.link.LocalAddr().Addr(), dst.Addr(), 7174, uint32(1000+i), uint32(100+i)))
		switch m := atk.next(5 * time.Second).(type) {
		case roce.REP:
			atk.mad(dst, uint64(i), &roce.RTU{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		case roce.REJ:
			if m.Reason != roce.RejNoResources {
				t.Fatalf("REJ %v", m.Reason)
			}
			rejects++
		default:
			t.Fatalf("REQ %d: answered with %T", i, m)
		}
	}
	t.Logf("%d accepted, %d rejected (REJ no resources, CMRejectedLimit %d), peak %d alive; goroutines %d at the start of the flood",
		accepted.Load(), rejects, srv.ep.CMRejectedLimit.Load(), peak.Load(), g0)
	if peak.Load() > maxConns {
		t.Fatalf("%d connections alive at once, limit %d", peak.Load(), maxConns)
	}
	if accepted.Load() == 0 || srv.ep.CMRejectedLimit.Load() == 0 && accepted.Load() < pairs {
		t.Fatalf("accepted %d, limit rejections %d", accepted.Load(), srv.ep.CMRejectedLimit.Load())
	}
	// Every accepted connection ends after the first-message timeout.
	deadline := time.Now().Add(10 * time.Second)
	for live.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := live.Load(); v != 0 {
		t.Fatalf("%d idle connections still alive", v)
	}
	if got := srv.ep.FirstMessageTimeouts.Load(); got != uint64(accepted.Load()) {
		t.Fatalf("FirstMessageTimeouts %d, accepted %d", got, accepted.Load())
	}
	wg.Wait()
	if nq := len(srv.dev.QPs()); nq != 1 { // the side's own QP
		t.Fatalf("%d QPs left", nq)
	}
}

// TestRoCEPendingRequestsBounded (issue 10 item 2): requests the application does
// not answer are bounded by the listener's Backlog (the rest refused with REJ "no
// resources") and rejected with REJ "timeout" after AcceptTimeout.
func TestRoCEPendingRequestsBounded(t *testing.T) {
	const backlog = 8
	n := NewMemNet()
	srv := newSide(t, n, srvAddr, Faults{}, &pairOpts{noConnect: true})
	t.Cleanup(func() { srv.ep.Close(); srv.dev.Close() })
	atk := newRogue(t, n, netip.MustParseAddrPort("10.0.0.66:4791"))
	l, err := Listen(srv.ep, ":7174", &CMConfig{Backlog: backlog, AcceptTimeout: 150 * time.Millisecond, ResponseTimeout: 14})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 3 * backlog {
		atk.mad(srvAddr, uint64(i), rogueREQ(atk.link.LocalAddr().Addr(), srvAddr.Addr(), 7174, uint32(1000+i), uint32(100+i)))
	}
	var noRes, timeouts int
	for range 3 * backlog {
		if m, ok := atk.next(5 * time.Second).(roce.REJ); ok {
			switch m.Reason {
			case roce.RejNoResources:
				noRes++
			case roce.RejTimeout:
				timeouts++
			}
		}
	}
	if noRes != 2*backlog || timeouts != backlog || srv.ep.CMRejectedLimit.Load() != 2*backlog || srv.ep.AcceptTimeouts.Load() != backlog {
		t.Fatalf("REJ no-resources %d, timeout %d; counters %d, %d", noRes, timeouts, srv.ep.CMRejectedLimit.Load(), srv.ep.AcceptTimeouts.Load())
	}
	// The expired requests are not handed out any more.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if r, err := l.Accept(ctx); err == nil {
		t.Fatalf("expired request handed out: %+v", r.RemoteAddr())
	}
	cmIdle(t, srv)
}

// TestRCPacketsFromOtherAddressesDropped (issue 10 item 4): an RC WRITE with the
// right QPN, PSN and R_Key from another IP, or from the peer's IP but another
// softrnic port, is dropped and counted; from the peer's IP and a flow-entropy
// source port (as rxe sends to a peer listening on 4791) it is taken.
func TestRCPacketsFromOtherAddressesDropped(t *testing.T) {
	cli, srv := newPair(t, nil)
	rmr, rbuf := srv.reg(t, 64, allAccess)
	write := func(psn roce.PSN, from netip.AddrPort, val byte) {
		h := roce.Header{Opcode: roce.RCWriteOnly, PKey: roce.DefaultPKey, DestQP: srv.qp.Num(), AckReq: true, PSN: psn,
			VA: rmr.Addr(), RKey: rmr.RKey(), DMALen: 8}
		pl := bytes.Repeat([]byte{val}, 8)
		b := finish(append(h.Append(nil, 8), pl...), 8, from, srvAddr)
		r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
		srv.ep.input(r, b, from, srvAddr)
		srv.ep.endBatch(r)
	}
	const psn = 0xFFFFF0 // the server's expected PSN (connect in helpers_test.go)
	for _, from := range []string{"10.0.0.66:4791", "10.0.0.1:4792"} {
		write(psn, netip.MustParseAddrPort(from), 0xEE)
	}
	if rbuf[0] != 0 || srv.ep.RxWrongSource.Load() != 2 || srv.qp.Counters().RxSegments.Load() != 0 {
		t.Fatalf("memory %x, RxWrongSource %d, taken %d", rbuf[:8], srv.ep.RxWrongSource.Load(), srv.qp.Counters().RxSegments.Load())
	}
	// The peer is at 4791: it may send from any flow-entropy port.
	write(psn, netip.MustParseAddrPort("10.0.0.1:49999"), 0xAB)
	if srv.qp.Counters().RxSegments.Load() != 1 || srv.ep.RxWrongSource.Load() != 2 {
		t.Fatalf("the packet from the peer's entropy port: taken %d", srv.qp.Counters().RxSegments.Load())
	}
	_ = cli
}

// TestCMMADChecks (issue 10 item 5): a DREQ is honoured only with both comm IDs
// right, from the peer's address and naming our QP; the others are dropped and
// counted, and the connection stays up.
func TestCMMADChecks(t *testing.T) {
	cli, srv, res, err := cmPair(t, nil, acceptWith(""))
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	// Find the server's view of the connection.
	a := srv.ep.cma
	a.mu.Lock()
	var c *cmConn
	for _, x := range a.byLocal {
		c = x
	}
	a.mu.Unlock()
	inject := func(from netip.AddrPort, m roce.CMMessage) {
		mad := roce.AppendCMMAD(nil, 1, m)
		h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, QKey: roce.GSIQKey, SrcQP: 1}
		b := finish(append(h.Append(nil, len(mad)), mad...), len(mad), from, srvAddr)
		r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
		srv.ep.input(r, b, from, srvAddr)
	}
	other := netip.MustParseAddrPort("10.0.0.66:4791")
	bad := []struct {
		name string
		from netip.AddrPort
		m    roce.CMMessage
	}{
		{"wrong sender comm ID", cliAddr, &roce.DREQ{LocalCommID: c.remoteID + 1, RemoteCommID: c.localID, RemoteQPN: srv.qp.Num()}},
		{"another address", other, &roce.DREQ{LocalCommID: c.remoteID, RemoteCommID: c.localID, RemoteQPN: srv.qp.Num()}},
		{"the peer's IP, another port", netip.AddrPortFrom(cliAddr.Addr(), 5000), &roce.DREQ{LocalCommID: c.remoteID, RemoteCommID: c.localID, RemoteQPN: srv.qp.Num()}},
		{"another QP", cliAddr, &roce.DREQ{LocalCommID: c.remoteID, RemoteCommID: c.localID, RemoteQPN: srv.qp.Num() + 1}},
		{"REJ with a wrong comm ID", cliAddr, &roce.REJ{LocalCommID: c.remoteID + 1, RemoteCommID: c.localID, Reason: roce.RejTimeout}},
		{"REJ from another address", other, &roce.REJ{LocalCommID: c.remoteID, RemoteCommID: c.localID, Reason: roce.RejTimeout}},
	}
	for i, b := range bad {
		inject(b.from, b.m)
		if got := srv.ep.CMDropped.Load(); got != uint64(i+1) {
			t.Fatalf("%s: CMDropped %d, want %d", b.name, got, i+1)
		}
		if st := srv.qp.State(); st != rnic.QPRTS {
			t.Fatalf("%s: server QP %v", b.name, st)
		}
	}
	// The connection still works.
	smr, _ := cli.reg(t, 8, allAccess)
	rmr, _ := srv.reg(t, 8, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 8)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 8)}})
	if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	// The right DREQ ends it.
	inject(cliAddr, &roce.DREQ{LocalCommID: c.remoteID, RemoteCommID: c.localID, RemoteQPN: srv.qp.Num()})
	select {
	case <-srv.qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's DREQ did not end the connection")
	}
	if !errors.Is(srv.conn.Err(), ErrPeerDisconnected) {
		t.Fatal(srv.conn.Err())
	}
}

// TestDuplicateReadMustMatch (issue 10 item 6): READ requests with old PSNs that
// were never READs are not executed (counted); a true duplicate of a READ is
// re-executed, but only for a subset of its bytes through its R_Key.
func TestDuplicateReadMustMatch(t *testing.T) {
	cli, srv := newPair(t, nil)
	const big = 1 << 20
	rmr, rbuf := srv.reg(t, big, allAccess)
	fill(rbuf, 5)
	smr, _ := cli.reg(t, 64, allAccess)
	lmr, _ := cli.reg(t, 4096, allAccess)
	// 16 SENDs (PSNs 0xFFFFF0..0xFFFFFF), then a READ of 4096 bytes (4 PSNs from 0).
	for i := range 16 {
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(0, 64)}})
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, SGL: []rnic.SGE{smr.SGE(0, 8)}})
	}
	post(t, cli.qp, &rnic.SendWR{WRID: 99, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{lmr.SGE(0, 4096)},
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	wait(t, srv.rcq, 16)
	sent := func() uint64 { return srv.qp.Counters().TxBytes.Load() }
	read := func(psn roce.PSN, va uint64, n uint32, rkey uint32) {
		h := roce.Header{Opcode: roce.RCReadRequest, PKey: roce.DefaultPKey, DestQP: srv.qp.Num(), PSN: psn, VA: va, RKey: rkey, DMALen: n}
		b := finish(h.Append(nil, 0), 0, cliAddr, srvAddr)
		r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
		srv.ep.input(r, b, cliAddr, srvAddr)
		srv.ep.endBatch(r)
	}
	settle := func() { // the server's goroutine streams what was queued
		deadline := time.Now().Add(2 * time.Second)
		prev := sent()
		for time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			if s := sent(); s == prev {
				return
			} else {
				prev = s
			}
		}
	}
	settle()
	before := sent()
	// 16 "duplicate" READs of 1 MiB at the PSNs of the SENDs: none executes.
	for i := range 16 {
		read(roce.PSN(0xFFFFF0+i), rmr.Addr(), big, rmr.RKey())
	}
	settle()
	if got := sent() - before; got != 0 || srv.ep.DupReadsDropped.Load() != 16 {
		t.Fatalf("%d response bytes for READs that never were; DupReadsDropped %d", got, srv.ep.DupReadsDropped.Load())
	}
	// A duplicate of the real READ that asks for more than it did: dropped.
	read(0, rmr.Addr(), big, rmr.RKey())
	settle()
	if got := sent() - before; got != 0 || srv.ep.DupReadsDropped.Load() != 17 {
		t.Fatalf("oversized duplicate: %d bytes", got)
	}
	// The real duplicate (its response lost, say): re-executed from its PSN.
	read(2, rmr.Addr()+2048, 2048, rmr.RKey())
	settle()
	if got := sent() - before; got != 2048 {
		t.Fatalf("true duplicate: %d response bytes, want 2048", got)
	}
}

// gateLink holds a link's sends while closed (the test decides when responses leave).
type gateLink struct {
	Link
	mu   sync.Mutex
	open *sync.Cond
	shut bool
}

func newGate(l Link) *gateLink {
	g := &gateLink{Link: l}
	g.open = sync.NewCond(&g.mu)
	return g
}

func (g *gateLink) set(shut bool) {
	g.mu.Lock()
	g.shut = shut
	g.mu.Unlock()
	g.open.Broadcast()
}

func (g *gateLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	g.mu.Lock()
	for g.shut {
		g.open.Wait()
	}
	g.mu.Unlock()
	return g.Link.Send(bufs, dst)
}

// TestIRDExceeded: a requester allowed 8 outstanding READs against a responder
// that accepts 1 (IRD): with the responder's first READ still streaming, the
// second is answered with NAK invalid request after the first's responses (rxe
// resp.c: more READs than max_dest_rd_atomic is an invalid request). The
// responder's sends are held so the first READ is still outstanding when the
// second arrives.
func TestIRDExceeded(t *testing.T) {
	n := NewMemNet()
	o := &pairOpts{}
	ccfg, scfg := testConfig(), testConfig()
	ccfg.MaxRdAtomic, scfg.MaxDestRd = 8, 1
	ccfg.Window = 4096 // both 1024-packet READs go out at once
	var gate *gateLink
	o.srvWrap = func(l Link) Link { gate = newGate(l); return gate }
	o.cfg = ccfg
	cli := newSide(t, n, cliAddr, Faults{}, o)
	o.cfg = scfg
	srv := newSide(t, n, srvAddr, Faults{}, o)
	t.Cleanup(func() {
		gate.set(false)
		for _, s := range []*side{cli, srv} {
			_ = s.qp.Destroy()
			_ = s.ep.Close()
			_ = s.dev.Close()
		}
	})
	connect(t, cli, srv, &pairOpts{mtu: roce.MTU1024})
	cli.conn.mu.Lock()
	cli.conn.win.n = ccfg.Window // not the adaptive start (window.go): no waiting for ACKs
	cli.conn.mu.Unlock()
	const sz = 1 << 20 // 1024 response packets: far more than one transmit batch
	lmr, _ := cli.reg(t, 2*sz, allAccess)
	rmr, _ := srv.reg(t, sz, allAccess)
	gate.set(true)
	for i := range 2 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{lmr.SGE(i*sz, sz)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	}
	// Both requests reach the responder; the first streams into the held link.
	deadline := time.Now().Add(5 * time.Second)
	for srv.qp.Counters().RxSegments.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	gate.set(false)
	cs := wait(t, cli.scq, 2)
	if cs[0].Status != rnic.StatusSuccess || cs[1].Status != rnic.StatusRemInvReqErr {
		t.Fatalf("completions %+v", cs)
	}
	if srv.qp.Counters().NAKs.Load() != 1 {
		t.Fatalf("responder NAKs %d, want 1 (the READ beyond IRD)", srv.qp.Counters().NAKs.Load())
	}
	if !errors.Is(srv.qp.Err(), ErrLocalNAK) {
		t.Fatalf("responder QP error %v", srv.qp.Err())
	}
}

// flakyLink fails Recv with err n times (then works), and Send while failSend is set.
type flakyLink struct {
	Link
	recvErrs atomic.Int32
	recvErr  error
	failSend atomic.Bool
}

func (l *flakyLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	if l.recvErrs.Load() > 0 {
		l.recvErrs.Add(-1)
		return 0, l.recvErr
	}
	return l.Link.Recv(bufs, sizes, from)
}

func (l *flakyLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	if l.failSend.Load() {
		return syscall.ENOBUFS
	}
	return l.Link.Send(bufs, dst)
}

// countHandler counts slog records by level.
type countHandler struct {
	mu    sync.Mutex
	n     map[slog.Level]int
	attrs []string
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Level]++
	h.attrs = append(h.attrs, r.Message)
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }
func (h *countHandler) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}

// TestRecvErrors (issue 10 item 10): temporary receive errors are retried with
// back-off, counted and logged once; the endpoint keeps working. A permanent one
// stops the endpoint: logged, kept in Err, and its connections end with it.
// Send errors are counted and logged once per episode, not discarded.
func TestRecvErrors(t *testing.T) {
	t.Run("temporary", func(t *testing.T) {
		h := &countHandler{n: map[slog.Level]int{}}
		cfg := testConfig()
		cfg.Logger = slog.New(h)
		var fl *flakyLink
		o := &pairOpts{cfg: cfg, srvWrap: func(l Link) Link {
			fl = &flakyLink{Link: l, recvErr: os.NewSyscallError("recvmmsg", syscall.ENOBUFS)}
			fl.recvErrs.Store(8)
			return fl
		}}
		cli, srv := newPair(t, o)
		smr, _ := cli.reg(t, 8, allAccess)
		rmr, _ := srv.reg(t, 8, allAccess)
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 8)}})
		post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 8)}})
		if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 {
			t.Fatalf("%+v", c)
		}
		if n := srv.ep.RecvErrors.Load(); n != 8 {
			t.Fatalf("RecvErrors %d, want 8", n)
		}
		if h.count(slog.LevelWarn) != 1 || h.count(slog.LevelInfo) != 1 || srv.ep.Err() != nil {
			t.Fatalf("logged %v; Err %v", h.attrs, srv.ep.Err())
		}
		// Send errors: counted, logged once per episode.
		fl.failSend.Store(true)
		for i := range 3 {
			post(t, srv.qp, &rnic.SendWR{WRID: uint64(10 + i), Opcode: rnic.OpSend, SGL: []rnic.SGE{rmr.SGE(0, 8)}})
		}
		deadline := time.Now().Add(5 * time.Second)
		for srv.ep.SendErrors.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if srv.ep.SendErrors.Load() < 3 || h.count(slog.LevelWarn) != 2 {
			t.Fatalf("SendErrors %d, logged %v", srv.ep.SendErrors.Load(), h.attrs)
		}
		fl.failSend.Store(false)
	})
	t.Run("permanent", func(t *testing.T) {
		h := &countHandler{n: map[slog.Level]int{}}
		cfg := testConfig()
		cfg.Logger = slog.New(h)
		bad := os.NewSyscallError("recvmmsg", syscall.EBADF)
		var fl *flakyLink
		o := &pairOpts{cfg: cfg, srvWrap: func(l Link) Link {
			fl = &flakyLink{Link: l, recvErr: bad}
			return fl
		}}
		cli, srv := newPair(t, o)
		fl.recvErrs.Store(1 << 30)
		// A packet wakes the server's receive goroutine, whose next Recv fails.
		post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, RKey: 0})
		select {
		case <-srv.qp.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the connection outlived its endpoint's link")
		}
		if !errors.Is(srv.ep.Err(), syscall.EBADF) || !errors.Is(srv.qp.Err(), syscall.EBADF) || !errors.Is(srv.conn.Err(), syscall.EBADF) {
			t.Fatalf("endpoint %v, QP %v", srv.ep.Err(), srv.qp.Err())
		}
		if srv.ep.RecvErrors.Load() != 1 || h.count(slog.LevelError) != 1 {
			t.Fatalf("RecvErrors %d, logged %v", srv.ep.RecvErrors.Load(), h.attrs)
		}
		// A stopped endpoint takes no new connections.
		qp := srv.newQP(t)
		defer qp.Destroy()
		if _, err := srv.ep.Connect(qp, ConnAttr{Remote: cliAddr, RemoteQPN: 5}); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("connect on a stopped endpoint: %v", err)
		}
	})
}

// TestStaleConnection (issue 10 item 11, IBTA Vol.1 ch. 12): a REQ from a QP number
// that is still connected here under another comm ID (the peer lost the old
// connection) is rejected with STALE_CONN and ends the old connection; Dial
// reports such a REJ as ErrStaleConn.
func TestStaleConnection(t *testing.T) {
	cli, srv, res, err := cmPair(t, nil, acceptWith(""))
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	// The "restarted" peer: the same address and QP number, a new comm ID.
	cli.link.Close() // the old process is gone
	atk := newRogue(t, srv.link.net, cliAddr)
	atk.mad(srvAddr, 7, rogueREQ(cliAddr.Addr(), srvAddr.Addr(), 7174, 0xABCD, cli.qp.Num()))
	var rej *roce.REJ
	for rej == nil {
		switch m := atk.next(5 * time.Second).(type) {
		case roce.REJ:
			rej = &m
		case nil:
			t.Fatal("no answer to the stale REQ")
		}
	}
	if rej.Reason != roce.RejStaleConn || rej.RemoteCommID != 0xABCD {
		t.Fatalf("REJ %+v", rej)
	}
	select {
	case <-srv.qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the stale connection lives on")
	}
	if !errors.Is(srv.conn.Err(), ErrStaleConn) || srv.ep.CMStale.Load() != 1 {
		t.Fatalf("stale connection ended with %v (CMStale %d)", srv.conn.Err(), srv.ep.CMStale.Load())
	}
	// The old connection's DREQ reaches the new process, which answers DREP.
	for {
		m := atk.next(5 * time.Second)
		if m == nil {
			t.Fatal("no DREQ for the stale connection")
		}
		if d, ok := m.(roce.DREQ); ok {
			if d.RemoteQPN != cli.qp.Num() {
				t.Fatalf("DREQ %+v", d)
			}
			break
		}
	}
}

// TestDialStaleReject: Dial answered with REJ STALE_CONN gives ErrStaleConn.
func TestDialStaleReject(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{noConnect: true})
	srv.ep.Close()
	srv.link.Close()
	atk := newRogue(t, cli.link.net, srvAddr)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	go func() {
		for {
			raw := atk.next(5 * time.Second)
			if raw == nil {
				return
			}
			if req, ok := raw.(roce.REQ); ok {
				atk.mad(cliAddr, 1, &roce.REJ{LocalCommID: 5, RemoteCommID: req.LocalCommID, Reason: roce.RejStaleConn})
				return
			}
		}
	}()
	_, err := Dial(ctx, cli.ep, cli.qp, "10.0.0.2:7174", testCM, ConnParam{})
	var re *RejectError
	if !errors.Is(err, ErrStaleConn) || !errors.Is(err, ErrRejected) || !errors.As(err, &re) || re.Reason != roce.RejStaleConn {
		t.Fatalf("%v", err)
	}
}
