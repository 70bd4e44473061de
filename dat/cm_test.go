package dat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// §6.4 connection management and §6.6.3 connection models.

// Model 2 of §6.6.3.2: PSP with a provider-created EP.
func TestPSPProviderEP(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPProvider)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := psp.Query(PSPFieldAll); err != nil || p.Flags != PSPProvider || p.ConnQual != qual || p.EVD != srv.cr {
		t.Fatal(p, err)
	}
	if err := cli.ep.Connect(loopback(), qual, waitT, []byte("x"), QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	cr := ev.CR.CR
	p, _ := cr.Query(CRFieldAll)
	ep := p.LocalEP
	if ep == nil || ep.State() != EPStateUnconfiguredTentative {
		t.Fatalf("provider EP %v", ep)
	}
	// an unconfigured EP cannot accept
	if err := cr.Accept(nil, nil); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("accept unconfigured: %v", err)
	}
	if err := cr.Accept(srv.ep, nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("accept with a foreign EP: %v", err)
	}
	if err := ep.Modify(EPFieldPZHandle|EPFieldRecvEVDHandle|EPFieldRequestEVDHandle|EPFieldConnectEVDHandle,
		EPParam{PZ: srv.pz, RecvEVD: srv.dto, RequestEVD: srv.dto, ConnectEVD: srv.conn}); err != nil {
		t.Fatal(err)
	}
	if ep.State() != EPStateTentativeConnectionPending {
		t.Fatal(ep.State())
	}
	if err := ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 64)}, 1, CompletionDefault); err != nil {
		t.Fatal(err)
	}
	if err := cr.Accept(nil, nil); err != nil {
		t.Fatal(err)
	}
	if ce := srv.waitConn(ConnectionEventEstablished); ce.Conn.EP != ep {
		t.Fatal("established on the wrong EP")
	}
	cli.waitConn(ConnectionEventEstablished)
	copy(cli.sendBuf, "provider")
	if err := cli.ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(0, 8)}, 2, CompletionDefault); err != nil {
		t.Fatal(err)
	}
	if d := srv.waitDTO(DTOReceive, 1); d.EP != ep || string(srv.recvBuf[:d.Length]) != "provider" {
		t.Fatalf("%+v", d)
	}
	if err := ep.Disconnect(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventDisconnected)
	cli.waitConn(ConnectionEventDisconnected)
}

// Model 3 of §6.6.3.3: RSP.
func TestRSP(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // find a free port
	qual := ConnQual(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	rsp, err := srv.ia.CreateRSP(qual, srv.ep, srv.cr)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ep.State() != EPStateReserved {
		t.Fatal(srv.ep.State())
	}
	if p, _ := rsp.Query(RSPFieldAll); p.EP != srv.ep || p.ConnQual != qual {
		t.Fatal(p)
	}
	if err := srv.ep.Free(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("free a reserved EP: %v", err)
	}
	if _, err := srv.ia.CreateRSP(qual, cli.ep, srv.cr); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatalf("foreign EP: %v", err)
	}
	if err := cli.ep.Connect(loopback(), qual, waitT, nil, QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if ev.CR.SP != nil || ev.CR.ConnQual != qual {
		t.Fatalf("RSP arrival must carry a nil SP: %+v", ev.CR)
	}
	if srv.ep.State() != EPStatePassiveConnectionPending {
		t.Fatal(srv.ep.State())
	}
	if _, err := rsp.Query(RSPFieldAll); !errors.Is(err, ErrInvalidHandleRSP) {
		t.Fatalf("RSP not consumed: %v", err)
	}
	if err := ev.CR.CR.Accept(nil, nil); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventEstablished)
	cli.waitConn(ConnectionEventEstablished)
}

func TestRSPFreeAndReject(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	rsp, err := srv.ia.CreateRSP(freePort(t), srv.ep, srv.cr)
	if err != nil {
		t.Fatal(err)
	}
	if err := rsp.Free(); err != nil || srv.ep.State() != EPStateUnconnected {
		t.Fatal(err, srv.ep.State())
	}
	qual := freePort(t)
	if _, err := srv.ia.CreateRSP(qual, srv.ep, srv.cr); err != nil {
		t.Fatal(err)
	}
	cli.ep.Connect(loopback(), qual, waitT, nil, QoSBestEffort, ConnectDefault)
	ev := srv.wait(srv.cr)
	if err := ev.CR.CR.Reject(nil); err != nil {
		t.Fatal(err)
	}
	if srv.ep.State() != EPStateUnconnected {
		t.Fatal(srv.ep.State())
	}
	cli.waitConn(ConnectionEventPeerRejected)
}

func freePort(t testing.TB) ConnQual {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ConnQual(ln.Addr().(*net.TCPAddr).Port)
}

// §6.4.4.2 CSP and §6.6.15 dat_ep_common_connect
func TestCSPCommonConnect(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	if _, err := srv.ia.CreateCSP("udp", nil, srv.cr); !errors.Is(err, ErrCommNotSupported) {
		t.Fatal(err)
	}
	csp, addr, err := srv.ia.CreateCSPAny("tcp", srv.cr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := csp.Query(CSPFieldAll)
	if p.Address != addr || addr.Port == 0 || p.Comm != "tcp" {
		t.Fatalf("%+v", p)
	}
	if _, err := srv.ia.CreateCSP("tcp", p.Address, srv.cr); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("port in use: %v", err)
	}
	if err := cli.ep.CommonConnect(p.Address, waitT, []byte("csp")); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if ev.CR.SP != csp || string(ev.CR.CR.PrivateData()) != "csp" {
		t.Fatalf("%+v", ev.CR)
	}
	ev.CR.CR.Accept(srv.ep, nil)
	srv.waitConn(ConnectionEventEstablished)
	cli.waitConn(ConnectionEventEstablished)
	// §6.6.16 dup connect to the same remote
	ep2, _ := cli.ia.CreateEP(cli.pz, cli.dto, cli.dto, cli.conn, nil)
	if err := ep2.DupConnect(cli.ep, waitT, nil, QoSBestEffort); err != nil {
		t.Fatal(err)
	}
	ev = srv.wait(srv.cr)
	if ev.CR.SP != csp {
		t.Fatal("dup connect went elsewhere")
	}
	ep3, _ := srv.ia.CreateEP(srv.pz, srv.dto, srv.dto, srv.conn, nil)
	ev.CR.CR.Accept(ep3, nil)
	srv.waitConn(ConnectionEventEstablished)
	if ce := cli.waitConn(ConnectionEventEstablished); ce.Conn.EP != ep2 {
		t.Fatal("wrong EP")
	}
	if err := ep2.DupConnect(ep3, waitT, nil, QoSBestEffort); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("dup of a foreign EP: %v", err)
	}
	if err := csp.Free(); err != nil {
		t.Fatal(err)
	}
	if err := csp.Free(); !errors.Is(err, ErrInvalidHandleCSP) {
		t.Fatal(err)
	}
}

// §6.4.5.4 dat_cr_handoff
func TestCRHandoff(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	cr2 := mustEVD(t, srv.ia, 4, nil, EVDCR)
	psp1, q1, _ := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	psp2, q2, _ := srv.ia.CreatePSPAny(cr2, PSPConsumer)
	cli.ep.Connect(loopback(), q1, waitT, []byte("h"), QoSBestEffort, ConnectDefault)
	ev := srv.wait(srv.cr)
	cr := ev.CR.CR
	if err := cr.Handoff(q1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("handoff to self: %v", err)
	}
	if err := cr.Handoff(9); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("handoff nowhere: %v", err)
	}
	if err := cr.Handoff(q2); err != nil {
		t.Fatal(err)
	}
	ev2 := srv.wait(cr2)
	if ev2.CR.CR != cr || ev2.CR.SP != psp2 || ev2.CR.ConnQual != q2 {
		t.Fatalf("%+v", ev2.CR)
	}
	cr.Accept(srv.ep, nil)
	cli.waitConn(ConnectionEventEstablished)
	psp1.Free()
	psp2.Free()
}

func TestConnectArgumentErrors(t *testing.T) {
	cli := newSide(t, "client")
	cases := []struct {
		addr net.Addr
		qual ConnQual
		to   Timeout
		pd   []byte
		qos  QoS
		f    ConnectFlags
		want error
	}{
		{nil, 1, time.Second, nil, 0, 0, ErrInvalidAddressMalformed},
		{&net.IPAddr{IP: net.IPv4zero}, 1, time.Second, nil, 0, 0, ErrInvalidAddressMalformed},
		{&net.IPAddr{IP: net.IPv4bcast}, 1, time.Second, nil, 0, 0, ErrInvalidAddressUnsupported},
		{&net.IPAddr{IP: net.ParseIP("224.0.0.1")}, 1, time.Second, nil, 0, 0, ErrInvalidAddressUnsupported},
		{loopback(), 0, time.Second, nil, 0, 0, ErrInvalidParameter},
		{loopback(), 1, 0, nil, 0, 0, ErrInvalidParameter},
		{loopback(), 1, time.Second, make([]byte, MaxPrivateData+1), 0, 0, ErrInvalidParameter},
		{loopback(), 1, time.Second, nil, QoSPremium, 0, ErrModelNotSupported},
		{loopback(), 1, time.Second, nil, 0, 0x10, ErrInvalidParameter},
		{loopback(), 1, time.Second, nil, 0, ConnectMultipathRequired, ErrModelNotSupported},
	}
	for i, c := range cases {
		if err := cli.ep.Connect(c.addr, c.qual, c.to, c.pd, c.qos, c.f); !errors.Is(err, c.want) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
	if cli.ep.State() != EPStateUnconnected {
		t.Fatal(cli.ep.State())
	}
	if err := cli.ep.Disconnect(CloseAbrupt); !errors.Is(err, ErrInvalidStateEPUnconnected) {
		t.Fatalf("disconnect unconnected: %v", err)
	}
	if err := cli.ep.Disconnect(7); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := cli.ep.PostSend(nil, 1, 0); !errors.Is(err, ErrInvalidStateEPUnconnected) {
		t.Fatalf("send unconnected: %v", err)
	}
}

func TestConnectTimedOut(t *testing.T) {
	cli := newSide(t, "client")
	// a TCP listener that never answers the MPA Request
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(2 * time.Second)
			c.Close()
		}
	}()
	if err := cli.ep.Connect(loopback(), ConnQual(ln.Addr().(*net.TCPAddr).Port), 100*time.Millisecond, nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventTimedOut)
	if cli.ep.State() != EPStateDisconnected {
		t.Fatal(cli.ep.State())
	}
}

func TestConnectAbortByDisconnect(t *testing.T) {
	cli := newSide(t, "client")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	// a pre-posted receive is flushed when the establishment is aborted
	cli.ep.PostRecv([]LMRTriplet{cli.recvLMR.Triplet(0, 8)}, 9, 0)
	cli.ep.Connect(loopback(), ConnQual(ln.Addr().(*net.TCPAddr).Port), waitT, nil, 0, 0)
	if cli.ep.State() != EPStateActiveConnectionPending {
		t.Fatal(cli.ep.State())
	}
	if err := cli.ep.Disconnect(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventDisconnected)
	ev := cli.wait(cli.dto)
	if ev.DTO.Cookie != 9 || ev.DTO.Status != DTOErrFlushed {
		t.Fatalf("%+v", ev.DTO)
	}
	if err := cli.ep.Disconnect(CloseAbrupt); err != nil {
		t.Fatalf("disconnecting a disconnected EP is a no-op: %v", err)
	}
}

// A failed connect becomes the connection event of its cm category.
func TestConnEvent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want EventNumber
	}{
		{fmt.Errorf("%w: %w", cm.ErrRefused, syscall.ECONNREFUSED), ConnectionEventNonPeerRejected},
		{fmt.Errorf("%w: %w", cm.ErrUnreachable, syscall.EHOSTUNREACH), ConnectionEventUnreachable},
		{fmt.Errorf("%w: %w", cm.ErrTimeout, context.DeadlineExceeded), ConnectionEventTimedOut},
		{&cm.OpError{Op: "dial", Err: &cm.RejectError{PrivateData: []byte("no")}}, ConnectionEventPeerRejected},
		{errors.New("mpa: bad key"), ConnectionEventNonPeerRejected},
	} {
		if n, _ := connEvent(c.err); n != c.want {
			t.Errorf("%v -> %v, want %v", c.err, n, c.want)
		}
	}
}

// §6.6.17: the passive side disconnecting; abrupt disconnect flushes.
func TestDisconnectAbruptFlushes(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	connectPair(t, srv, cli, nil)
	for i := 0; i < 3; i++ {
		srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 64)}, uint64(i), 0)
	}
	if n, span, err := srv.ep.RecvQuery(); err != nil || n != 3 || span != 3 {
		t.Fatal(n, span, err)
	}
	if err := srv.ep.Disconnect(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventDisconnected)
	cli.waitConn(ConnectionEventDisconnected)
	for i := 0; i < 3; i++ {
		ev := srv.wait(srv.dto)
		if ev.DTO.Status != DTOErrFlushed || ev.DTO.Op != DTOReceive {
			t.Fatalf("%+v", ev.DTO)
		}
	}
	if n, _, _ := srv.ep.RecvQuery(); n != 0 {
		t.Fatal(n)
	}
	if !bytes.Equal(nil, nil) {
		t.Fatal()
	}
}

func TestConnQualMapping(t *testing.T) {
	for _, c := range []struct {
		q    ConnQual
		port int
		ok   bool
	}{{0, 0, false}, {1, 1, true}, {4791, 4791, true}, {0xFFFF, 0xFFFF, true},
		{0x10000, 0x10000%32001 + 33534, true}, {1 << 40, int((1<<40)%32001) + 33534, true}} {
		p, ok := portOf(c.q)
		if ok != c.ok || (ok && p != c.port) || p > 0xFFFF {
			t.Errorf("portOf(%d) = %d %v, want %d %v", c.q, p, ok, c.port, c.ok)
		}
	}
	// a large qualifier connects through its folded port
	srv, cli := newSide(t, "server"), newSide(t, "client")
	var qual ConnQual
	var psp *PSP
	for q := ConnQual(0x1234500); ; q++ {
		var err error
		if psp, err = srv.ia.CreatePSP(q, srv.cr, PSPConsumer); err == nil {
			qual = q
			break
		}
	}
	if p, _ := psp.Query(PSPFieldConnQual); p.ConnQual != qual {
		t.Fatal(p.ConnQual)
	}
	cli.ep.Connect(loopback(), qual, waitT, nil, 0, 0)
	ev := srv.wait(srv.cr)
	if ev.CR.ConnQual != qual {
		t.Fatal(ev.CR.ConnQual)
	}
	ev.CR.CR.Accept(srv.ep, nil)
	cli.waitConn(ConnectionEventEstablished)
	if p, _ := cli.ep.Query(EPFieldRemotePortQual); p.RemotePort != qual {
		t.Fatal(p.RemotePort)
	}
}

// A remote the IA's (loopback) address cannot reach: UNREACHABLE.
func TestConnectUnreachable(t *testing.T) {
	cli := newSide(t, "client")
	if err := cli.ep.Connect(&net.IPAddr{IP: net.ParseIP("192.0.2.1")}, 5000, time.Second, nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventUnreachable)
	if cli.ep.State() != EPStateDisconnected {
		t.Fatal(cli.ep.State())
	}
}

// §6.4.5.2: a transport failure during accept is reported as
// DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR and the EP is Disconnected. The failure:
// the EP's QP already carries a transport (a stand-in attached through the engine SPI),
// so the connection cannot bind it.
func TestAcceptCompletionError(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer psp.Free()
	if err := cli.ep.Connect(loopback(), qual, waitT, []byte("x"), QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if ev.Number != ConnectionRequestEvent {
		t.Fatalf("%+v", ev)
	}
	cr := ev.CR.CR
	if err := cr.Accept(srv.ep, make([]byte, MaxPrivateData+1)); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	attachStandIn(t, srv.ep.qp)
	if err := cr.Accept(srv.ep, nil); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventAcceptCompletionError)
	if srv.ep.State() != EPStateDisconnected {
		t.Fatal(srv.ep.State())
	}
	if _, err := cr.Query(CRFieldAll); !errors.Is(err, ErrInvalidHandleCR) {
		t.Fatal("CR survived accept")
	}
	if ce := cli.wait(cli.conn); ce.Number == ConnectionEventEstablished {
		t.Fatal("the client connected to an EP that failed to accept")
	}
}

// The largest private data the provider advertises goes through both ways.
func TestMaxPrivateData(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	maxPrivateDataFlow(t, srv, cli, loopback())
}

func TestMaxPrivateDataRoCE(t *testing.T) {
	srv, cli := roceSides(t)
	maxPrivateDataFlow(t, srv, cli, roceSrv)
}

func maxPrivateDataFlow(t *testing.T, srv, cli *side, srvAddr net.Addr) {
	_, p, _ := cli.ia.Query(0, 0)
	pd := make([]byte, p.MaxPrivateDataSize)
	for i := range pd {
		pd[i] = byte(i)
	}
	psp, qual, _ := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	defer psp.Free()
	if err := cli.ep.Connect(srvAddr, qual, waitT, append(pd, 0xEE), 0, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("one byte too many: %v", err)
	}
	if err := cli.ep.Connect(srvAddr, qual, waitT, pd, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if !bytes.HasPrefix(ev.CR.CR.PrivateData(), pd) {
		t.Fatalf("request private data: %d bytes", len(ev.CR.CR.PrivateData()))
	}
	if err := ev.CR.CR.Accept(srv.ep, pd); err != nil {
		t.Fatal(err)
	}
	if ce := cli.waitConn(ConnectionEventEstablished); !bytes.HasPrefix(ce.Conn.PrivateData, pd) {
		t.Fatalf("reply private data: %d bytes", len(ce.Conn.PrivateData))
	}
}

// Two opens of the same provider may share a connection EVD (OFA DAPL
// allows it; dapltest's limit tests rely on it); completion EVDs and
// instances of other providers stay apart.
func TestConnEVDSharedAcrossInstances(t *testing.T) {
	r := NewRegistry()
	for _, n := range []string{"a", "b"} {
		if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: n, VersionMajor: 2}, InstanceData: "iwarp 127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	open := func(name string) *IA {
		ia, _, err := r.OpenIA(name, 16, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ia.Close(CloseAbrupt) })
		return ia
	}
	ia1, ia2, other := open("a"), open("a"), open("b")
	conn := mustEVD(t, ia1, 8, nil, EVDConnection)
	dto1 := mustEVD(t, ia1, 8, nil, EVDDTO)
	pz2, err := ia2.CreatePZ()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ia2.CreateEP(pz2, dto1, nil, nil, nil); !errors.Is(err, ErrInvalidHandleEVDRecv) {
		t.Fatalf("completion EVD of another instance: %v", err)
	}
	pzo, err := other.CreatePZ()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.CreateEP(pzo, nil, nil, conn, nil); !errors.Is(err, ErrInvalidHandleEVDConn) {
		t.Fatalf("connection EVD of another provider: %v", err)
	}
	dto2 := mustEVD(t, ia2, 8, nil, EVDDTO)
	ep, err := ia2.CreateEP(pz2, dto2, dto2, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Free(); !errors.Is(err, ErrInvalidStateEVDInUse) {
		t.Fatalf("free of a connection EVD feeding another instance's EP: %v", err)
	}
	srv := newSide(t, "server")
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer psp.Free()
	if err := ep.Connect(loopback(), qual, waitT, nil, QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	if err := srv.wait(srv.cr).CR.CR.Accept(srv.ep, nil); err != nil {
		t.Fatal(err)
	}
	ev, _, err := conn.Wait(context.Background(), waitT, 1)
	if err != nil || ev.Number != ConnectionEventEstablished || ev.Conn.EP != ep || ev.EVD != conn {
		t.Fatalf("%v %+v", err, ev)
	}
}

// TestProviderRoCEConfig: Provider.RoCE configures the RoCEv2 transport of the
// provider's IAs (the strict ICRC switch of issue 10), and the zero Provider keeps
// rocev2's defaults.
func TestProviderRoCEConfig(t *testing.T) {
	r := NewRegistry()
	ro := rocev2.DefaultConfig()
	ro.StrictICRC = true
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "strict", VersionMajor: 2}, InstanceData: "rocev2 127.0.0.1:0", RoCE: ro})
	r.AddProvider(&Provider{Info: ProviderInfo{Name: "plain", VersionMajor: 2}, InstanceData: "rocev2 127.0.0.1:0"})
	for name, want := range map[string]bool{"strict": true, "plain": false} {
		ia, _, err := r.OpenIA(name, 16, nil)
		if err != nil {
			t.Fatal(name, err)
		}
		got := ia.tr.Endpoint().Config().StrictICRC
		ia.Close(CloseAbrupt)
		if got != want {
			t.Fatalf("%s: StrictICRC %v, want %v", name, got, want)
		}
	}
	ro.StrictICRC = false // the IA took a copy
}
