package dat

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// §6.5 SRQ, §6.6.20–25 DTOs, §6.7 memory, §6.8 completions, extensions.

func TestSRQ(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	if _, err := srv.ia.CreateSRQ(srv.pz, SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1, LowWatermark: 2}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("non-default LW at create: %v", err)
	}
	if _, err := srv.ia.CreateSRQ(nil, SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1}); !errors.Is(err, ErrInvalidHandlePZ) {
		t.Fatal(err)
	}
	srq, err := srv.ia.CreateSRQ(srv.pz, SRQAttr{MaxRecvDTOs: 4, MaxRecvIOV: 1})
	if err != nil {
		t.Fatal(err)
	}
	pz2, _ := srv.ia.CreatePZ()
	if _, err := srv.ia.CreateEPWithSRQ(pz2, srv.dto, srv.dto, srv.conn, srq, &EPAttr{}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("PZ mismatch: %v", err)
	}
	if _, err := srv.ia.CreateEPWithSRQ(srv.pz, srv.dto, srv.dto, srv.conn, srq, nil); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("nil attributes: %v", err)
	}
	attr := DefaultEPAttr()
	ep, err := srv.ia.CreateEPWithSRQ(srv.pz, srv.dto, srv.dto, srv.conn, srq, &attr)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := ep.Query(EPFieldAll); p.SRQ != srq || p.Attr.MaxRecvDTOs != 4 {
		t.Fatalf("%+v", p)
	}
	if err := ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 8)}, 1, 0); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("post_recv on an SRQ EP: %v", err)
	}
	if err := srq.Free(); !errors.Is(err, ErrInvalidStateSRQInUse) {
		t.Fatal(err)
	}
	if n, s, err := ep.RecvQuery(); err != nil || n != 0 || s != 0 {
		t.Fatal(n, s, err)
	}
	ep2, _ := srv.ia.CreateEPWithSRQ(srv.pz, srv.dto, srv.dto, srv.conn, srq, &attr)
	if n, s, err := ep.RecvQuery(); err != nil || n != 0 || s != 0 {
		t.Fatalf("shared SRQ: %d %d %v", n, s, err)
	}
	ep2.Free()
	for i := 0; i < 4; i++ {
		if err := srq.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(i*16, 16)}, uint64(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 16)}, 99); !errors.Is(err, ErrInsufficientResources) {
		t.Fatalf("over max_recv_dtos: %v", err)
	}
	p, _ := srq.Query(SRQFieldAll)
	if p.AvailableDTOCount != 4 || p.OutstandingDTOCount != 4 || p.MaxRecvDTOs != 4 || p.State != SRQStateOperational {
		t.Fatalf("%+v", p)
	}
	if err := srq.Resize(3); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if err := srq.SetLW(5); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := srq.SetLW(3); err != nil {
		t.Fatal(err)
	}
	srv.ep = ep
	connectPair(t, srv, cli, nil)
	for i := 0; i < 2; i++ {
		copy(cli.sendBuf, []byte{byte(i), 'S'})
		if err := cli.ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(0, 2)}, 0, CompletionSuppress); err != nil {
			t.Fatal(err)
		}
		d := srv.waitDTO(DTOReceive, uint64(10+i))
		if d.Length != 2 || srv.recvBuf[i*16] != byte(i) {
			t.Fatalf("%+v %v", d, srv.recvBuf[i*16:i*16+2])
		}
	}
	if n, s, err := ep.RecvQuery(); err != nil || n != 0 || s != 0 {
		t.Fatalf("after the messages completed: %d %d %v", n, s, err)
	}
	// the first take dropped the SRQ below 3 buffers: one async event
	_, async := srv.ia, srv.ia.AsyncEVD()
	ev, _, err := async.Wait(nil, waitT, 1)
	if err != nil || ev.Number != SRQLowWatermarkEvent || ev.Async.Handle != srq || ev.Async.Reason != SRQLowWatermarkReason {
		t.Fatalf("%+v %v", ev, err)
	}
	if _, err := async.Dequeue(); !errors.Is(err, ErrQueueEmpty) {
		t.Fatal("low watermark fired twice")
	}
	if p, _ := srq.Query(SRQFieldAll); p.OutstandingDTOCount != 2 || p.AvailableDTOCount != 2 || p.LowWatermark != 3 {
		t.Fatalf("%+v", p)
	}
	// arming below the current count fires at once
	if err := srq.SetLW(4); err != nil {
		t.Fatal(err)
	}
	if ev, err := async.Dequeue(); err != nil || ev.Number != SRQLowWatermarkEvent {
		t.Fatal(ev, err)
	}
	if err := srq.Resize(8); err != nil {
		t.Fatal(err)
	}
	ep.Free()
	if err := srq.Free(); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(nil, 0); !errors.Is(err, ErrInvalidHandleSRQ) {
		t.Fatal(err)
	}
}

func TestMemoryObjects(t *testing.T) {
	s := newSide(t, "m")
	ia := s.ia
	if err := s.pz.Free(); !errors.Is(err, ErrInvalidStatePZInUse) {
		t.Fatal(err)
	}
	if p, err := s.pz.Query(PZFieldAll); err != nil || p.IA != ia {
		t.Fatal(p, err)
	}
	if _, err := ia.CreateLMR(nil, s.pz, MemPrivAll, VATypeVA); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, err := ia.CreateLMR(make([]byte, 8), s.pz, 0x1000, VATypeVA); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, err := ia.CreateLMR(make([]byte, 8), nil, MemPrivAll, VATypeVA); !errors.Is(err, ErrInvalidHandlePZ) {
		t.Fatal(err)
	}
	zb, err := ia.CreateLMR(make([]byte, 64), s.pz, MemPrivLocalRead, VATypeZB)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := zb.Query(LMRFieldAll)
	if p.RegisteredAddress != 0 || p.RegisteredSize != 64 || p.VAType != VATypeZB || p.LMRContext != p.RMRContext || p.MemType != MemTypeVirtual {
		t.Fatalf("%+v", p)
	}
	alias, err := ia.CreateLMRFromLMR(s.lmr, s.pz, MemPrivLocalRead, VATypeVA)
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := alias.Query(LMRFieldAll); q.MemType != MemTypeLMR || q.RegisteredAddress != s.lmr.RegisteredAddress() || q.LMRContext == s.lmr.LMRContext() {
		t.Fatalf("%+v", q)
	}
	if err := ia.SyncRDMARead([]LMRTriplet{s.lmr.Triplet(0, 16)}); err != nil {
		t.Fatal(err)
	}
	if err := ia.SyncRDMAWrite([]LMRTriplet{s.lmr.Triplet(4090, 16)}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	rmr, err := s.pz.CreateRMR()
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := rmr.Query(RMRFieldAll); q.Scope != RMRScopePZ || q.RMRContext != 0 || q.PZ != s.pz {
		t.Fatalf("%+v", q)
	}
	// bind needs a connected (or disconnected) EP
	if _, err := rmr.Bind(s.lmr, s.lmr.Triplet(0, 16), MemPrivRemoteRead, VATypeVA, s.ep, 0, 0); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if _, err := rmr.Bind(zb, zb.Triplet(0, 16), MemPrivRemoteRead, VATypeVA, s.ep, 0, 0); !errors.Is(err, ErrModelNotSupported) {
		t.Fatalf("va type mismatch: %v", err)
	}
	if _, err := rmr.Bind(zb, zb.Triplet(0, 16), MemPrivRemoteWrite, VATypeZB, s.ep, 0, 0); !errors.Is(err, ErrPrivilegesViolation) {
		t.Fatalf("remote write over a read-only LMR: %v", err)
	}
	if _, err := rmr.Bind(s.lmr, s.lmr.Triplet(4000, 200), MemPrivRemoteRead, VATypeVA, s.ep, 0, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("outside the LMR: %v", err)
	}
	rep, err := s.pz.CreateRMRForEP(s.ep)
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := rep.Query(RMRFieldScope); q.Scope != RMRScopeEP {
		t.Fatal(q.Scope)
	}
	if err := rmr.Free(); err != nil {
		t.Fatal(err)
	}
	if err := rmr.Free(); !errors.Is(err, ErrInvalidHandleRMR) {
		t.Fatal(err)
	}
	if err := zb.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := zb.Query(LMRFieldAll); !errors.Is(err, ErrInvalidHandleLMR) {
		t.Fatal(err)
	}
}

func TestPostErrors(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	connectPair(t, srv, cli, nil)
	ep := cli.ep
	ro, _ := cli.ia.CreateLMR(make([]byte, 64), cli.pz, MemPrivLocalRead, VATypeVA)
	pz2, _ := cli.ia.CreatePZ()
	other, _ := cli.ia.CreateLMR(make([]byte, 64), pz2, MemPrivAll, VATypeVA)
	remote := RMRTriplet{RMRContext: 1, TargetAddress: 0, SegmentLength: 8}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"unsignalled without EP notification control", ep.PostSend(nil, 0, CompletionUnsignalled), ErrInvalidParameter},
		{"bad flag", ep.PostSend(nil, 0, 0x80), ErrInvalidParameter},
		{"unknown LMR", ep.PostSend([]LMRTriplet{{LMRContext: 0x7777, SegmentLength: 1}}, 0, 0), ErrPrivilegesViolation},
		{"other PZ", ep.PostSend([]LMRTriplet{other.Triplet(0, 8)}, 0, 0), ErrProtectionViolation},
		{"outside LMR", ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(60, 8)}, 0, 0), ErrInvalidParameter},
		{"too many segments", ep.PostSend(make([]LMRTriplet, 5), 0, 0), ErrInvalidParameter},
		{"read into read-only LMR", ep.PostRDMARead([]LMRTriplet{ro.Triplet(0, 8)}, 0, remote, 0), ErrPrivilegesViolation},
		{"remote too small", ep.PostRDMAWrite([]LMRTriplet{cli.lmr.Triplet(0, 16)}, 0, remote, 0), ErrLengthError},
		{"recv suppress", ep.PostRecv([]LMRTriplet{cli.recvLMR.Triplet(0, 8)}, 0, CompletionSuppress), ErrInvalidParameter},
		{"recv into read-only LMR", ep.PostRecv([]LMRTriplet{ro.Triplet(0, 8)}, 0, 0), ErrPrivilegesViolation},
		{"atomic length", ep.PostFetchAdd(cli.lmr.Triplet(0, 4), 1, remote, 0, 0), ErrLengthError},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	var nilEP *EP
	if err := nilEP.PostSend(nil, 0, 0); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatal(err)
	}
	// a remote protection error is reported in the completion and breaks the connection
	if err := ep.PostRDMAWrite([]LMRTriplet{cli.lmr.Triplet(0, 8)}, 42, RMRTriplet{RMRContext: 0x12345, SegmentLength: 8}, 0); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventBroken)
	cli.waitConn(ConnectionEventBroken)
}

func TestCompletionFlags(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	// client EP with notification-suppression on requests; server recv with solicited wait
	attr := DefaultEPAttr()
	attr.RequestCompletionFlags = CompletionUnsignalled
	ep, err := cli.ia.CreateEP(cli.pz, cli.dto, cli.dto, cli.conn, &attr)
	if err != nil {
		t.Fatal(err)
	}
	cli.ep.Free()
	cli.ep = ep
	sattr := DefaultEPAttr()
	sattr.RecvCompletionFlags = CompletionSolicitedWait
	sdto := mustEVD(t, srv.ia, 16, nil, EVDDTO)
	sep, err := srv.ia.CreateEP(srv.pz, sdto, srv.dto, srv.conn, &sattr)
	if err != nil {
		t.Fatal(err)
	}
	srv.ep.Free()
	srv.ep = sep
	connectPair(t, srv, cli, nil)
	if p, _ := cli.dto.Query(EVDFieldState); p.State&0x30 != EVDStateConfigNotify {
		t.Fatal(p.State)
	}
	if p, _ := sdto.Query(EVDFieldState); p.State&0x30 != EVDStateConfigSolicited {
		t.Fatal(p.State)
	}
	for i := 0; i < 2; i++ {
		sep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 16)}, uint64(i), 0)
	}
	// un-notified send, then solicited send: the server waiter wakes only for the second
	if err := ep.PostSend(nil, 1, CompletionUnsignalled); err != nil {
		t.Fatal(err)
	}
	if err := ep.PostSend(nil, 2, CompletionSolicitedWait); err != nil {
		t.Fatal(err)
	}
	ev, _, err := sdto.Wait(nil, waitT, 1)
	if err != nil || ev.DTO.Cookie != 0 {
		t.Fatal(ev, err)
	}
	for sdto.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	if ev, _ := sdto.Dequeue(); ev.DTO.Cookie != 1 {
		t.Fatal(ev)
	}
	// client: both sends completed; a threshold wait of 2 is refused on a notify EVD
	if _, _, err := cli.dto.Wait(nil, 0, 2); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	got := 0
	for got < 2 {
		ev, err := cli.dto.Dequeue()
		if err == nil {
			if ev.DTO.Status != DTOSuccess {
				t.Fatal(ev.DTO)
			}
			got++
		}
	}
}

func TestExtensions(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	// the target memory is only read back through RDMA results (the
	// responder's goroutine writes it with no Go synchronization to the test)
	atom, _ := srv.ia.CreateLMR(make([]byte, 16), srv.pz, MemPrivAll|MemPrivRemoteAtomic, VATypeVA)
	binary.LittleEndian.PutUint64(atom.mem, 40)
	connectPair(t, srv, cli, nil)
	remote := atom.RMRTriplet(0, 8)
	res := cli.lmr.Triplet(0, 8)
	step := func(post func() error, op DTOOp, want uint64) {
		t.Helper()
		if err := post(); err != nil {
			t.Fatal(err)
		}
		ev := cli.wait(cli.dto)
		if ev.Number != IWExtensionDTOEvent || ev.DTO.Op != op || ev.DTO.Status != DTOSuccess {
			t.Fatalf("%+v", ev)
		}
		if got := binary.LittleEndian.Uint64(cli.buf); got != want {
			t.Fatalf("%v returned %d, want %d", op, got, want)
		}
	}
	step(func() error { return cli.ep.PostFetchAdd(res, 2, remote, 1, 0) }, DTOExtFetchAdd, 40)
	step(func() error { return cli.ep.PostCompareSwap(res, 42, 7, remote, 2, 0) }, DTOExtCompareSwap, 42)
	step(func() error { return cli.ep.PostCompareSwap(res, 42, 9, remote, 3, 0) }, DTOExtCompareSwap, 7)
	step(func() error { return cli.ep.PostFetchAdd(res, 0, remote, 4, 0) }, DTOExtFetchAdd, 7)
	// RDMA write with immediate consumes a receive at the peer
	srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 8)}, 77, 0)
	copy(cli.buf[100:], "immed")
	rt := srv.lmr.RMRTriplet(10, 5)
	if err := cli.ep.PostRDMAWriteImmed([]LMRTriplet{cli.lmr.Triplet(100, 5)}, 3, rt, 0xCAFE, 0); err != nil {
		t.Fatal(err)
	}
	if ev := cli.wait(cli.dto); ev.DTO.Op != DTOExtRDMAWriteImmed || ev.DTO.Status != DTOSuccess {
		t.Fatalf("%+v", ev)
	}
	ev := srv.wait(srv.dto)
	if ev.Number != IWExtensionDTOEvent || ev.DTO.Op != DTOExtRecvImmed || ev.DTO.Immediate != 0xCAFE || ev.DTO.Cookie != 77 {
		t.Fatalf("%+v", ev)
	}
	if string(srv.buf[10:15]) != "immed" {
		t.Fatal(string(srv.buf[10:15]))
	}
}

// Send with invalidate (§6.6.21) and read into an RMR (§6.6.24).
func TestSendInvalidateAndReadToRMR(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	connectPair(t, srv, cli, nil)
	exchange(t, srv, cli)
	// client reads the server buffer into memory behind its own RMR
	copy(srv.buf[:4], "rmr!")
	local := cli.rmr.Triplet(200, 4)
	rem := cli.peer
	rem.SegmentLength = 4
	if err := cli.ep.PostRDMAReadToRMR(local, 5, rem, 0); err != nil {
		t.Fatal(err)
	}
	cli.waitDTO(DTORDMARead, 5)
	if string(cli.buf[200:204]) != "rmr!" {
		t.Fatal(string(cli.buf[200:204]))
	}
	if err := cli.ep.PostRDMAReadToRMR(RMRTriplet{RMRContext: 0xdead00, SegmentLength: 4}, 5, rem, 0); !errors.Is(err, ErrPrivilegesViolation) {
		t.Fatal(err)
	}
	// the client invalidates an EP-scoped RMR of the server with its Send
	erm, err := srv.pz.CreateRMRForEP(srv.ep)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := erm.Bind(srv.lmr, srv.lmr.Triplet(0, 64), MemPrivRemoteWrite, VATypeVA, srv.ep, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev := srv.wait(srv.dto); ev.Number != RMRBindCompletionEvent || ev.RMRBind.Status != DTOSuccess {
		t.Fatalf("%+v", ev)
	}
	srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 8)}, 8, 0)
	if err := cli.ep.PostSendWithInvalidate(nil, 6, 0, true, ctx); err != nil {
		t.Fatal(err)
	}
	cli.waitDTO(DTOSend, 6)
	d := srv.waitDTO(DTOReceiveWithInvalidate, 8)
	if d.RMRContext != ctx {
		t.Fatalf("invalidated %#x, want %#x", d.RMRContext, ctx)
	}
	// the invalidated context no longer grants access: rebinding yields a new one
	ctx2, err := erm.Bind(srv.lmr, srv.lmr.Triplet(0, 64), MemPrivRemoteWrite, VATypeVA, srv.ep, 10, 0)
	if err != nil || ctx2 == ctx {
		t.Fatal(ctx2, err)
	}
	if ev := srv.wait(srv.dto); ev.Number != RMRBindCompletionEvent || ev.RMRBind.Status != DTOSuccess || ev.RMRBind.Cookie != 10 {
		t.Fatalf("%+v", ev)
	}
	// and binding again while bound invalidates locally first
	ctx3, err := erm.Bind(srv.lmr, srv.lmr.Triplet(0, 32), MemPrivRemoteWrite, VATypeVA, srv.ep, 11, 0)
	if err != nil || ctx3 == ctx2 {
		t.Fatal(ctx3, err)
	}
	if ev := srv.wait(srv.dto); ev.Number != RMRBindCompletionEvent || ev.RMRBind.Status != DTOSuccess || ev.RMRBind.Cookie != 11 {
		t.Fatalf("%+v", ev)
	}
}

func TestEPModifyQueryStatus(t *testing.T) {
	s := newSide(t, "e")
	p, err := s.ep.Query(EPFieldAll)
	if err != nil || p.State != EPStateUnconnected || p.PZ != s.pz || p.RecvEVD != s.dto || p.Attr != DefaultEPAttr() {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := s.ep.Query(1 << 40); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	st, ri, qi, err := s.ep.GetStatus()
	if err != nil || st != EPStateUnconnected || !ri || !qi {
		t.Fatal(st, ri, qi, err)
	}
	bad := DefaultEPAttr()
	bad.MaxRequestDTOs = 0
	if _, err := s.ia.CreateEP(s.pz, nil, nil, nil, &bad); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, err := s.ia.CreateEP(s.pz, s.cr, nil, nil, nil); !errors.Is(err, ErrInvalidHandleEVDRecv) {
		t.Fatalf("CR EVD as recv EVD: %v", err)
	}
	if _, err := s.ia.CreateEP(s.pz, nil, nil, s.dto, nil); !errors.Is(err, ErrInvalidHandleEVDConn) {
		t.Fatalf("DTO EVD as connect EVD: %v", err)
	}
	ep, err := s.ia.CreateEP(nil, nil, nil, nil, nil)
	if err != nil || ep.State() != EPStateUnconfiguredUnconnected {
		t.Fatal(ep.State(), err)
	}
	if err := ep.Connect(loopback(), 1, time.Second, nil, 0, 0); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if err := ep.Modify(EPFieldPZHandle, EPParam{PZ: s.pz}); err != nil || ep.State() != EPStateUnconnected {
		t.Fatal(err, ep.State())
	}
	if err := ep.Modify(EPFieldEPState, EPParam{}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	a := DefaultEPAttr()
	a.MaxRecvDTOs = 8
	if err := ep.Modify(EPFieldEPAttrAll, EPParam{Attr: a}); err != nil {
		t.Fatal(err)
	}
	if q, _ := ep.Query(EPFieldEPAttrAll); q.Attr.MaxRecvDTOs != 8 {
		t.Fatal(q.Attr)
	}
	if err := ep.SetWatermark(WatermarkInfinite, WatermarkInfinite); err != nil {
		t.Fatal(err)
	}
	if err := ep.SetWatermark(4, WatermarkInfinite); !errors.Is(err, ErrModelNotSupported) {
		t.Fatal(err)
	}
	if err := ep.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := ep.Free(); err != nil {
		t.Fatal(err)
	}
	if err := ep.Free(); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatal(err)
	}
}

// A DTO completion that overflows its EVD breaks the connection (§6.3.1).
func TestDTOOverflowBreaksConnection(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	small := mustEVD(t, cli.ia, 1, nil, EVDDTO)
	ep, _ := cli.ia.CreateEP(cli.pz, small, small, cli.conn, nil)
	cli.ep.Free()
	cli.ep = ep
	connectPair(t, srv, cli, nil)
	ep.PostSend(nil, 1, 0)
	ep.PostSend(nil, 2, 0)
	ev, _, err := cli.ia.AsyncEVD().Wait(nil, waitT, 1)
	if err != nil || ev.Number != AsyncErrorEVDOverflow || ev.Async.Handle != small {
		t.Fatal(ev, err)
	}
	cli.waitConn(ConnectionEventBroken)
}

// No goroutine survives IA close (issue requirement).
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		srv, cli := newSide(t, "server"), newSide(t, "client")
		connectPair(t, srv, cli, nil)
		exchange(t, srv, cli)
		go cli.dto.Wait(nil, TimeoutInfinite, 5)
		if err := srv.ia.Close(CloseAbrupt); err != nil {
			t.Fatal(err)
		}
		if err := cli.ia.Close(CloseAbrupt); err != nil {
			t.Fatal(err)
		}
		rs, rc := roceSides(t)
		connectPairTo(t, rs, rc, nil, roceSrv)
		exchange(t, rs, rc)
		if err := rc.ia.Close(CloseAbrupt); err != nil {
			t.Fatal(err)
		}
		if err := rs.ia.Close(CloseAbrupt); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestFlagAndStatusMapping(t *testing.T) {
	for _, c := range []struct {
		f    CompletionFlags
		want rnic.SendFlags
	}{
		{CompletionDefault, rnic.Signaled},
		{CompletionSuppress, 0},
		{CompletionSolicitedWait, rnic.Signaled | rnic.Solicited},
		{CompletionBarrierFence | CompletionSuppress, rnic.Fence},
	} {
		if got := sendFlags(c.f); got != c.want {
			t.Errorf("%v -> %v, want %v", c.f, got, c.want)
		}
	}
	for st, want := range map[rnic.Status]DTOStatus{
		rnic.StatusSuccess: DTOSuccess, rnic.StatusLocLenErr: DTOErrLocalLength, rnic.StatusLocQPOpErr: DTOErrLocalEP,
		rnic.StatusLocProtErr: DTOErrLocalProtection, rnic.StatusWRFlushErr: DTOErrFlushed,
		rnic.StatusMWBindErr: RMROperationFailed, rnic.StatusBadRespErr: DTOErrBadResponse,
		rnic.StatusLocAccessErr: DTOErrLocalProtection, rnic.StatusRemInvReqErr: DTOErrRemoteResponder,
		rnic.StatusRemAccessErr: DTOErrRemoteAccess, rnic.StatusRemOpErr: DTOErrRemoteResponder,
		rnic.StatusRetryExcErr: DTOErrTransport, rnic.StatusRNRRetryExcErr: DTOErrReceiverNotReady,
		rnic.StatusRemAbortErr: DTOErrRemoteResponder, rnic.StatusFatalErr: DTOErrLocalEP, rnic.StatusGeneralErr: DTOErrTransport,
	} {
		if got := dtoStatus(st); got != want {
			t.Errorf("%v -> %v, want %v", st, got, want)
		}
	}
}
