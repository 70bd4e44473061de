package capture

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrnic/softrnic/internal/inetsum"
)

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	mu      sync.Mutex
	release chan struct{}
	buf     bytes.Buffer
	writes  int
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.writes++
	n := b.writes
	b.mu.Unlock()
	if n > 1 { // the header goes through at New
		<-b.release
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// TestNeverBlocks: with the file stuck, recording returns at once and
// drops beyond the queue bound, counting each drop.
func TestNeverBlocks(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	w, err := New(bw, &Config{MaxQueued: 8, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 100)
	done := make(chan struct{})
	go func() {
		// the writer goroutine takes one record and blocks in Write (with
		// the 64 KiB bufio buffer it blocks only once it spills: write
		// enough to spill)
		for range 2000 {
			w.Frame(frame, true)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("recording blocked on a stuck file")
	}
	st := w.Stats()
	if st.Dropped == 0 {
		t.Fatalf("nothing dropped with a stuck file: %+v", st)
	}
	close(bw.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st = w.Stats()
	if st.Written+st.Dropped != 2000 || st.Written == 0 {
		t.Fatalf("stats %+v: written + dropped != 2000", st)
	}
	frames := readBack(t, bw.buf.Bytes())
	if uint64(len(frames)) != st.Written {
		t.Fatalf("%d frames in the file, %d written", len(frames), st.Written)
	}
	w.Frame(frame, true) // after Close: dropped
	if w.Stats().Dropped != st.Dropped+1 {
		t.Fatal("record after Close not counted as dropped")
	}
	if err := w.Close(); err != ErrClosed {
		t.Fatalf("second Close: %v", err)
	}
}

func TestByteBound(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	w, err := New(bw, &Config{MaxQueued: 1000, MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 9000) // 16 KiB buffers: 4 fit the byte bound
	for range 100 {
		w.Frame(big, false)
	}
	// accepted: at most 7 through the 64 KiB bufio buffer before the file
	// blocks, one in the writer's hands, 4 queued
	if st := w.Stats(); st.Dropped == 0 || 100-st.Dropped > 7+1+4 {
		t.Fatalf("byte bound not enforced: %+v", st)
	}
	w.Frame(make([]byte, maxRecord+1), false)
	close(bw.release)
	w.Close()
}

type packet struct {
	iface int
	data  []byte
}

func readBack(t *testing.T, b []byte) []packet {
	t.Helper()
	r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var out []packet
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, packet{ci.InterfaceIndex, append([]byte(nil), data...)})
	}
}

// pipeConn is a net.Conn over a net.Pipe end with TCP addresses.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
}

func (p pipeConn) LocalAddr() net.Addr  { return p.local }
func (p pipeConn) RemoteAddr() net.Addr { return p.remote }

func mpaFrame(key string, flags byte, pd string) []byte {
	b := append([]byte(key), flags, 2, 0, byte(len(pd)))
	return append(b, pd...)
}

func fpdu(ulpdu int) []byte {
	n := 2 + ulpdu
	n += (4-n%4)%4 + 4
	b := make([]byte, n)
	binary.BigEndian.PutUint16(b, uint16(ulpdu))
	for i := 2; i < 2+ulpdu; i++ {
		b[i] = byte(i)
	}
	return b
}

// TestConnSegments feeds an MPA exchange in awkward chunks and checks that
// each MPA frame and FPDU becomes one TCP segment with consistent
// sequence numbers and checksums.
func TestConnSegments(t *testing.T) {
	var out bytes.Buffer
	w, err := New(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	la := &net.TCPAddr{IP: net.IPv4(10, 1, 1, 1), Port: 4000}
	lb := &net.TCPAddr{IP: net.IPv4(10, 1, 1, 2), Port: 5000}
	ca := WrapConn(pipeConn{a, la, lb}, w)
	peer := pipeConn{b, lb, la}
	req := mpaFrame("MPA ID Req Frame", 0x50, "hello")
	rep := mpaFrame("MPA ID Rep Frame", 0x50, "hi")
	sent := [][]byte{req, fpdu(18), fpdu(1000), fpdu(3)}
	stream := bytes.Join(sent, nil)
	wrote := make(chan struct{})
	go func() {
		// written in chunks that cut frames anywhere
		for off := 0; off < len(stream); off += 7 {
			ca.Write(stream[off:min(off+7, len(stream))])
		}
		close(wrote)
	}()
	got := make([]byte, len(stream))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	<-wrote // the last chunk is recorded before the reply starts
	recv := bytes.Join([][]byte{rep, fpdu(40)}, nil)
	go func() { peer.Write(recv) }()
	buf := make([]byte, 5)
	for n := 0; n < len(recv); {
		k, err := ca.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	ca.Close()
	peer.Close()
	w.Close()
	pkts := readBack(t, out.Bytes())
	want := append(append([][]byte{}, sent...), rep, fpdu(40))
	if len(pkts) != len(want) {
		t.Fatalf("%d segments, want %d", len(pkts), len(want))
	}
	seq := map[bool]uint32{true: 1, false: 1}
	for i, p := range pkts {
		if p.iface != IfaceIWARP {
			t.Fatalf("segment %d on interface %d", i, p.iface)
		}
		pk := gopacket.NewPacket(p.data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pk.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatalf("segment %d: %v", i, pk)
		}
		out := i < len(sent)
		if out != (tcp.SrcPort == 4000) {
			t.Fatalf("segment %d: direction", i)
		}
		if !bytes.Equal(tcp.Payload, want[i]) {
			t.Fatalf("segment %d: payload %d bytes, want %d", i, len(tcp.Payload), len(want[i]))
		}
		if tcp.Seq != seq[out] {
			t.Fatalf("segment %d: seq %d, want %d", i, tcp.Seq, seq[out])
		}
		seq[out] += uint32(len(tcp.Payload))
		// checksums: recompute over the packet as decoded
		src, _ := netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(ip.DstIP.To4())
		seg := p.data[14+20:]
		if s := inetsum.Fold(inetsum.Add(inetsum.Add(inetsum.Add(uint64(protoTCP)+uint64(len(seg)), src.AsSlice()), dst.AsSlice()), seg)); s != 0xFFFF {
			t.Fatalf("segment %d: TCP checksum sums to %#x", i, s)
		}
		if s := inetsum.Fold(inetsum.Add(0, p.data[14:34])); s != 0xFFFF {
			t.Fatalf("segment %d: IP checksum sums to %#x", i, s)
		}
	}
}

// TestConnMarkers: with markers negotiated the stream is recorded as it
// comes, not cut at FPDU boundaries.
func TestConnMarkers(t *testing.T) {
	var out bytes.Buffer
	w, _ := New(&out, nil)
	a, b := net.Pipe()
	la := &net.TCPAddr{IP: net.IPv4(10, 1, 1, 1), Port: 4000}
	lb := &net.TCPAddr{IP: net.IPv4(10, 1, 1, 2), Port: 5000}
	ca := WrapConn(pipeConn{a, la, lb}, w)
	go io.Copy(io.Discard, b)
	ca.Write(mpaFrame("MPA ID Req Frame", 0x80, ""))
	ca.Write([]byte{1, 2, 3, 4, 5})
	ca.Write([]byte{6, 7})
	ca.Close()
	w.Close()
	if pkts := readBack(t, out.Bytes()); len(pkts) != 3 || len(pkts[1].data)-54 != 5 {
		t.Fatalf("%d segments", len(pkts))
	}
}

// FuzzConnStream feeds arbitrary byte streams through the reconstruction
// in arbitrary chunks: it never panics and records every byte once.
func FuzzConnStream(f *testing.F) {
	f.Add(append(mpaFrame("MPA ID Req Frame", 0x50, "pd"), fpdu(18)...), uint8(5))
	f.Add([]byte("not mpa at all"), uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, chunk uint8) {
		var out bytes.Buffer
		w, err := New(&out, &Config{MaxQueued: 1 << 16, MaxBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		a, p := net.Pipe()
		c := WrapConn(pipeConn{a, &net.TCPAddr{IP: net.IPv4(1, 1, 1, 1), Port: 1}, &net.TCPAddr{IP: net.IPv4(1, 1, 1, 2), Port: 2}}, w)
		go io.Copy(io.Discard, p)
		step := int(chunk%16) + 1
		for off := 0; off < len(b); off += step {
			c.Write(b[off:min(off+step, len(b))])
		}
		c.Close()
		w.Close()
		total := 0
		for _, pk := range readBack(t, out.Bytes()) {
			total += len(pk.data) - 54
		}
		if total != len(b) {
			t.Fatalf("recorded %d of %d bytes", total, len(b))
		}
	})
}
