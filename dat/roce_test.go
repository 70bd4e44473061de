package dat

import (
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"testing"
)

// Connection models and extensions over the RoCEv2 transport.

var roceSrv = &net.IPAddr{IP: net.IPv4(127, 0, 0, 2)}

func TestRoCERejects(t *testing.T) {
	srv, cli := roceSides(t)
	psp, qual, err := srv.ia.CreatePSPAny(srv.cr, PSPConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ep.Connect(roceSrv, qual, waitT, []byte("hi"), 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if err := ev.CR.CR.Reject([]byte("no")); err != nil {
		t.Fatal(err)
	}
	ce := cli.waitConn(ConnectionEventPeerRejected)
	if string(ce.Conn.PrivateData[:2]) != "no" {
		t.Fatalf("%q", ce.Conn.PrivateData)
	}
	psp.Free()
	cli.ep.Reset()
	// nobody listens on the qualifier any more: the CM rejects (invalid service ID)
	if err := cli.ep.Connect(roceSrv, qual, waitT, nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	cli.waitConn(ConnectionEventNonPeerRejected)
}

func TestRoCERSPAndExtensions(t *testing.T) {
	srv, cli := roceSides(t)
	atom, _ := srv.ia.CreateLMR(make([]byte, 16), srv.pz, MemPrivAll|MemPrivRemoteAtomic, VATypeVA)
	binary.LittleEndian.PutUint64(atom.mem, 100)
	qual := ConnQual(20000 + int(srv.ia.udpPort)%1000)
	if _, err := srv.ia.CreateRSP(qual, srv.ep, srv.cr); err != nil {
		t.Fatal(err)
	}
	if err := cli.ep.Connect(roceSrv, qual, waitT, nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := srv.wait(srv.cr)
	if ev.CR.SP != nil {
		t.Fatal("RSP arrival with an SP")
	}
	if err := ev.CR.CR.Accept(nil, nil); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventEstablished)
	cli.waitConn(ConnectionEventEstablished)
	res := cli.lmr.Triplet(0, 8)
	if err := cli.ep.PostFetchAdd(res, 5, atom.RMRTriplet(0, 8), 1, 0); err != nil {
		t.Fatal(err)
	}
	if ev := cli.wait(cli.dto); ev.DTO.Op != DTOExtFetchAdd || ev.DTO.Status != DTOSuccess || binary.LittleEndian.Uint64(cli.buf) != 100 {
		t.Fatalf("%+v %d", ev.DTO, binary.LittleEndian.Uint64(cli.buf))
	}
	if err := cli.ep.PostCompareSwap(res, 105, 1, atom.RMRTriplet(0, 8), 2, 0); err != nil {
		t.Fatal(err)
	}
	if ev := cli.wait(cli.dto); ev.DTO.Op != DTOExtCompareSwap || ev.DTO.Status != DTOSuccess || binary.LittleEndian.Uint64(cli.buf) != 105 {
		t.Fatalf("%+v %d", ev.DTO, binary.LittleEndian.Uint64(cli.buf))
	}
	srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 8)}, 9, 0)
	copy(cli.buf[64:], "imm")
	if err := cli.ep.PostRDMAWriteImmed([]LMRTriplet{cli.lmr.Triplet(64, 3)}, 3, srv.lmr.RMRTriplet(32, 3), 77, 0); err != nil {
		t.Fatal(err)
	}
	cli.wait(cli.dto)
	ev = srv.wait(srv.dto)
	if ev.DTO.Op != DTOExtRecvImmed || ev.DTO.Immediate != 77 || string(srv.buf[32:35]) != "imm" {
		t.Fatalf("%+v %q", ev.DTO, srv.buf[32:35])
	}
	if err := srv.ep.Disconnect(CloseGraceful); err != nil {
		t.Fatal(err)
	}
	srv.waitConn(ConnectionEventDisconnected)
	cli.waitConn(ConnectionEventDisconnected)
}

// Opening an IA whose RoCEv2 UDP port is taken fails with DAT_INSUFFICIENT_RESOURCES
// (DAT_RESOURCE_DEVICE) and keeps the cause: errors.Is reaches EADDRINUSE.
func TestOpenIAPortInUseKeepsCause(t *testing.T) {
	// a taken UDP port below 0xC000 (RoCEv2 links may not bind the entropy range)
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
	r := NewRegistry()
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "t", VersionMajor: 2}, InstanceData: "rocev2 " + pc.LocalAddr().String()}); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.OpenIA("t", 16, nil)
	if !errors.Is(err, ErrResourceDevice) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("%v", err)
	}
	if CodeOf(err) != ErrResourceDevice.Code() {
		t.Fatalf("code %#x", CodeOf(err))
	}
}

// dat_ia_query names the IA's own extension: IB on RoCEv2, iWARP on iWARP.
func TestIAQueryExtension(t *testing.T) {
	srv, _ := roceSides(t)
	if a, _, err := srv.ia.Query(IAFieldAll, 0); err != nil || a.Extension != "IB" {
		t.Fatalf("RoCEv2 IA extension %q %v", a.Extension, err)
	}
	iw := newSide(t, "iwarp")
	if a, _, err := iw.ia.Query(IAFieldAll, 0); err != nil || a.Extension != "iWARP" {
		t.Fatalf("iWARP IA extension %q %v", a.Extension, err)
	}
}
