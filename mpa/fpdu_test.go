package mpa

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"testing"
	"testing/iotest"
)

// RFC 3720 Appendix B.4 CRC examples and the specs README check values; the
// expected bytes are the CRC field as it goes on the wire.
func TestCRC32cVectors(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	ones := bytes.Repeat([]byte{0xff}, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
	}
	read10 := mustHex("01c0000000000000000000000000000014000000000004000000001400000018" +
		"28000000000000000200000000000000")
	for _, v := range []struct {
		name string
		in   []byte
		wire string
	}{
		{"32 zeros", make([]byte, 32), "aa36918a"},
		{"32 ones", ones, "43aba862"},
		{"incrementing", inc, "4e79dd46"},
		{"decrementing", dec, "5cdb3f11"},
		{"SCSI Read (10) PDU", read10, "563a96d9"},
	} {
		var got [4]byte
		PutCRC(got[:], CRC32c(v.in))
		if hex := mustHex(v.wire); !bytes.Equal(got[:], hex) {
			t.Errorf("%s: %x, want %s", v.name, got, v.wire)
		}
		// Scattered update gives the same value.
		if c := UpdateCRC32c(UpdateCRC32c(0, v.in[:7]), v.in[7:]); c != CRC32c(v.in) {
			t.Errorf("%s: piecewise CRC differs", v.name)
		}
	}
}

// ddpSend returns the 42-octet ULPDU of RFC 5044 Figures 5 and 6: an
// untagged Send with L set, QN 0, the given MSN, MO 0 and 24 zero octets.
func ddpSend(msn uint32) (hdr, payload []byte) {
	hdr = make([]byte, 18)
	binary.BigEndian.PutUint16(hdr, 0x4143)
	binary.BigEndian.PutUint32(hdr[10:], msn)
	return hdr, make([]byte, 24)
}

// RFC 5044 §4.4 Figure 5: the first FPDU of a stream with Markers on.
var figure5 = mustHex("00000000" + "002a" + "4143" + "00000000" + "00000000" + "00000001" +
	"00000000" + "000000000000000000000000000000000000000000000000" + "52239983")

// RFC 5044 §4.4 Figure 6: the second FPDU, at stream octet 0x1ec, with a
// Marker (FPDUPTR 0x14) at octet 0x200.
var figure6 = mustHex("002a" + "4143" + "00000000" + "00000000" + "00000002" + "00000000" +
	"00000014" + "000000000000000000000000000000000000000000000000" + "84925898")

func TestRFC5044Figures(t *testing.T) {
	for _, v := range []struct {
		name string
		off  uint32
		msn  uint32
		wire []byte
	}{
		{"figure 5", 0, 1, figure5},
		{"figure 6", 0x1ec, 2, figure6},
	} {
		hdr, pl := ddpSend(v.msn)
		var out bytes.Buffer
		w := NewWriter(&out, FramingOptions{CRC: true, Markers: true, StreamOffset: v.off})
		if err := w.WriteFPDU(hdr, [][]byte{pl}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), v.wire) {
			t.Errorf("%s: writer\n got %x\nwant %x", v.name, out.Bytes(), v.wire)
		}
		if w.StreamOffset() != v.off+uint32(len(v.wire)) {
			t.Errorf("%s: offset %d", v.name, w.StreamOffset())
		}
		r := NewReader(bytes.NewReader(v.wire), FramingOptions{CRC: true, Markers: true, StreamOffset: v.off})
		n, err := r.Next()
		if err != nil || n != 42 {
			t.Fatalf("%s: Next %d %v", v.name, n, err)
		}
		got := make([]byte, n)
		if err := r.ReadFull(got); err != nil {
			t.Fatal(err)
		}
		if err := r.End(); err != nil {
			t.Fatalf("%s: End %v", v.name, err)
		}
		if !bytes.Equal(got, append(hdr, pl...)) {
			t.Errorf("%s: ULPDU %x", v.name, got)
		}
	}
	// Figure 5's CRC is also the README check value over the first 48 octets.
	if CRC32c(figure5[:48]) != 0x83992352 {
		t.Fatal("figure 5 CRC value")
	}
	// Figure 6's FPDU is the Figure 5 stream's second FPDU: with a 492-octet
	// first FPDU the second one starts at 0x1ec.
	var out bytes.Buffer
	w := NewWriter(&out, FramingOptions{CRC: true, Markers: true})
	first := make([]byte, 492-4-FPDUOverhead)
	if err := w.WriteFPDU(first, nil); err != nil || w.StreamOffset() != 0x1ec {
		t.Fatalf("first FPDU: %v offset %#x", err, w.StreamOffset())
	}
	hdr, pl := ddpSend(2)
	if err := w.WriteFPDU(hdr, [][]byte{pl}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes()[0x1ec:], figure6) {
		t.Fatalf("stream tail\n got %x\nwant %x", out.Bytes()[0x1ec:], figure6)
	}
}

// RFC 5044 §4.3 Figure 4: a 16-octet ULPDU with a Marker (FPDUPTR 0x0C)
// after its 10th octet and 2 octets of pad.
func TestRFC5044Figure4(t *testing.T) {
	ulpdu := []byte("0123456789abcdef")
	var out bytes.Buffer
	w := NewWriter(&out, FramingOptions{Markers: true, StreamOffset: 512 - 12})
	if err := w.WriteFPDU(ulpdu[:3], [][]byte{ulpdu[3:]}); err != nil {
		t.Fatal(err)
	}
	want := append(append(append(mustHex("0010"), ulpdu[:10]...), mustHex("0000000c")...), ulpdu[10:]...)
	want = append(want, 0, 0, 0, 0, 0, 0) // pad, zero CRC field (CRC off)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("\n got %x\nwant %x", out.Bytes(), want)
	}
}

func TestMULPDU(t *testing.T) {
	for _, v := range []struct {
		emss    int
		markers bool
		want    int
	}{
		{1460, false, 1454}, // 1460 - (6 + 0)
		{1460, true, 1442},  // 1460 - (6 + 4*3 + 0)
		{1461, false, 1454}, // 1461 - (6 + 1)
		{1461, true, 1442},  // 1461 - (6 + 12 + 1)
		{8960, false, 8954},
		{8960, true, 8882}, // 8960 - (6 + 4*18)
		{512, true, 502},   // 512 - (6 + 4)
		{513, true, 498},   // 513 - (6 + 8 + 1)
		{100, false, MinMULPDU},
		{65495, false, 65486},
		{1 << 20, false, MaxULPDU},
	} {
		if got := MULPDU(v.emss, v.markers); got != v.want {
			t.Errorf("MULPDU(%d, %v) = %d, want %d", v.emss, v.markers, got, v.want)
		}
	}
}

// An FPDU carrying MULPDU octets fits the EMSS wherever the Markers fall.
func TestMULPDUFits(t *testing.T) {
	for _, emss := range []int{536, 1024, 1220, 1448, 1460, 1500, 4096, 8948, 9000, 65483, 65495, 65535} {
		for _, markers := range []bool{false, true} {
			m := MULPDU(emss, markers)
			for off := uint32(0); off < MarkerInterval; off += 4 {
				var cw countWriter
				w := NewWriter(&cw, FramingOptions{Markers: markers, StreamOffset: off})
				if err := w.WriteFPDU(make([]byte, m), nil); err != nil {
					t.Fatal(err)
				}
				if cw.n > emss {
					t.Fatalf("emss %d markers %v offset %d: FPDU %d octets", emss, markers, off, cw.n)
				}
			}
		}
	}
}

type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

var allOpts = []FramingOptions{
	{}, {CRC: true}, {Markers: true}, {CRC: true, Markers: true},
	{CRC: true, Markers: true, StreamOffset: 0x1ec}, {Markers: true, StreamOffset: 508},
}

// writeStream frames ulpdus (each split at random into hdr and pieces).
func writeStream(t testing.TB, rng *rand.Rand, opt FramingOptions, ulpdus [][]byte) []byte {
	var out bytes.Buffer
	w := NewWriter(&out, opt)
	for _, u := range ulpdus {
		h := rng.Intn(len(u) + 1)
		var pieces [][]byte
		for rest := u[h:]; len(rest) > 0; {
			k := 1 + rng.Intn(len(rest))
			pieces = append(pieces, rest[:k])
			rest = rest[k:]
		}
		if err := w.WriteFPDU(u[:h], pieces); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// readStream deframes all FPDUs with a mix of Read, ReadFull and Discard
// (discarded octets come back as zeros).
func readStream(r *Reader, rng *rand.Rand) ([][]byte, error) {
	var got [][]byte
	for {
		n, err := r.Next()
		if err != nil {
			return got, err
		}
		u := make([]byte, n)
		for k := 0; k < n; {
			c := 1 + rng.Intn(n-k)
			switch rng.Intn(3) {
			case 0:
				m, err := r.Read(u[k : k+c])
				if err != nil {
					return got, err
				}
				c = m
			case 1:
				if err := r.ReadFull(u[k : k+c]); err != nil {
					return got, err
				}
			case 2:
				if err := r.Discard(c); err != nil {
					return got, err
				}
			}
			k += c
		}
		if err := r.End(); err != nil {
			return got, err
		}
		got = append(got, u)
	}
}

func randomULPDUs(rng *rand.Rand, count, max int) [][]byte {
	us := make([][]byte, count)
	for i := range us {
		us[i] = make([]byte, rng.Intn(max+1))
		rng.Read(us[i])
	}
	return us
}

func TestFramingRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, opt := range allOpts {
		for iter := 0; iter < 30; iter++ {
			max := []int{8, 100, 1500, 9000, MaxULPDU}[iter%5]
			us := randomULPDUs(rng, 1+rng.Intn(8), max)
			wire := writeStream(t, rng, opt, us)
			for _, mode := range []int{0, 1, 2} {
				var src io.Reader = bytes.NewReader(wire)
				ro := opt
				switch mode {
				case 1:
					src = iotest.OneByteReader(src)
				case 2:
					src = iotest.HalfReader(src)
					ro.ReadBuffer = 64
				}
				r := NewReader(src, ro)
				got, err := readStream(r, rand.New(rand.NewSource(int64(iter))))
				if err != io.EOF {
					t.Fatalf("%+v mode %d: %v", opt, mode, err)
				}
				if len(got) != len(us) {
					t.Fatalf("%+v: %d ULPDUs, want %d", opt, len(got), len(us))
				}
				if r.StreamOffset() != opt.StreamOffset+uint32(len(wire)) {
					t.Fatalf("reader offset %d", r.StreamOffset())
				}
			}
			// Exact content with ReadFull only.
			r := NewReader(bytes.NewReader(wire), opt)
			for i, u := range us {
				n, err := r.Next()
				if err != nil || n != len(u) {
					t.Fatalf("Next %d %v", n, err)
				}
				b := make([]byte, n)
				if err := r.ReadFull(b); err != nil || !bytes.Equal(b, u) {
					t.Fatalf("ULPDU %d differs (%v)", i, err)
				}
				if err := r.End(); err != nil {
					t.Fatal(err)
				}
			}
			checkMarkers(t, opt, wire)
		}
	}
}

// checkMarkers independently walks a framed stream: every 512th octet from
// SeqStart holds a Marker pointing at its FPDU's length field (or 0 between
// FPDUs), and no octets are misplaced.
func checkMarkers(t *testing.T, opt FramingOptions, wire []byte) {
	t.Helper()
	pos := opt.StreamOffset
	i := 0
	isMarker := func() bool { return opt.Markers && pos%MarkerInterval == 0 }
	for i < len(wire) {
		if isMarker() {
			if v := binary.BigEndian.Uint32(wire[i:]); v != 0 {
				t.Fatalf("marker between FPDUs = %#x", v)
			}
			i += 4
			pos += 4
		}
		start := pos
		// Collect the FPDU's non-marker octets to read the length.
		var body []byte
		need := -1
		for need < 0 || len(body) < need {
			if isMarker() {
				if v := binary.BigEndian.Uint32(wire[i:]); v != pos-start {
					t.Fatalf("marker at %d = %#x, want %#x", pos, v, pos-start)
				}
				i += 4
				pos += 4
				continue
			}
			body = append(body, wire[i])
			i++
			pos++
			if len(body) == 2 {
				n := int(binary.BigEndian.Uint16(body))
				need = LengthLen + n + PadLen(n)
			}
		}
		if isMarker() { // marker just before the CRC
			if v := binary.BigEndian.Uint32(wire[i:]); v != pos-start {
				t.Fatalf("pre-CRC marker = %#x, want %#x", v, pos-start)
			}
			i += 4
			pos += 4
		}
		i += 4
		pos += 4
	}
}

// Every proper prefix of a valid stream fails cleanly: complete FPDUs are
// delivered, then io.EOF (at an FPDU boundary) or io.ErrUnexpectedEOF.
func TestFramingTruncation(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, opt := range allOpts {
		us := randomULPDUs(rng, 3, 700)
		wire := writeStream(t, rng, opt, us)
		for i := 0; i < len(wire); i++ {
			r := NewReader(bytes.NewReader(wire[:i]), opt)
			got, err := readStream(r, rng)
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("%+v prefix %d: %v", opt, i, err)
			}
			if len(got) >= len(us) {
				t.Fatalf("%+v prefix %d: all FPDUs delivered", opt, i)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Fatalf("error not sticky: %v then %v", err, err2)
			}
		}
	}
}

func TestFramingErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, opt := range allOpts {
		us := randomULPDUs(rng, 4, 1200)
		wire := writeStream(t, rng, opt, us)
		for i := 0; i < len(wire); i++ {
			bad := bytes.Clone(wire)
			bad[i] ^= 0x10
			r := NewReader(bytes.NewReader(bad), opt)
			_, err := readStream(r, rng)
			var me *Error
			if errors.As(err, &me) {
				if me.Code == CodeCRC && !opt.CRC {
					t.Fatalf("CRC error with CRC off")
				}
				if _, err2 := r.Next(); err2 != err {
					t.Fatal("MPA error not sticky")
				}
				continue
			}
			// Without an MPA error the corruption must have hit a length
			// field (mis-framing to EOF), a marker's reserved half, pad, or
			// an unchecked CRC.
			if opt.CRC && err == io.EOF {
				t.Fatalf("%+v: flip at %d undetected", opt, i)
			}
		}
	}
	// Marker pointer mismatch without CRC gives code 3; with CRC, code 2.
	hdr, pl := ddpSend(2)
	for _, crc := range []bool{false, true} {
		var out bytes.Buffer
		w := NewWriter(&out, FramingOptions{CRC: crc, Markers: true, StreamOffset: 0x1ec})
		if err := w.WriteFPDU(hdr, [][]byte{pl}); err != nil {
			t.Fatal(err)
		}
		bad := out.Bytes()
		bad[0x200-0x1ec+3] = 0x18
		r := NewReader(bytes.NewReader(bad), FramingOptions{CRC: crc, Markers: true, StreamOffset: 0x1ec})
		_, err := readStream(r, rng)
		want := CodeMarker
		if crc {
			want = CodeCRC
		}
		if !errors.Is(err, &Error{Code: want}) {
			t.Fatalf("crc %v: %v, want code %d", crc, err, want)
		}
	}
	// A non-zero Marker between FPDUs is a marker error.
	bad := bytes.Clone(figure5)
	bad[3] = 4
	r := NewReader(bytes.NewReader(bad), FramingOptions{Markers: true})
	if _, err := readStream(r, rng); !errors.Is(err, &Error{Code: CodeMarker}) {
		t.Fatalf("leading marker: %v", err)
	}
}

func TestReaderUsage(t *testing.T) {
	r := NewReader(bytes.NewReader(AppendFPDU(nil, true, []byte("hello"))), FramingOptions{CRC: true})
	if _, err := r.Read(make([]byte, 1)); err != ErrNotInFPDU {
		t.Fatal(err)
	}
	if err := r.End(); err != ErrNotInFPDU {
		t.Fatal(err)
	}
	if n, err := r.Next(); n != 5 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := r.Next(); err != ErrFPDUInProgress {
		t.Fatal(err)
	}
	if err := r.ReadFull(make([]byte, 6)); err != ErrShortULPDU {
		t.Fatal(err)
	}
	if err := r.Discard(6); err != ErrShortULPDU {
		t.Fatal(err)
	}
	b := make([]byte, 10)
	if n, err := r.Read(b); n != 5 || err != nil || string(b[:5]) != "hello" {
		t.Fatal(n, err)
	}
	if n, err := r.Read(b); n != 0 || err != io.EOF {
		t.Fatal(n, err)
	}
	if err := r.End(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatal(err)
	}
	// Writer limits.
	w := NewWriter(io.Discard, FramingOptions{Markers: true})
	if err := w.WriteFPDU(make([]byte, MaxULPDU+1), nil); err != ErrULPDUTooLong {
		t.Fatal(err)
	}
	if err := w.WriteFPDU(make([]byte, MaxULPDU), nil); err != ErrULPDUTooLong || w.StreamOffset() != 0 {
		t.Fatal("marker pointer overflow not refused", err)
	}
	if err := NewWriter(io.Discard, FramingOptions{}).WriteFPDU(make([]byte, MaxULPDU), nil); err != nil {
		t.Fatal(err)
	}
}

// recReader records the slices it is asked to fill.
type recReader struct {
	src   io.Reader
	calls [][]byte
}

func (r *recReader) Read(p []byte) (int, error) {
	r.calls = append(r.calls, p)
	return r.src.Read(p)
}

// recWriter records the slices written to it.
type recWriter struct{ calls [][]byte }

func (w *recWriter) Write(p []byte) (int, error) { w.calls = append(w.calls, p); return len(p), nil }

func sameMem(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// The payload goes straight between the caller's memory and the stream.
func TestZeroCopy(t *testing.T) {
	payload := make([]byte, 60000)
	rand.New(rand.NewSource(4)).Read(payload)
	for _, opt := range []FramingOptions{{CRC: true}, {CRC: true, Markers: true}} {
		var rw recWriter
		w := NewWriter(&rw, opt)
		hdr := make([]byte, 18)
		if err := w.WriteFPDU(hdr, [][]byte{payload}); err != nil {
			t.Fatal(err)
		}
		var wire []byte
		from := 0
		for _, c := range rw.calls {
			wire = append(wire, c...)
			if sameMem(c, payload[from:]) {
				from += len(c)
			}
		}
		if from != len(payload) {
			t.Fatalf("%+v: payload written from caller memory: %d of %d octets", opt, from, len(payload))
		}
		rr := &recReader{src: bytes.NewReader(wire)}
		r := NewReader(rr, opt)
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		if err := r.ReadFull(hdr); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(payload))
		if err := r.ReadFull(dst); err != nil {
			t.Fatal(err)
		}
		if err := r.End(); err != nil || !bytes.Equal(dst, payload) {
			t.Fatal(err)
		}
		direct := 0
		for _, c := range rr.calls {
			for off := 0; off < len(dst); off++ {
				if sameMem(c, dst[off:]) {
					direct += len(c)
					break
				}
			}
		}
		// Only what arrived with the first buffered read may be copied.
		t.Logf("%+v: %d of %d payload octets read directly into the destination", opt, direct, len(payload))
		// With Markers every 508-octet span ends at a Marker, so spans go
		// through the buffer (documented; siw never uses Markers).
		if !opt.Markers && direct < len(payload)-defaultReadBuffer {
			t.Fatalf("%+v: only %d payload octets read directly", opt, direct)
		}
	}
}

// errReader fails after its data.
type errReader struct {
	b   []byte
	err error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	wire := AppendFPDU(nil, true, make([]byte, 100))
	r := NewReader(&errReader{b: wire[:50], err: boom}, FramingOptions{CRC: true})
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if err := r.ReadFull(make([]byte, 100)); err != boom {
		t.Fatal(err)
	}
	if err := r.End(); err != boom {
		t.Fatal("I/O error not sticky", err)
	}
}

// The framing hot paths do not allocate (see also the benchmarks).
func TestFramingAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if raceEnabled {
		t.Skip("allocation counts are checked without -race (its sync.Pool drops items at random)")
	}
	for _, opt := range allOpts {
		hdr, chunks := benchSegments(1460, opt.Markers)
		var out bytes.Buffer
		w := NewWriter(&out, opt)
		pl := make([][]byte, 1)
		writeAll := func() {
			for _, c := range chunks {
				pl[0] = c
				if err := w.WriteFPDU(hdr, pl); err != nil {
					t.Fatal(err)
				}
			}
		}
		writeAll()
		wire := bytes.Clone(out.Bytes())
		if a := testing.AllocsPerRun(5, func() { w.Reset(io.Discard, opt); writeAll() }); a != 0 {
			t.Errorf("%+v: Writer allocates %v per message", opt, a)
		}
		src := bytes.NewReader(wire)
		r := NewReader(src, opt)
		dst := make([]byte, benchMsg)
		h := make([]byte, len(hdr))
		if a := testing.AllocsPerRun(5, func() {
			src.Reset(wire)
			r.Reset(src, opt)
			off := 0
			for range chunks {
				n, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if err := r.ReadFull(h); err != nil {
					t.Fatal(err)
				}
				if err := r.ReadFull(dst[off : off+n-len(h)]); err != nil {
					t.Fatal(err)
				}
				off += n - len(h)
				if err := r.End(); err != nil {
					t.Fatal(err)
				}
			}
		}); a != 0 {
			t.Errorf("%+v: Reader allocates %v per message", opt, a)
		}
	}
}
