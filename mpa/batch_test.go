package mpa

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"
)

// TestQueueFPDUMatchesWriteFPDU: FPDUs queued into batches (flushed at random points, and
// implicitly when the batch fills up: 400 FPDUs of several pieces exceed its iovecs)
// produce the same stream as one WriteFPDU each, for every framing option and offset.
func TestQueueFPDUMatchesWriteFPDU(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, opt := range allOpts {
		us := randomULPDUs(rng, 400, 3000)
		us = append(us, make([]byte, MaxULPDU-600), make([]byte, MaxULPDU-601)) // fit with Markers
		split := func(u []byte) ([]byte, [][]byte) {
			h := min(len(u), 18)
			var ps [][]byte
			for rest := u[h:]; len(rest) > 0; {
				k := min(len(rest), 1+len(u)/3)
				ps = append(ps, rest[:k])
				rest = rest[k:]
			}
			return u[:h], ps
		}
		var one, batch bytes.Buffer
		w1, wb := NewWriter(&one, opt), NewWriter(&batch, opt)
		for _, u := range us {
			h, ps := split(u)
			if err := w1.WriteFPDU(h, ps); err != nil {
				t.Fatal(err)
			}
			if err := wb.QueueFPDU(h, ps); err != nil {
				t.Fatal(err)
			}
			if rng.Intn(50) == 0 {
				if err := wb.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if wb.StreamOffset() != w1.StreamOffset() {
			t.Fatalf("%+v: stream offset %d, want %d", opt, wb.StreamOffset(), w1.StreamOffset())
		}
		if err := wb.Flush(); err != nil || wb.Buffered() != 0 {
			t.Fatal(err, wb.Buffered())
		}
		if !bytes.Equal(one.Bytes(), batch.Bytes()) {
			t.Fatalf("%+v: batched stream differs (%d vs %d octets)", opt, batch.Len(), one.Len())
		}
		got, _, err := deframeAll(batch.Bytes(), opt, 1<<20, true)
		if err != io.EOF || len(got) != len(us) {
			t.Fatalf("%+v: deframed %d of %d: %v", opt, len(got), len(us), err)
		}
	}
}

// TestQueueFPDUTooLong: a ULPDU over 65535 octets is refused and leaves the batch as it was.
func TestQueueFPDUTooLong(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, FramingOptions{CRC: true, Markers: true})
	if err := w.QueueFPDU([]byte("hdr"), [][]byte{[]byte("abc")}); err != nil {
		t.Fatal(err)
	}
	n, off := w.Buffered(), w.StreamOffset()
	if err := w.QueueFPDU([]byte("h"), [][]byte{make([]byte, MaxULPDU)}); !errors.Is(err, ErrULPDUTooLong) {
		t.Fatalf("too long: %v", err)
	}
	if w.Buffered() != n || w.StreamOffset() != off || out.Len() != 0 {
		t.Fatal("refused FPDU changed the batch")
	}
	if err := w.Flush(); err != nil || out.Len() != n {
		t.Fatal(err, out.Len(), n)
	}
}

// TestReaderVectored: with a VectoredReader, each direct read also fills the buffer, so
// 64 KiB FPDUs cost one call each; the result equals the plain Reader's at any chunking.
func TestReaderVectored(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for _, opt := range []FramingOptions{{}, {CRC: true}} {
		var us [][]byte
		for range 20 {
			u := make([]byte, MaxULPDU-3)
			rng.Read(u)
			us = append(us, u)
		}
		wire := writeStream(t, rng, opt, us)
		vr := &vecChunkReader{chunkReader: chunkReader{b: wire, n: 1 << 20}}
		r := NewReader(vr, opt)
		dst := make([]byte, MaxULPDU)
		for i, u := range us {
			n, err := r.Next()
			if err != nil || n != len(u) {
				t.Fatal(i, n, err)
			}
			if err := r.ReadFull(dst[:n]); err != nil {
				t.Fatal(err)
			}
			if err := r.End(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst[:n], u) {
				t.Fatalf("FPDU %d differs", i)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatal(err)
		}
		if vr.calls > len(us)+1 {
			t.Fatalf("%d ReadVectored calls for %d FPDUs", vr.calls, len(us))
		}
		for _, chunk := range []int{1, 7, 100, 600, 5000} {
			got, _, err := deframeAll(wire, opt, chunk, true)
			if err != io.EOF || len(got) != len(us) {
				t.Fatalf("chunk %d: %d FPDUs, %v", chunk, len(got), err)
			}
			for i := range got {
				if !bytes.Equal(got[i], us[i]) {
					t.Fatalf("chunk %d: FPDU %d differs", chunk, i)
				}
			}
		}
	}
}

// vecWriter is an io.Writer with WriteVectored; Write must not be called.
type vecWriter struct {
	buf     bytes.Buffer
	calls   int
	lastLen int // slices in the last call
	err     error
}

func (v *vecWriter) Write([]byte) (int, error) { return 0, errors.New("Write called") }

func (v *vecWriter) WriteVectored(bufs [][]byte) (int64, error) {
	v.calls++
	v.lastLen = len(bufs)
	var n int64
	for _, b := range bufs {
		k, _ := v.buf.Write(b)
		n += int64(k)
	}
	return n, v.err
}

// TestVectoredWriter: a VectoredWriter gets each batch in one WriteVectored call, the same
// stream as any io.Writer, and its error is Flush's.
func TestVectoredWriter(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for _, opt := range allOpts {
		var plain bytes.Buffer
		vw := &vecWriter{}
		wp, wv := NewWriter(&plain, opt), NewWriter(vw, opt)
		for _, u := range randomULPDUs(rng, 10, 1000) { // one batch, with Markers too
			h := min(len(u), 18)
			for _, w := range []*Writer{wp, wv} {
				if err := w.QueueFPDU(u[:h], [][]byte{u[h:]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, w := range []*Writer{wp, wv} {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if vw.calls != 1 || !bytes.Equal(vw.buf.Bytes(), plain.Bytes()) {
			t.Fatalf("%+v: %d calls, streams equal %v", opt, vw.calls, bytes.Equal(vw.buf.Bytes(), plain.Bytes()))
		}
		vw.err = io.ErrClosedPipe
		if err := wv.WriteFPDU([]byte{1, 2}, nil); !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("WriteFPDU: %v", err)
		}
	}
}

// TestTryFlush: a batch written by TryFlush through a write that takes any number of
// octets (none, some, a piece boundary, all) and finished by later TryFlushes or a Flush,
// with FPDUs queued between, is the same stream as the same FPDUs written one by one; an
// error empties the batch.
func TestTryFlush(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	for _, opt := range allOpts {
		var want, got bytes.Buffer
		w1, wt := NewWriter(&want, opt), NewWriter(&got, opt)
		write := func(bufs [][]byte) (int, error) {
			total := 0
			for _, b := range bufs {
				total += len(b)
			}
			k := rng.Intn(total + 1)
			if rng.Intn(4) == 0 {
				k = len(bufs[0]) // a piece boundary
			}
			n := k
			for _, b := range bufs {
				c := min(k, len(b))
				got.Write(b[:c])
				k -= c
			}
			return n, nil
		}
		for _, u := range randomULPDUs(rng, 300, 2000) {
			h := min(len(u), 18)
			if err := w1.WriteFPDU(u[:h], [][]byte{u[h:]}); err != nil {
				t.Fatal(err)
			}
			if err := wt.QueueFPDU(u[:h], [][]byte{u[h:]}); err != nil {
				t.Fatal(err)
			}
			switch rng.Intn(3) {
			case 0:
				done, err := wt.TryFlush(write)
				if err != nil || done != (wt.Buffered() == 0) {
					t.Fatalf("TryFlush: %v, %v with %d buffered", done, err, wt.Buffered())
				}
			case 1:
				if rng.Intn(10) == 0 {
					if err := wt.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for done := false; !done; {
			var err error
			if done, err = wt.TryFlush(write); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			t.Fatalf("%+v: TryFlush stream differs (%d vs %d octets)", opt, got.Len(), want.Len())
		}
		if wt.Buffered() != 0 || wt.wb != nil {
			t.Fatal("batch memory held after the last TryFlush")
		}
	}
	w := NewWriter(io.Discard, FramingOptions{CRC: true})
	if err := w.QueueFPDU([]byte("hdr"), nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if done, err := w.TryFlush(func([][]byte) (int, error) { return 0, boom }); done || err != boom {
		t.Fatalf("TryFlush error: %v, %v", done, err)
	}
	if w.Buffered() != 0 {
		t.Fatal("batch kept after an error")
	}
}

// fpduChunks returns one chunk (an FPDU as the peer wrote it) per Read at most, and
// counts the calls.
type fpduChunks struct {
	chunks [][]byte
	calls  int
}

func (c *fpduChunks) Read(p []byte) (int, error) {
	c.calls++
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// TestReaderMediumFPDUs: FPDUs larger than the small buffer that the large one holds
// whole (a 4 KiB Read Response, say) arriving one at a time take one read each once the
// Reader has seen one, not a small read and a second for the rest; small FPDUs after them
// take the small buffer again.
func TestReaderMediumFPDUs(t *testing.T) {
	cr := &fpduChunks{}
	for i := range 10 {
		u := make([]byte, 4096+i)
		u[0] = byte(i)
		cr.chunks = append(cr.chunks, AppendFPDU(nil, true, u))
	}
	for range 3 {
		cr.chunks = append(cr.chunks, AppendFPDU(nil, true, make([]byte, 40)))
	}
	r := NewReader(cr, FramingOptions{CRC: true, ReadBuffer: 8 << 10})
	buf := make([]byte, 8192)
	for i := range 13 {
		before := cr.calls
		n, err := r.Next()
		if err == nil {
			err = r.ReadFull(buf[:n])
		}
		if err == nil {
			err = r.End()
		}
		if err != nil {
			t.Fatalf("FPDU %d: %v", i, err)
		}
		if i < 10 && buf[0] != byte(i) {
			t.Fatalf("FPDU %d: payload % x", i, buf[:4])
		}
		if reads := cr.calls - before; i > 0 && reads != 1 {
			t.Fatalf("FPDU %d (ULPDU %d) took %d reads", i, n, reads)
		}
	}
	if r.big != nil {
		t.Fatal("the large buffer is kept after small FPDUs")
	}
}

// TestSmallBatchOneBuffer: by FlushOwned, a batch of at most flatMax octets is written
// as one buffer (one WriteVectored of one slice), a larger one as its pieces; Flush
// always writes the pieces; the streams are the same as the FPDUs written piece by piece.
func TestSmallBatchOneBuffer(t *testing.T) {
	for _, n := range []int{1, 64, flatMax - 24, flatMax - 23, 1000} {
		opt := FramingOptions{CRC: true}
		var want bytes.Buffer
		ref := NewWriter(&want, opt)
		vw := &vecWriter{}
		w := NewWriter(vw, opt)
		u := bytes.Repeat([]byte{0xa5}, n)
		h := min(n, 18)
		if err := w.QueueFPDU(u[:h], [][]byte{u[h:]}); err != nil {
			t.Fatal(err)
		}
		if err := w.FlushOwned(); err != nil {
			t.Fatal(err)
		}
		if err := ref.WriteFPDU(u[:h], [][]byte{u[h:]}); err != nil {
			t.Fatal(err)
		}
		total := want.Len()
		if vw.calls != 1 || !bytes.Equal(vw.buf.Bytes(), want.Bytes()) {
			t.Fatalf("ULPDU %d: %d calls, streams equal %v", n, vw.calls, bytes.Equal(vw.buf.Bytes(), want.Bytes()))
		}
		if one := total <= flatMax; (vw.lastLen == 1) != one {
			t.Fatalf("ULPDU %d (FPDU %d octets): written in %d pieces", n, total, vw.lastLen)
		}
		if err := w.QueueFPDU(u[:h], [][]byte{u[h:]}); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if vw.calls != 2 || vw.lastLen == 1 || !bytes.Equal(vw.buf.Bytes()[total:], want.Bytes()) {
			t.Fatalf("ULPDU %d: Flush wrote %d pieces in call %d", n, vw.lastLen, vw.calls)
		}
	}
}
