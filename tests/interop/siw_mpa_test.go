package interop

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// Expected wire bytes (shared/specs/siw-interop-facts.md §3, shared/captures):
//   - MPA Request/Reply as rping asks through rdma_cm on siw: Key, bits 0x1002 (S, rev 2),
//     PD_Length 4, RFC 6581 IRD word 0x0001 and ORD word 0x0001, no ULP private data;
//   - rping's first Send: MPA length 0x0022, ctrl 0x4143 (untagged, Last, RDMAP v1 Send),
//     reserved 0, QN 0, MSN 1, MO 0, then the 16-byte advertisement; the CRC field is zero
//     when CRC is off.
var (
	wantReq       = append([]byte("MPA ID Req Frame"), 0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01)
	wantRep       = append([]byte("MPA ID Rep Frame"), 0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01)
	wantFirstSend = []byte{0x00, 0x22, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
)

// checkFrames compares the MPA frames and the initiator's first FPDU with what siw sends.
func checkFrames(t *testing.T, initiator, responder string, up, down MPAStream) {
	t.Helper()
	if !bytes.Equal(up.Frame, wantReq) {
		t.Errorf("%s MPA Request\n got %s\nwant %s", initiator, hex.EncodeToString(up.Frame), hex.EncodeToString(wantReq))
	}
	if !bytes.Equal(down.Frame, wantRep) {
		t.Errorf("%s MPA Reply\n got %s\nwant %s", responder, hex.EncodeToString(down.Frame), hex.EncodeToString(wantRep))
	}
	f := up.First
	if len(f) != 2+34+4 || !bytes.Equal(f[:20], wantFirstSend) || !bytes.Equal(f[len(f)-4:], []byte{0, 0, 0, 0}) {
		t.Errorf("%s first FPDU %s, want %s + 16-byte advertisement + zero CRC field", initiator, hex.EncodeToString(f), hex.EncodeToString(wantFirstSend))
	}
	if up.FPDUs == 0 || down.FPDUs == 0 {
		t.Errorf("FPDUs relayed: %d up, %d down", up.FPDUs, down.FPDUs)
	}
}

// TestMPAFramesMatchSiw puts an MPAProxy between the guest's rping and softrnic rping and
// checks that softrnic's MPA Request, Reply and first Send are byte-identical to siw's in
// the same role (CRC off, rping's IRD = ORD = 1).
func TestMPAFramesMatchSiw(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	const count, size = 3, 64
	t.Run("siw initiator, softrnic responder", func(t *testing.T) {
		record(t, PeerSiw, "MPA Request/Reply and first Send byte-exact (siw Request, softrnic Reply)", "server")
		p := port()
		srv, err := g.StartHost(time.Minute, bin, "rping", "-s", "-a", HostSiwAddr, "-p", strconv.Itoa(p), "-v", "-d", "--timeout", "45s")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		if !srv.WaitOutput("listening on", 30*time.Second) {
			t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
		}
		px, err := g.StartMPAProxy(HostSiwAddr+":0", fmt.Sprintf("%s:%d", HostSiwAddr, p))
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		cli, err := g.Run(guestRping(fmt.Sprintf("-c -a %s -p %d -C %d -S %d -V -v", HostSiwAddr, px.Addr().Port, count, size), "mpacli", "ping data: "), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := srv.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cli.Code != 0 || sr.Code != 0 {
			t.Fatalf("guest client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), sr.Code, Tail(sr.Output, 3000))
		}
		checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", count, size)
		up, down, err := px.Wait(30 * time.Second)
		if err != nil {
			t.Errorf("mpa proxy: %v", err)
		}
		checkFrames(t, "siw", "softrnic", up, down)
	})
	t.Run("softrnic initiator, siw responder", func(t *testing.T) {
		record(t, PeerSiw, "MPA Request/Reply and first Send byte-exact (softrnic Request, siw Reply)", "client")
		p := port()
		srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestSiwAddr, p, size), "mpasrv", "server ping data: "), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		px, err := g.StartMPAProxy(HostSiwAddr+":0", fmt.Sprintf("%s:%d", GuestSiwAddr, p))
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		if err := g.WaitCMListen(p, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		cli, err := g.StartHost(time.Minute, bin, "rping", "-c", "-a", HostSiwAddr, "-p", strconv.Itoa(px.Addr().Port),
			"-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--timeout", "45s")
		if err != nil {
			t.Fatal(err)
		}
		cr, err := cli.Wait(50 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := srv.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cr.Code != 0 || sr.Code != 0 {
			t.Fatalf("softrnic client exit %d:\n%s\nguest server exit %d:\n%s", cr.Code, Tail(cr.Output, 3000), sr.Code, Tail(sr.Output, 3000))
		}
		checkHostPings(t, "softrnic client", cr.Output, "ping data: ", count, size)
		up, down, err := px.Wait(30 * time.Second)
		if err != nil {
			t.Errorf("mpa proxy: %v", err)
		}
		checkFrames(t, "softrnic", "siw", up, down)
	})
}
