package interop

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"testing"
	"time"
)

// Expected wire bytes (Linux siw_cm.c; mpa/testdata holds captures of them):
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
		up, down := rpingSoftrnicServerViaProxy(t, g, bin, count, size, time.Minute, []string{"-v", "-d", "--timeout", "45s"},
			"mpacli", 60*time.Second, func(cli, sr Result) {
				checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", count, size)
			})
		checkFrames(t, "siw", "softrnic", up, down)
	})
	t.Run("softrnic initiator, siw responder", func(t *testing.T) {
		record(t, PeerSiw, "MPA Request/Reply and first Send byte-exact (softrnic Request, siw Reply)", "client")
		up, down := rpingSoftrnicClientViaProxy(t, g, bin, size, "mpasrv", 60*time.Second,
			time.Minute, []string{"-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--timeout", "45s"},
			50*time.Second, func(cr, sr Result) {
				checkHostPings(t, "softrnic client", cr.Output, "ping data: ", count, size)
			})
		checkFrames(t, "softrnic", "siw", up, down)
	})
}
