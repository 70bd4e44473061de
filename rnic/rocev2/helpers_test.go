package rocev2

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

type side struct {
	dev  *rnic.Device
	pd   *rnic.PD
	scq  *rnic.CQ
	rcq  *rnic.CQ
	qp   *rnic.QP
	link *MemLink
	ep   *Endpoint
	conn *Conn
}

type pairOpts struct {
	cfg       *Config // both sides
	cliF      Faults  // faults of packets sent by the client
	srvF      Faults
	typ       QPType
	cap       rnic.QPCap
	mtu       roce.MTU
	noConnect bool
	cliWrap   func(Link) Link // wraps the client's link (fault injection by packet type)
	srvWrap   func(Link) Link
	cm        *CMConfig // cmPair: the listener's and the dialer's CM settings (default testCM)
}

var (
	cliAddr = netip.MustParseAddrPort("10.0.0.1:4791")
	srvAddr = netip.MustParseAddrPort("10.0.0.2:4791")
)

func testConfig() *Config {
	c := DefaultConfig()
	// 67 ms: 8 timeouts (1 + retry_cnt 7) must outlast the responder being
	// unscheduled, which on a loaded 2-core box under -race exceeded 200 ms.
	c.Timeout = 14
	c.MinRNRTimer = 1
	c.MTU = roce.MTU1024
	return c
}

func newSide(t testing.TB, n *MemNet, addr netip.AddrPort, f Faults, o *pairOpts) *side {
	t.Helper()
	d, err := rnic.Open(rnic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: d}
	s.pd, _ = d.AllocPD()
	s.scq, _ = d.CreateCQ(1 << 16)
	s.rcq, _ = d.CreateCQ(1 << 16)
	s.qp, err = d.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.scq, RecvCQ: s.rcq, Cap: o.cap})
	if err != nil {
		t.Fatal(err)
	}
	s.link, err = n.NewLink(addr, f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.cfg
	if cfg == nil {
		cfg = testConfig()
	}
	var l Link = s.link
	if w := o.cliWrap; w != nil && addr == cliAddr {
		l = w(l)
	}
	if w := o.srvWrap; w != nil && addr == srvAddr {
		l = w(l)
	}
	s.ep = NewEndpoint(d, l, cfg)
	return s
}

// newPair connects a client and a server QP over a MemNet.
func newPair(t testing.TB, o *pairOpts) (cli, srv *side) {
	t.Helper()
	if o == nil {
		o = &pairOpts{}
	}
	g := runtime.NumGoroutine()
	n := NewMemNet()
	cli = newSide(t, n, cliAddr, o.cliF, o)
	srv = newSide(t, n, srvAddr, o.srvF, o)
	t.Cleanup(func() {
		for _, s := range []*side{cli, srv} {
			_ = s.qp.Destroy()
			_ = s.ep.Close()
			_ = s.dev.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > g && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if _, fuzz := t.(*testing.F); fuzz {
			return // the fuzzing engine starts goroutines of its own
		}
		if ng := runtime.NumGoroutine(); ng > g {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutine leak: %d > %d\n%s", ng, g, buf[:runtime.Stack(buf, true)])
		}
	})
	if o.noConnect {
		return
	}
	connect(t, cli, srv, o)
	return
}

func connect(t testing.TB, cli, srv *side, o *pairOpts) {
	t.Helper()
	var err error
	cli.conn, err = cli.ep.Connect(cli.qp, ConnAttr{Type: o.typ, Remote: srvAddr, RemoteQPN: srv.qp.Num(),
		SendPSN: 0xFFFFF0, RecvPSN: 0x123456, MTU: o.mtu})
	if err != nil {
		t.Fatal(err)
	}
	srv.conn, err = srv.ep.Connect(srv.qp, ConnAttr{Type: o.typ, Remote: cliAddr, RemoteQPN: cli.qp.Num(),
		SendPSN: 0x123456, RecvPSN: 0xFFFFF0, MTU: o.mtu})
	if err != nil {
		t.Fatal(err)
	}
}

func (s *side) reg(t testing.TB, n int, acc rnic.Access) (*rnic.MR, []byte) {
	t.Helper()
	buf := make([]byte, n)
	mr, err := s.pd.RegMR(buf, acc)
	if err != nil {
		t.Fatal(err)
	}
	return mr, buf
}

const allAccess = rnic.AccessLocalWrite | rnic.AccessRemoteWrite | rnic.AccessRemoteRead | rnic.AccessRemoteAtomic

func wait(t testing.TB, cq *rnic.CQ, n int) []rnic.Completion {
	t.Helper()
	out := make([]rnic.Completion, 0, n)
	wc := make([]rnic.Completion, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(out) < n {
		k, err := cq.Wait(ctx, wc[:min(len(wc), n-len(out))])
		if err != nil {
			t.Fatalf("waiting for %d completions, got %d: %v (%+v)", n, len(out), err, out)
		}
		out = append(out, wc[:k]...)
	}
	return out
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}
