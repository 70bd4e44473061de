//go:build linux

package afxdp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safchain/ethtool"
	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/capture/tsharktest"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic/cm"
)

// TestCaptureDecodes records every operation on both networks through the capture
// hooks and has tshark decode the files:
//
//   - afxdp.pcapng, the AF_XDP port's frames as they are (afxdp.Options.Tap): iWARP over
//     the user-space TCP (real TCP segments) and RoCEv2 over the AF_XDP link;
//   - kernel.pcapng, the other ends' transports (cm.Options.Capture): iWARP over kernel
//     TCP as reconstructed streams, RoCEv2 datagrams of the kernel UDP link.
//
// (Two files because the real and the reconstructed iWARP streams are the same TCP
// connections: in one file tshark would take one for retransmissions of the other.)
// Every frame with a TCP payload must decode as MPA (and FPDUs as DDP/RDMAP) or carry the
// start of an FPDU that tshark reassembles and decodes with a later segment, every UDP
// frame must decode as InfiniBand, and no frame may carry expert information of warning level or
// above (malformed packet, bad IP/TCP/UDP checksum, bad MPA CRC …). Frames without a
// TCP payload (handshake, acknowledgements, FIN) are TCP only.
func TestCaptureDecodes(t *testing.T) {
	tshark := tsharktest.Need(t)
	dir := t.TempDir()
	if d := os.Getenv("SOFTRNIC_KEEP_PCAP_DIR"); d != "" {
		dir = d
	}
	cfg := &capture.Config{MaxQueued: 1 << 16, MaxBytes: 256 << 20} // keep every frame
	wx, err := capture.Create(filepath.Join(dir, "afxdp.pcapng"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	wk, err := capture.Create(filepath.Join(dir, "kernel.pcapng"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, 0, func(o *afxdp.Options) { o.Tap = wx })
	// The kernel's segments reach the port with partial checksums while its veth
	// offloads checksumming (the stack completes them after the tap has recorded
	// them): a capture of them shows bad checksums, so the kernel side computes its
	// own here.
	netnstest.In(t, r.env.NS[1], func() {
		et, err := ethtool.NewEthtool()
		if err != nil {
			t.Fatal(err)
		}
		defer et.Close()
		if err := et.Change(r.env.Dev[1], map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
			t.Fatal(err)
		}
	})
	for _, network := range []string{cm.IWARP, cm.RoCEv2} {
		for _, crc := range []bool{true, false} {
			if network == cm.RoCEv2 && !crc {
				continue
			}
			x := r.newHost(t, hostOpts{network: network, xdp: true, crc: crc})
			k := r.newHost(t, hostOpts{network: network, crc: crc, capture: wk})
			connect(t, x, k)
			everyOperation(t, x, k, 1, 20000)
			everyOperation(t, k, x, 2, 3000)
			k.qp.Disconnect()
			<-x.qp.Done()
			<-k.qp.Done()
			x.tr.Close()
			k.tr.Close()
		}
	}
	r.st.Close()
	r.port.Close()
	for name, w := range map[string]*capture.Writer{"afxdp": wx, "kernel": wk} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		st := w.Stats()
		t.Logf("%s capture: %+v", name, st)
		if st.Dropped != 0 || st.Written == 0 {
			t.Fatalf("%s capture: %+v", name, st)
		}
		file := filepath.Join(dir, name+".pcapng")
		frames := tsharktest.Decode(t, tshark, file, "-o", "tcp.analyze_sequence_numbers:TRUE")
		if uint64(len(frames)) != st.Written {
			t.Fatalf("%s: tshark read %d frames, %d written", name, len(frames), st.Written)
		}
		kinds := map[string]int{}
		for _, f := range frames {
			iw := strings.Contains(f.Protocols, "iwarp_mpa")
			ib := strings.Contains(f.Protocols, "infiniband")
			switch {
			case f.TCPLen > 0 && iw:
				kinds["mpa"]++
				if strings.Contains(f.Protocols, "iwarp_ddp_rdmap") {
					kinds["ddp"]++
				}
			case f.TCPLen > 0 && f.ReassembledIn != "":
				// the start of an FPDU that ends in a later segment, decoded there
				kinds["mpa-continued"]++
			case f.TCPLen == 0:
				kinds["tcp-control"]++
			case f.TCPLen < 0 && ib:
				kinds["infiniband"]++
			case f.TCPLen > 0 && tcpRecovery(f.Expert):
				// a segment TCP sent again (a loaded machine: the stack's retransmission
				// timer fired); tshark decodes the first copy and flags this one
				kinds["tcp-retransmission"]++
			default:
				t.Errorf("%s frame %s (%s): %s, TCP payload %d", name, f.Num, f.Iface, f.Protocols, f.TCPLen)
			}
			if f.Expert != "" && !tcpRecovery(f.Expert) && (f.TCPLen != 0 || !tcpChat(f.Expert)) {
				t.Errorf("%s frame %s (%s): expert info %q", name, f.Num, f.Protocols, f.Expert)
			}
		}
		t.Logf("%s: %v", name, kinds)
		if kinds["mpa"] == 0 || kinds["ddp"] == 0 || kinds["infiniband"] == 0 {
			t.Fatalf("%s: %v", name, kinds)
		}
		if n := tsharktest.Count(t, tshark, file, "iwarp_mpa.rev == 2"); n != 4 {
			t.Fatalf("%s: %d MPA rev 2 frames, want 4 (a Request and a Reply per connection)", name, n)
		}
	}
}

// tcpRecovery reports whether every expert message is one of TCP's loss-recovery notes
// (a retransmission — which tshark calls an out-of-order segment when the copy follows
// later segments — and the duplicate ACKs, D-SACKs and window updates around it): the
// capture is right, TCP was recovering. A segment missing from the capture ("previous
// segment not captured") is not one of them.
func tcpRecovery(expert string) bool {
	if expert == "" {
		return false
	}
	for _, m := range strings.Split(expert, ";") {
		l := strings.ToLower(m)
		if !strings.Contains(l, "retransmission") && !strings.Contains(l, "out-of-order") && !strings.Contains(l, "d-sack") &&
			!strings.Contains(l, "dup ack") && !strings.Contains(l, "duplicate ack") && !strings.Contains(l, "window update") {
			return false
		}
	}
	return true
}

// tcpChat reports whether every expert message is one of the TCP analysis notes on a
// segment without payload that say what it is (chat level).
func tcpChat(expert string) bool {
	for _, m := range strings.Split(expert, ";") {
		if !strings.HasPrefix(m, "Connection establish") && !strings.HasPrefix(m, "Connection finish") &&
			!strings.HasPrefix(m, "This frame initiates the connection closing") &&
			!strings.HasPrefix(m, "This frame undergoes the connection closing") {
			return false
		}
	}
	return true
}
