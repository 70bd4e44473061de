package rocev2

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// sidrPair is a client and a server endpoint over a MemNet with a UD listener on the
// server's port 7174.
func sidrPair(t *testing.T, o *pairOpts, cfg *CMConfig) (cli, srv *side, l *UDListener) {
	t.Helper()
	if o == nil {
		o = &pairOpts{}
	}
	o.noConnect = true
	cli, srv = newPair(t, o)
	var err error
	if l, err = ListenUD(srv.ep, ":7174", cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return cli, srv, l
}

// TestSIDR: a resolution answered by Accept gives the requester the QPN, the Q_Key and
// the private data; the listener sees the requester's private data (after the cma_hdr)
// and address; then UD datagrams flow to the resolved QPN with the Q_Key.
func TestSIDR(t *testing.T) {
	cli, srv, l := sidrPair(t, nil, testCM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvUD, err := srv.ep.CreateUD(srv.qp, UDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			got <- err
			return
		}
		if !bytes.HasPrefix(r.PrivateData(), []byte("who")) || r.RemoteAddr().IP != cliAddr.Addr() || r.LinkAddr() != cliAddr {
			got <- errors.New("request " + r.RemoteAddr().String())
			return
		}
		got <- r.Accept(srv.qp.Num(), UDPQKey, []byte("here"))
	}()
	peer, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", testCM, []byte("who"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if peer.Addr != srvAddr || peer.QPN != srv.qp.Num() || peer.QKey != UDPQKey || !bytes.HasPrefix(peer.PrivateData, []byte("here")) {
		t.Fatalf("resolved %+v", peer)
	}
	// A datagram to the resolved service arrives, with the sender's QPN as immediate
	// data as udaddy sends it.
	cliUD, err := cli.ep.CreateUD(cli.qp, UDPQKey)
	if err != nil {
		t.Fatal(err)
	}
	rmr, rbuf := srv.reg(t, GRHLen+64, rnic.AccessLocalWrite)
	if err := srv.qp.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	smr, sbuf := cli.reg(t, 64, rnic.AccessLocalWrite)
	copy(sbuf, "ping")
	if err := cliUD.PostSend(AH{Addr: peer.Addr, QPN: peer.QPN, QKey: peer.QKey},
		&rnic.SendWR{Opcode: rnic.OpSendImm, Imm: cli.qp.Num(), Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	wc := wait(t, srv.rcq, 1)
	if wc[0].Status != rnic.StatusSuccess || wc[0].Imm != cli.qp.Num() || !bytes.HasPrefix(rbuf[GRHLen:], []byte("ping")) {
		t.Fatalf("received %+v % x", wc[0], rbuf[GRHLen:GRHLen+4])
	}
	_ = srvUD
}

// TestSIDRRefusals: a rejected request, a port without a listener and a closed listener
// give the requester a *SIDRError with the SIDR_REP status; a silent server ends in
// ErrCMTimeout after the retries.
func TestSIDRRefusals(t *testing.T) {
	cli, _, l := sidrPair(t, nil, testCM)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			_ = r.Reject([]byte("no"))
		}
	}()
	_, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", testCM, nil)
	var se *SIDRError
	if !errors.As(err, &se) || se.Status != roce.SIDRReject || !bytes.HasPrefix(se.PrivateData, []byte("no")) || !errors.Is(err, ErrSIDRStatus) {
		t.Fatalf("rejected: %v", err)
	}
	if _, err := ResolveUD(ctx, cli.ep, "10.0.0.2:9999", testCM, nil); !errors.As(err, &se) || se.Status != roce.SIDRUnsupported {
		t.Fatalf("no listener: %v", err)
	}
	// A resolution of an unreachable address retries MaxRetries times, then fails.
	t0 := time.Now()
	if _, err := ResolveUD(ctx, cli.ep, "10.0.0.9:7174", &CMConfig{ResponseTimeout: 12, MaxRetries: 2}, nil); !errors.Is(err, ErrCMTimeout) {
		t.Fatalf("silent peer: %v", err)
	}
	if d := time.Since(t0); d < 40*time.Millisecond {
		t.Errorf("gave up after %v", d)
	}
	if _, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", testCM, make([]byte, 181)); !errors.Is(err, ErrPrivateDataLong) {
		t.Fatalf("long private data: %v", err)
	}
}

// TestSIDRDuplicates: the first SIDR_REP is lost; the requester's retry gets the same
// answer again from the answered request (the application is asked once).
func TestSIDRDuplicates(t *testing.T) {
	var drops atomic.Int32
	o := &pairOpts{srvF: Faults{Filter: func(pkt []byte) bool {
		// drop the server's first CM MAD (the SIDR_REP)
		return !(binary.BigEndian.Uint32(pkt[4:8])&roce.QPNMask == 1 && drops.Add(1) == 1)
	}}}
	cli, srv, l := sidrPair(t, o, testCM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan int, 4)
	go func() {
		for {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			accepted <- 1
			_ = r.Accept(srv.qp.Num(), UDPQKey, nil)
		}
	}()
	peer, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", testCM, nil)
	if err != nil || peer.QPN != srv.qp.Num() {
		t.Fatalf("%+v %v", peer, err)
	}
	if n := len(accepted); n != 1 || drops.Load() < 2 {
		t.Fatalf("the application saw %d requests; the server sent %d MADs", n, drops.Load())
	}
}

// TestSIDRBacklog: requests over the listener's backlog are answered NO_QP and counted;
// one nobody accepts is dropped after AcceptTimeout and counted.
func TestSIDRBacklog(t *testing.T) {
	cli, srv, l := sidrPair(t, nil, &CMConfig{ResponseTimeout: 12, MaxRetries: 1, Backlog: 1, AcceptTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", &CMConfig{ResponseTimeout: 12, MaxRetries: 1}, nil)
		first <- err
	}()
	// wait until the first request is pending, then a second is over the backlog
	for srv.ep.cma == nil || func() bool { s := srv.ep.cm().sidrState(); s.mu.Lock(); defer s.mu.Unlock(); return s.pending == 0 }() {
		time.Sleep(time.Millisecond)
	}
	var se *SIDRError
	if _, err := ResolveUD(ctx, cli.ep, "10.0.0.2:7174", testCM, nil); !errors.As(err, &se) || se.Status != roce.SIDRNoQP {
		t.Fatalf("over the backlog: %v", err)
	}
	if err := <-first; !errors.Is(err, ErrCMTimeout) {
		t.Fatalf("unanswered: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); srv.ep.AcceptTimeouts.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if srv.ep.CMRejectedLimit.Load() != 1 || srv.ep.AcceptTimeouts.Load() != 1 {
		t.Fatalf("counters: limit %d accept timeouts %d", srv.ep.CMRejectedLimit.Load(), srv.ep.AcceptTimeouts.Load())
	}
	_ = l
}

// FuzzSIDRInput feeds arbitrary SIDR MAD data to an endpoint with a UD listener: no
// panic, and the pending requests stay within the backlog.
func FuzzSIDRInput(f *testing.F) {
	req := roce.SIDRREQ{RequestID: 1, PKey: 0xffff, ServiceID: roce.ServiceID(roce.PortSpaceUDP, 7174)}
	copy(req.PrivateData[:], roce.NewCMAHeader(cliAddr.Addr(), srvAddr.Addr(), 5000).Append(nil))
	f.Add(uint16(roce.AttrSIDRREQ), req.Append(nil))
	rep := roce.SIDRREP{RequestID: 1, QPN: 5, QKey: UDPQKey}
	f.Add(uint16(roce.AttrSIDRREP), rep.Append(nil))
	cli, srv := newPair(f, &pairOpts{noConnect: true})
	_ = cli
	l, err := ListenUD(srv.ep, ":7174", &CMConfig{Backlog: 4, AcceptTimeout: time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	a := srv.ep.cm()
	f.Fuzz(func(t *testing.T, attr uint16, data []byte) {
		a.sidrInput(roce.MADHeader{AttrID: roce.AttrID(attr), TransactionID: 7}, data, cliAddr)
		s := a.sidrState()
		s.mu.Lock()
		p := l.pending
		s.mu.Unlock()
		if p > 4 {
			t.Fatalf("%d pending over a backlog of 4", p)
		}
	})
}
