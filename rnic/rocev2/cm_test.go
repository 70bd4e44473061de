package rocev2

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

var testCM = &CMConfig{ResponseTimeout: 14, MaxRetries: 5} // 67 ms

type cmResult struct {
	req  *ConnRequest
	conn *Conn
	err  error
}

// cmPair dials from the client to a listener on the server; accept decides
// what the server does with the request.
func cmPair(t *testing.T, o *pairOpts, accept func(srv *side, r *ConnRequest) (*Conn, error)) (cli, srv *side, res cmResult, dialErr error) {
	t.Helper()
	if o == nil {
		o = &pairOpts{}
	}
	o.noConnect = true
	cli, srv = newPair(t, o)
	cmc := testCM
	if o.cm != nil {
		cmc = o.cm
	}
	l, err := Listen(srv.ep, ":7174", cmc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resc := make(chan cmResult, 1)
	go func() {
		r, err := l.Accept(ctx)
		res := cmResult{req: r, err: err}
		if err == nil {
			res.conn, res.err = accept(srv, r)
		}
		resc <- res
	}()
	cli.conn, dialErr = Dial(ctx, cli.ep, cli.qp, "10.0.0.2:7174", cmc, ConnParam{PrivateData: []byte("hello"), IRD: 4, ORD: 4})
	res = <-resc
	srv.conn = res.conn
	return
}

func acceptWith(pd string) func(srv *side, r *ConnRequest) (*Conn, error) {
	return func(srv *side, r *ConnRequest) (*Conn, error) {
		return r.Accept(srv.qp, ConnParam{PrivateData: []byte(pd), IRD: 4, ORD: 4})
	}
}

func TestCMConnectDataDisconnect(t *testing.T) {
	cli, srv, res, err := cmPair(t, nil, acceptWith("welcome"))
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	r := res.req
	if !bytes.HasPrefix(r.PrivateData(), []byte("hello")) || r.IRD() != 4 || r.ORD() != 4 ||
		r.RemoteAddr().IP.String() != "10.0.0.1" || r.LocalAddr().String() != "10.0.0.2:7174" {
		t.Fatalf("request: pd %q ird %d ord %d remote %v local %v", r.PrivateData()[:8], r.IRD(), r.ORD(), r.RemoteAddr(), r.LocalAddr())
	}
	if sid := r.REQ().ServiceID; sid != 0x0000000001061c06 {
		t.Fatalf("service ID %#x", sid)
	}
	if !bytes.HasPrefix(cli.conn.PrivateData(), []byte("welcome")) {
		t.Fatalf("reply private data %q", cli.conn.PrivateData()[:8])
	}
	// Data both ways, and a READ (ORD/IRD negotiated).
	smr, sbuf := cli.reg(t, 10000, allAccess)
	rmr, rbuf := srv.reg(t, 10000, allAccess)
	fill(sbuf, 1)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 10000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10000)}})
	if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || !bytes.Equal(rbuf, sbuf) {
		t.Fatalf("%+v server QP error %v client %v", c, srv.qp.Err(), cli.qp.Err())
	}
	wait(t, cli.scq, 1)
	post(t, srv.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{rmr.SGE(0, 5000)},
		RemoteAddr: smr.Addr() + 5000, RKey: smr.RKey()})
	if c := wait(t, srv.scq, 1)[0]; c.Status != 0 || !bytes.Equal(rbuf[:5000], sbuf[5000:]) {
		t.Fatalf("%+v", c)
	}
	// The client disconnects: DREQ/DREP; the server's QP goes to Error with EventDisconnected.
	t0 := time.Now()
	cli.qp.Disconnect()
	select {
	case <-srv.qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server QP not disconnected")
	}
	t.Log("server disconnected after", time.Since(t0))
	<-cli.qp.Done()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, a := range []*cmAgent{cli.ep.cma, srv.ep.cma} {
			a.mu.Lock()
			n += len(a.byLocal)
			a.mu.Unlock()
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d CM connections left", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCMReject(t *testing.T) {
	_, _, res, err := cmPair(t, nil, func(srv *side, r *ConnRequest) (*Conn, error) {
		return nil, r.Reject([]byte("go away"))
	})
	var re *RejectError
	if res.err != nil || !errors.As(err, &re) || re.Reason != roce.RejConsumerDefined || !bytes.HasPrefix(re.PrivateData, []byte("go away")) {
		t.Fatalf("dial error %v, accept error %v", err, res.err)
	}
}

func TestCMNoListener(t *testing.T) {
	cli, _ := newPair(t, &pairOpts{noConnect: true})
	_, err := Dial(context.Background(), cli.ep, cli.qp, "10.0.0.2:9999", testCM, ConnParam{})
	var re *RejectError
	if !errors.As(err, &re) || re.Reason != roce.RejInvalidServiceID {
		t.Fatalf("%v", err)
	}
}

func TestCMLostREQAndRTU(t *testing.T) {
	// The first REQ and the first RTU are lost: the REQ is retried after the
	// response timeout; the server resends the REP, and the client answers
	// the duplicate REP with its RTU.
	var reqs, rtus atomic.Int32
	filter := func(b []byte) bool {
		p, err := roce.ParsePacket(b)
		if err != nil || p.Opcode() != roce.UDSendOnly {
			return true
		}
		h, _, _ := roce.ParseMAD(p.Payload)
		switch h.AttrID {
		case roce.AttrREQ:
			return reqs.Add(1) > 1
		case roce.AttrRTU:
			return rtus.Add(1) > 1
		}
		return true
	}
	cli, srv, res, err := cmPair(t, &pairOpts{cliF: Faults{Filter: filter}}, acceptWith(""))
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	// No traffic yet: the server resends its REP, the client its RTU.
	deadline := time.Now().Add(5 * time.Second)
	for rtus.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if reqs.Load() < 2 || rtus.Load() < 2 {
		t.Fatalf("REQs %d RTUs %d", reqs.Load(), rtus.Load())
	}
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 10, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 10)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	wait(t, srv.rcq, 1)
}

func TestCMTimeout(t *testing.T) {
	cli, _ := newPair(t, &pairOpts{noConnect: true, cliF: Faults{Drop: 1}})
	start := time.Now()
	_, err := Dial(context.Background(), cli.ep, cli.qp, "10.0.0.2:7174", testCM, ConnParam{})
	if !errors.Is(err, ErrCMTimeout) {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 6*roce.TimeoutExp(testCM.ResponseTimeout) {
		t.Fatalf("gave up after %v, before 1+%d retries", d, testCM.MaxRetries)
	}
}

// TestRCToReservedQPDropped: RC packets for QP0/QP1 (SMI, GSI) reach neither
// an engine QP nor the CM, and rnic never numbers a data QP 0 or 1.
func TestRCToReservedQPDropped(t *testing.T) {
	cli, srv := newPair(t, nil)
	if cli.qp.Num() < rnic.FirstQPN || srv.qp.Num() < rnic.FirstQPN {
		t.Fatalf("QP numbers %d, %d", cli.qp.Num(), srv.qp.Num())
	}
	rmr, rbuf := srv.reg(t, 16, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 16)}})
	r := &rxCtx{ctl: make([]ctlPkt, 4), bufs: make([][]byte, 0, 4)}
	for _, qpn := range []uint32{0, 1} {
		before := srv.ep.RxDropped.Load()
		h := roce.Header{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: qpn, AckReq: true, PSN: 0xFFFFF0}
		b := finish(append(h.Append(nil, 4), "ping"...), 4, cliAddr, srvAddr)
		srv.ep.input(r, b, cliAddr, srvAddr)
		if srv.ep.RxDropped.Load() != before+1 || len(r.touched) != 0 {
			t.Fatalf("RC packet for QP %d not dropped", qpn)
		}
	}
	if srv.rcq.Len() != 0 || rbuf[0] != 0 {
		t.Fatal("delivered")
	}
}
