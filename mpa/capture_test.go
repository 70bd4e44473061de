package mpa

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"github.com/google/gopacket/pcapgo"
)

const capturesDir = "testdata/" // copies of the interop captures (tests/interop/README.md)

// tcpStreams reassembles the TCP payload of each direction of the one
// connection in a pcap file (in-order captures, keyed by source port).
func tcpStreams(t *testing.T, name string) map[uint16][]byte {
	t.Helper()
	f, err := os.Open(capturesDir + name)
	if err != nil {
		t.Fatalf("golden capture missing: %v", err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16][]byte{}
	next := map[uint16]uint32{}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if len(data) < 14+20 || binary.BigEndian.Uint16(data[12:]) != 0x0800 {
			continue
		}
		ip := data[14:]
		ihl := int(ip[0]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[9] != 6 || tot > len(ip) {
			continue
		}
		tcp := ip[ihl:tot]
		sport := binary.BigEndian.Uint16(tcp)
		seq := binary.BigEndian.Uint32(tcp[4:])
		payload := tcp[int(tcp[12]>>4)*4:]
		if tcp[13]&0x02 != 0 { // SYN
			next[sport] = seq + 1
			continue
		}
		if len(payload) == 0 {
			continue
		}
		if seq != next[sport] {
			t.Fatalf("%s: out-of-order segment", name)
		}
		next[sport] = seq + uint32(len(payload))
		out[sport] = append(out[sport], payload...)
	}
	return out
}

// readFrame reads one frame from the front of b the way the engine would:
// HeaderLen bytes, FrameLen, then the rest.
func readFrame(t *testing.T, b []byte, max int) (Frame, []byte) {
	t.Helper()
	n, err := FrameLenMax(b[:HeaderLen], max)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFrame(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	return f, b[n:]
}

// siw is the initiator (port != 7174): its request, our (softrnic) reply and
// siw's first FPDU.
func TestCaptureSiwInitiator(t *testing.T) {
	s := tcpStreams(t, "mpa_reply.pcap")
	var fromSiw, toSiw []byte
	for port, b := range s {
		if port == 7174 {
			toSiw = b
		} else {
			fromSiw = b
		}
	}
	req, rest := readFrame(t, fromSiw, SiwMaxPrivateData)
	want := Frame{Rev: 2, Enhanced: true, IRD: 1, ORD: 1}
	if !framesEqual(&req, &want) {
		t.Fatalf("siw request = %+v, want %+v", req, want)
	}
	if got := req.Append(nil); !bytes.Equal(got, fromSiw[:req.Len()]) {
		t.Fatalf("request round trip\n got %x\nwant %x", got, fromSiw[:req.Len()])
	}

	// Our responder must produce exactly the reply siw accepted.
	cfg := Config{IRD: 16, ORD: 16, MaxPrivateData: SiwMaxPrivateData}
	rep, p, err := Respond(cfg, &req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Append(nil); !bytes.Equal(got, toSiw) {
		t.Fatalf("reply\n got %x\nwant %x", got, toSiw)
	}
	if p.IRD != 1 || p.ORD != 1 || p.CRC || p.TxMarkers || p.RxMarkers || p.Rev != 2 {
		t.Fatalf("params %+v", p)
	}

	// siw's first FPDU: a Send (ctrl 0x4143) without CRC (zero CRC field).
	fr := NewReader(bytes.NewReader(rest), p.RxFraming())
	n, err := fr.Next()
	if err != nil {
		t.Fatal(err)
	}
	ulpdu := make([]byte, n)
	if err := fr.ReadFull(ulpdu); err != nil {
		t.Fatal(err)
	}
	if err := fr.End(); err != nil {
		t.Fatal(err)
	}
	if n != 0x22 || binary.BigEndian.Uint16(ulpdu) != 0x4143 {
		t.Fatalf("first FPDU: len %d ctrl %#x", n, binary.BigEndian.Uint16(ulpdu))
	}
	if _, err := fr.Next(); err == nil {
		t.Fatal("expected EOF after the only FPDU")
	}
	// Re-framing the ULPDU reproduces siw's bytes (siw sends a zero CRC).
	if got := AppendFPDU(nil, false, ulpdu); !bytes.Equal(got, rest) {
		t.Fatalf("reframe\n got %x\nwant %x", got, rest)
	}
}

// siw is the responder (port 7174): our request and siw's reply.
func TestCaptureSiwResponder(t *testing.T) {
	s := tcpStreams(t, "mpa_guest_responder.pcap")
	var ours, siws []byte
	for port, b := range s {
		if port == 7174 {
			siws = b
		} else {
			ours = b
		}
	}
	cfg := Config{IRD: 1, ORD: 1}
	req, err := Request(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Append(nil); !bytes.Equal(got, ours) {
		t.Fatalf("request\n got %x\nwant %x", got, ours)
	}
	rep, rest := readFrame(t, siws, SiwMaxPrivateData)
	if len(rest) != 0 {
		t.Fatal("trailing bytes after siw's reply")
	}
	p, err := Complete(cfg, &req, &rep)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enhanced || p.IRD != 1 || p.ORD != 1 || p.PeerIRD != 1 || p.PeerORD != 1 || p.CRC {
		t.Fatalf("params %+v", p)
	}
}

// A request siw sent that was never answered still parses.
func TestCaptureNoReply(t *testing.T) {
	s := tcpStreams(t, "mpa_noreply.pcap")
	for port, b := range s {
		if port == 7174 {
			t.Fatalf("unexpected data from the responder: %x", b)
		}
		f, rest := readFrame(t, b, SiwMaxPrivateData)
		if f.Reply || !f.Enhanced || f.Rev != 2 || len(rest) != 0 {
			t.Fatalf("frame %+v rest %x", f, rest)
		}
	}
}
