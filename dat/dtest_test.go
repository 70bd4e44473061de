package dat

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// A port of the flow of OFA DAPL's dtest over the iWARP transport in one
// process: connect through a PSP, exchange RMR contexts with Sends, RDMA
// Write and Read ping-pong, disconnect.

const waitT = 10 * time.Second

type side struct {
	t        testing.TB
	ia       *IA
	pz       *PZ
	dto, cr  *EVD
	conn     *EVD
	ep       *EP
	buf      []byte
	lmr      *LMR
	sendBuf  []byte
	sendLMR  *LMR
	recvBuf  []byte
	recvLMR  *LMR
	rmr      *RMR
	peer     RMRTriplet
	peerRecv RMRTriplet
}

func newSide(t testing.TB, name string) *side { return newSideOn(t, "iwarp 127.0.0.1") }

func newSideOn(t testing.TB, instance string) *side {
	t.Helper()
	s := &side{t: t}
	var err error
	s.ia, _ = testIAOn(t, instance)
	if s.pz, err = s.ia.CreatePZ(); err != nil {
		t.Fatal(err)
	}
	s.dto = mustEVD(t, s.ia, 64, nil, EVDDTO|EVDRMRBind)
	s.cr = mustEVD(t, s.ia, 8, nil, EVDCR)
	s.conn = mustEVD(t, s.ia, 8, nil, EVDConnection)
	if s.ep, err = s.ia.CreateEP(s.pz, s.dto, s.dto, s.conn, nil); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 4096)
	s.sendBuf = make([]byte, 64)
	s.recvBuf = make([]byte, 64)
	if s.lmr, err = s.ia.CreateLMR(s.buf, s.pz, MemPrivAll, VATypeVA); err != nil {
		t.Fatal(err)
	}
	if s.sendLMR, err = s.ia.CreateLMR(s.sendBuf, s.pz, MemPrivLocalRead|MemPrivLocalWrite, VATypeVA); err != nil {
		t.Fatal(err)
	}
	if s.recvLMR, err = s.ia.CreateLMR(s.recvBuf, s.pz, MemPrivLocalRead|MemPrivLocalWrite, VATypeVA); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) wait(e *EVD) Event {
	s.t.Helper()
	ev, _, err := e.Wait(context.Background(), waitT, 1)
	if err != nil {
		s.t.Fatalf("wait: %v", err)
	}
	return ev
}

func (s *side) waitDTO(op DTOOp, cookie uint64) DTOCompletion {
	s.t.Helper()
	ev := s.wait(s.dto)
	if ev.Number != DTOCompletionEvent || ev.DTO.Status != DTOSuccess || ev.DTO.Op != op || ev.DTO.Cookie != cookie {
		s.t.Fatalf("want %v cookie %d, got %v %+v", op, cookie, ev.Number, ev.DTO)
	}
	return ev.DTO
}

func (s *side) waitConn(n EventNumber) Event {
	s.t.Helper()
	ev := s.wait(s.conn)
	if ev.Number != n {
		s.t.Fatalf("want %v, got %v", n, ev.Number)
	}
	return ev
}

func loopback() net.Addr { return &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// connectPair connects client to server through a consumer PSP.
func connectPair(t testing.TB, srv, cli *side, pd []byte) {
	t.Helper()
	connectPairTo(t, srv, cli, pd, loopback())
}

func connectPairTo(t testing.TB, srv, cli *side, pd []byte, srvAddr net.Addr) {
	t.Helper()
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	defer psp.Free()
	if err := cli.ep.Connect(srvAddr, qual, waitT, pd, QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if ev.Number != ConnectionRequestEvent || ev.CR.SP != psp || ev.CR.ConnQual != qual {
		t.Fatalf("CR event %+v", ev)
	}
	cr := ev.CR.CR
	p, err := cr.Query(CRFieldAll)
	// IB CM private data is fixed-size and zero padded (RoCEv2); MPA carries the length
	if err != nil || !bytes.Equal(bytes.TrimRight(p.PrivateData, "\x00"), pd) || p.LocalEP != nil {
		t.Fatalf("cr query %+v %v", p, err)
	}
	if err := cr.Accept(srv.ep, []byte("accept")); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventEstablished)
	ce := cli.waitConn(ConnectionEventEstablished)
	if string(bytes.TrimRight(ce.Conn.PrivateData, "\x00")) != "accept" || ce.Conn.EP != cli.ep {
		t.Fatalf("client established %+v", ce.Conn)
	}
	if cli.ep.State() != EPStateConnected || srv.ep.State() != EPStateConnected {
		t.Fatal("not connected")
	}
}

func putTriplet(b []byte, r RMRTriplet) {
	binary.BigEndian.PutUint32(b[0:], r.RMRContext)
	binary.BigEndian.PutUint64(b[4:], r.TargetAddress)
	binary.BigEndian.PutUint64(b[12:], r.SegmentLength)
}

func getTriplet(b []byte) RMRTriplet {
	return RMRTriplet{RMRContext: binary.BigEndian.Uint32(b[0:]), TargetAddress: binary.BigEndian.Uint64(b[4:]),
		SegmentLength: binary.BigEndian.Uint64(b[12:])}
}

// exchange binds an RMR over the buffer and sends its triplet to the peer
// (dtest's "exchange RMR info" step).
func exchange(t testing.TB, a, b *side) {
	t.Helper()
	for _, s := range []*side{a, b} {
		if err := s.ep.PostRecv([]LMRTriplet{s.recvLMR.Triplet(0, 64)}, 100, CompletionDefault); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*side{a, b} {
		var err error
		if s.rmr, err = s.pz.CreateRMR(); err != nil {
			t.Fatal(err)
		}
		ctx, err := s.rmr.Bind(s.lmr, s.lmr.Triplet(0, len(s.buf)), MemPrivRemoteRead|MemPrivRemoteWrite, VATypeVA, s.ep, 7, CompletionDefault)
		if err != nil {
			t.Fatal(err)
		}
		ev := s.wait(s.dto)
		if ev.Number != RMRBindCompletionEvent || ev.RMRBind.Status != DTOSuccess || ev.RMRBind.Cookie != 7 || ev.RMRBind.RMR != s.rmr {
			t.Fatalf("bind completion %+v", ev)
		}
		if s.rmr.Context() != ctx {
			t.Fatal("rmr context")
		}
	}
	for _, s := range []*side{a, b} {
		putTriplet(s.sendBuf, s.rmr.Triplet(0, len(s.buf)))
		if err := s.ep.PostSend([]LMRTriplet{s.sendLMR.Triplet(0, 20)}, 200, CompletionDefault); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*side{a, b} {
		// the Send and the Recv complete on the same EVD in either order
		got := map[DTOOp]DTOCompletion{}
		for i := 0; i < 2; i++ {
			ev := s.wait(s.dto)
			if ev.DTO.Status != DTOSuccess {
				t.Fatalf("%+v", ev.DTO)
			}
			got[ev.DTO.Op] = ev.DTO
		}
		if r := got[DTOReceive]; r.Cookie != 100 || r.Length != 20 {
			t.Fatalf("recv %+v", r)
		}
		if s := got[DTOSend]; s.Cookie != 200 || s.Length != 20 {
			t.Fatalf("send %+v", s)
		}
		s.peer = getTriplet(s.recvBuf)
	}
}

func TestDTestFlow(t *testing.T) {
	dtestFlow(t, newSide(t, "server"), newSide(t, "client"), loopback())
}

// TestDTestFlowRoCE runs the same flow over the RoCEv2 transport: two IAs on
// UDP sockets at 127.0.0.2 and 127.0.0.3 (same port, as RoCE peers use).
func TestDTestFlowRoCE(t *testing.T) {
	srv, cli := roceSides(t)
	dtestFlow(t, srv, cli, &net.IPAddr{IP: net.IPv4(127, 0, 0, 2)})
}

func roceSides(t testing.TB) (*side, *side) {
	t.Helper()
	for try := 0; try < 20; try++ {
		c, err := net.ListenPacket("udp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("no 127.0.0.2 loopback: %v", err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c.Close()
		r := NewRegistry()
		r.AddProvider(&Provider{Info: ProviderInfo{Name: "r1", VersionMajor: 2}, InstanceData: fmt.Sprintf("rocev2 127.0.0.2:%d", port)})
		ia1, _, err1 := r.OpenIA("r1", 16, nil)
		r.AddProvider(&Provider{Info: ProviderInfo{Name: "r2", VersionMajor: 2}, InstanceData: fmt.Sprintf("rocev2 127.0.0.3:%d", port)})
		ia2, _, err2 := r.OpenIA("r2", 16, nil)
		if ia1 != nil {
			ia1.Close(CloseAbrupt)
		}
		if ia2 != nil {
			ia2.Close(CloseAbrupt)
		}
		if err1 != nil || err2 != nil {
			continue // the port was taken in between
		}
		return newSideOn(t, fmt.Sprintf("rocev2 127.0.0.2:%d", port)), newSideOn(t, fmt.Sprintf("rocev2 127.0.0.3:%d", port))
	}
	t.Fatal("no free UDP port pair")
	return nil, nil
}

func dtestFlow(t *testing.T, srv, cli *side, srvAddr net.Addr) {
	// the RDMA Read source is filled before the connection exists: the
	// responder's goroutine reads it with no Go synchronization to the test
	for i := range srv.buf[:512] {
		srv.buf[i] = byte(i * 7)
	}
	connectPairTo(t, srv, cli, []byte("dtest hello"), srvAddr)
	exchange(t, srv, cli)

	// RDMA Write ping-pong: each side writes a message into the peer's
	// buffer, then signals it with a Send (dtest's rdma write / send pair).
	for i := 0; i < 10; i++ {
		src, dst := cli, srv
		if i%2 == 1 {
			src, dst = srv, cli
		}
		msg := []byte{byte(i), 'p', 'i', 'n', 'g', byte(i * 3)}
		copy(src.buf[1024:], msg)
		if err := dst.ep.PostRecv([]LMRTriplet{dst.recvLMR.Triplet(0, 64)}, uint64(300+i), CompletionDefault); err != nil {
			t.Fatal(err)
		}
		remote := src.peer
		remote.TargetAddress += 2048
		remote.SegmentLength = uint64(len(msg))
		if err := src.ep.PostRDMAWrite([]LMRTriplet{src.lmr.Triplet(1024, len(msg))}, uint64(400+i), remote, CompletionSuppress); err != nil {
			t.Fatal(err)
		}
		if err := src.ep.PostSend(nil, uint64(500+i), CompletionDefault); err != nil {
			t.Fatal(err)
		}
		src.waitDTO(DTOSend, uint64(500+i)) // the suppressed Write has no completion
		r := dst.waitDTO(DTOReceive, uint64(300+i))
		if r.Length != 0 {
			t.Fatalf("zero-byte send delivered %d bytes", r.Length)
		}
		if !bytes.Equal(dst.buf[2048:2048+len(msg)], msg) {
			t.Fatalf("round %d: write did not land: %v", i, dst.buf[2048:2048+len(msg)])
		}
	}

	// RDMA Read: the client reads the server's buffer.
	remote := cli.peer
	remote.SegmentLength = 512
	if err := cli.ep.PostRDMARead([]LMRTriplet{cli.lmr.Triplet(3000, 256), cli.lmr.Triplet(3500, 256)}, 600, remote, CompletionDefault); err != nil {
		t.Fatal(err)
	}
	if d := cli.waitDTO(DTORDMARead, 600); d.Length != 512 {
		t.Fatalf("read length %d", d.Length)
	}
	if !bytes.Equal(cli.buf[3000:3256], srv.buf[:256]) || !bytes.Equal(cli.buf[3500:3756], srv.buf[256:512]) {
		t.Fatal("read data mismatch")
	}

	// disconnect: the client disconnects gracefully, both see DISCONNECTED
	if err := cli.ep.Disconnect(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventDisconnected)
	srv.waitConn(ConnectionEventDisconnected)
	if cli.ep.State() != EPStateDisconnected || srv.ep.State() != EPStateDisconnected {
		t.Fatal(cli.ep.State(), srv.ep.State())
	}
	// posting in Disconnected flushes
	if err := cli.ep.PostSend(nil, 700, CompletionDefault); err != nil {
		t.Fatal(err)
	}
	for {
		ev := cli.wait(cli.dto)
		if ev.DTO.Cookie == 700 {
			if ev.DTO.Status != DTOErrFlushed {
				t.Fatalf("post after disconnect: %+v", ev.DTO)
			}
			break
		}
	}
	if err := cli.ep.Reset(); err != nil || cli.ep.State() != EPStateUnconnected {
		t.Fatal(err, cli.ep.State())
	}
}

func TestConnectRejectAndUnreachable(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	psp, err := srv.ia.CreatePSP(0, srv.cr, PSPConsumer)
	if !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("qual 0: %v", err)
	}
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ia.CreatePSP(qual, srv.cr, PSPConsumer); !errors.Is(err, ErrConnQualInUse) {
		t.Fatalf("dup qual: %v", err)
	}
	if err := cli.ep.Connect(loopback(), qual, waitT, []byte("hi"), QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	if err := cli.ep.Connect(loopback(), qual, waitT, nil, QoSBestEffort, ConnectDefault); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("second connect: %v", err)
	}
	ev := srv.wait(srv.cr)
	if err := ev.CR.CR.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	if err := ev.CR.CR.Reject(nil); !errors.Is(err, ErrInvalidHandleCR) {
		t.Fatalf("reject twice: %v", err)
	}
	ce := cli.waitConn(ConnectionEventPeerRejected)
	if string(ce.Conn.PrivateData) != "go away" {
		t.Fatalf("reject private data %q", ce.Conn.PrivateData)
	}
	if cli.ep.State() != EPStateDisconnected {
		t.Fatal(cli.ep.State())
	}
	// nobody listening: non-peer reject
	psp.Free()
	if err := cli.ep.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := cli.ep.Connect(loopback(), qual, waitT, nil, QoSBestEffort, ConnectDefault); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventNonPeerRejected)
}

// TestDTestFlowRoCEOneIP: two IAs on one IP, each on a UDP port of its own (as two
// processes on one host without a daemon), run the dtest flow over RoCEv2: the client
// names the server's UDP port in a *net.UDPAddr, and the server answers the client's
// port (IBTA A17.3: the requester's source port is its own).
func TestDTestFlowRoCEOneIP(t *testing.T) {
	const ip = "127.0.0.6"
	// two free ports below 0xC000 (rocev2.ListenUDP's choice for port 0: the range above
	// is RoCEv2's source-port entropy), both held until both are known
	var ports [2]int
	var links [2]*rocev2.UDPLink
	for i := range links {
		l, err := rocev2.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr(ip), 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		links[i], ports[i] = l, int(l.LocalAddr().Port())
	}
	for _, l := range links {
		l.Close()
	}
	srv := newSideOn(t, fmt.Sprintf("rocev2 %s:%d", ip, ports[0]))
	cli := newSideOn(t, fmt.Sprintf("rocev2 %s:%d", ip, ports[1]))
	dtestFlow(t, srv, cli, &net.UDPAddr{IP: net.ParseIP(ip), Port: ports[0]})
}
