package mpa

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// randVecReader is a VectoredReader over a byte stream that returns at most a random number
// of octets per call (1..max; all of it when max is 1 MiB or more), filling the vectors in
// order, as readv(2) does.
type randVecReader struct {
	data  []byte
	rng   *rand.Rand
	max   int
	calls int
}

func (c *randVecReader) Read(p []byte) (int, error) { return c.ReadVectored([][]byte{p}) }

func (c *randVecReader) ReadVectored(bufs [][]byte) (int, error) {
	c.calls++
	if len(c.data) == 0 {
		return 0, errors.New("randVecReader: end of stream")
	}
	limit := min(len(c.data), 1+c.rng.IntN(c.max))
	if c.max >= 1<<20 { // everything at hand
		limit = len(c.data)
	}
	n := 0
	for _, b := range bufs {
		k := copy(b, c.data[n:limit])
		n += k
		if n == limit {
			break
		}
	}
	c.data = c.data[n:]
	return n, nil
}

// aheadStream is a stream of FPDUs, each a 14-octet header naming its index and a payload.
type aheadStream struct {
	hdrs, pays [][]byte
	wire       []byte
}

func aheadHeader(i int) []byte { return []byte(fmt.Sprintf("hdr-%010d", i)) }

func newAheadStream(rng *rand.Rand, crc bool, sizes []int) *aheadStream {
	s := &aheadStream{}
	for i, n := range sizes {
		h, p := aheadHeader(i), make([]byte, n)
		for k := range p {
			p[k] = byte(rng.Uint32())
		}
		s.hdrs, s.pays = append(s.hdrs, h), append(s.pays, p)
		s.wire = AppendFPDU(s.wire, crc, h, p)
	}
	return s
}

// TestReadAhead: a receiver reads FPDU 0 and expects FPDUs 1..k after it (some
// expectations wrong: another header or length); whatever the chunking of the stream,
// every payload lands exactly once, in its Ahead slot if the FPDU was taken ahead or
// through Next/ReadFull otherwise, and the stream after them parses on.
func TestReadAhead(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		crc := seed%2 == 0
		seg := 600 + rng.IntN(3000)
		sizes := []int{seg}
		k := 1 + rng.IntN(MaxAhead+3)
		for range k - 1 {
			sizes = append(sizes, seg)
		}
		sizes = append(sizes, 1+rng.IntN(seg), 1+rng.IntN(200), 700) // the last of the message, then others
		s := newAheadStream(rng, crc, sizes)
		wrong := -1 // an expectation that does not match
		if seed%3 == 0 {
			wrong = rng.IntN(k)
		}
		max := []int{7, 100, 1500, 1 << 20}[rng.IntN(4)]
		cr := &randVecReader{data: s.wire, rng: rng, max: max}
		fr := NewReader(cr, FramingOptions{CRC: crc, ReadBuffer: 4096})
		got := make([][]byte, len(sizes))
		// FPDU 0: its header through ReadFull, its payload with ReadAhead
		if n, err := fr.Next(); err != nil || n != 14+sizes[0] {
			t.Fatalf("seed %d: Next %d %v", seed, n, err)
		}
		h := make([]byte, 14)
		if err := fr.ReadFull(h); err != nil {
			t.Fatal(err)
		}
		got[0] = make([]byte, sizes[0])
		ahead := make([]Ahead, k)
		for j := range ahead {
			i := j + 1
			got[i] = make([]byte, sizes[i])
			ahead[j] = Ahead{Header: aheadHeader(i), Payload: got[i]}
			if j == wrong {
				if seed%2 == 0 {
					ahead[j].Header = aheadHeader(i + 1000)
				} else {
					ahead[j].Payload = make([]byte, sizes[i]+4)
					got[i] = nil
				}
			}
		}
		done, started, err := fr.ReadAhead(got[0], ahead)
		if err != nil {
			t.Fatalf("seed %d: ReadAhead: %v", seed, err)
		}
		if wrong >= 0 && (done > wrong || (started && done == wrong)) {
			t.Fatalf("seed %d: took the wrong expectation %d (done %d started %v)", seed, wrong, done, started)
		}
		next := done + 1 // the first FPDU index not yet taken
		if started {
			a := ahead[done].Payload
			rest := a[len(a)-fr.Remaining():]
			if err := fr.ReadFull(rest); err != nil {
				t.Fatal(err)
			}
			if err := fr.End(); err != nil {
				t.Fatalf("seed %d: End of the started FPDU: %v", seed, err)
			}
			next++
		}
		for i := next; i < len(sizes); i++ {
			n, err := fr.Next()
			if err != nil || n != 14+sizes[i] {
				t.Fatalf("seed %d: FPDU %d: Next %d %v (done %d started %v wrong %d)", seed, i, n, err, done, started, wrong)
			}
			if err := fr.ReadFull(h); err != nil || !bytes.Equal(h, s.hdrs[i]) {
				t.Fatalf("seed %d: FPDU %d header %q %v", seed, i, h, err)
			}
			got[i] = make([]byte, sizes[i])
			if err := fr.ReadFull(got[i]); err != nil {
				t.Fatal(err)
			}
			if err := fr.End(); err != nil {
				t.Fatalf("seed %d: FPDU %d End: %v", seed, i, err)
			}
		}
		for i := range sizes {
			if !bytes.Equal(got[i], s.pays[i]) {
				t.Fatalf("seed %d: FPDU %d payload differs (done %d started %v wrong %d max %d)", seed, i, done, started, wrong, max)
			}
		}
		if fr.StreamOffset() != uint32(len(s.wire)) || len(cr.data) != 0 {
			t.Fatalf("seed %d: at %d of %d", seed, fr.StreamOffset(), len(s.wire))
		}
		if max == 1<<20 && wrong < 0 && done != min(k, MaxAhead) {
			t.Fatalf("seed %d: with the whole stream at hand it took %d of %d", seed, done, k)
		}
	}
}

// TestReadAheadCRC: a bad CRC in any FPDU read ahead is reported (by ReadAhead or by the
// End of the FPDU it started), and nothing after it is delivered.
func TestReadAheadCRC(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		sizes := []int{1000, 1000, 1000, 1000, 500}
		s := newAheadStream(rng, true, sizes)
		bad := rng.IntN(len(sizes))
		off := 0
		for i := range bad {
			off += FPDULen(14 + sizes[i])
		}
		s.wire[off+2+14+rng.IntN(sizes[bad])] ^= 0x40
		cr := &randVecReader{data: s.wire, rng: rng, max: []int{9, 700, 1 << 20}[rng.IntN(3)]}
		fr := NewReader(cr, FramingOptions{CRC: true})
		fr.Next()
		h := make([]byte, 14)
		fr.ReadFull(h)
		ahead := make([]Ahead, len(sizes)-1)
		for j := range ahead {
			ahead[j] = Ahead{Header: aheadHeader(j + 1), Payload: make([]byte, sizes[j+1])}
		}
		done, started, err := fr.ReadAhead(make([]byte, sizes[0]), ahead)
		if err == nil && started {
			a := ahead[done].Payload
			if err = fr.ReadFull(a[len(a)-fr.Remaining():]); err == nil {
				err = fr.End()
			}
			done++
		}
		for err == nil && done < len(ahead) {
			if _, err = fr.Next(); err == nil {
				if err = fr.Discard(fr.Remaining()); err == nil {
					err = fr.End()
				}
			}
			done++
		}
		if !errors.Is(err, errCRC) {
			t.Fatalf("seed %d: corrupted FPDU %d: err %v", seed, bad, err)
		}
		if _, err := fr.Next(); err == nil {
			t.Fatalf("seed %d: an FPDU was delivered after a CRC error", seed)
		}
	}
}

// TestReadAheadPlain: without a VectoredReader (or with Markers) ReadAhead is ReadFull
// and End.
func TestReadAheadPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	s := newAheadStream(rng, true, []int{2000, 2000})
	fr := NewReader(bytes.NewReader(s.wire), FramingOptions{CRC: true})
	fr.Next()
	h := make([]byte, 14)
	fr.ReadFull(h)
	p := make([]byte, 2000)
	done, started, err := fr.ReadAhead(p, []Ahead{{Header: aheadHeader(1), Payload: make([]byte, 2000)}})
	if err != nil || done != 0 || started || !bytes.Equal(p, s.pays[0]) {
		t.Fatalf("done %d started %v err %v", done, started, err)
	}
	if _, _, err := fr.ReadAhead(p, nil); !errors.Is(err, ErrNotInFPDU) {
		t.Fatalf("outside an FPDU: %v", err)
	}
}

// TestFPDUBuffered: true exactly when the buffer holds the whole next FPDU.
func TestFPDUBuffered(t *testing.T) {
	wire := AppendFPDU(nil, true, []byte("first FPDU"))
	second := AppendFPDU(nil, true, []byte("second, longer FPDU"))
	for cut := 0; cut <= len(second); cut++ {
		fr := NewReader(bytes.NewReader(append(append([]byte(nil), wire...), second[:cut]...)), FramingOptions{CRC: true})
		if fr.FPDUBuffered() {
			t.Fatal("true before anything was read")
		}
		if _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
		if fr.FPDUBuffered() {
			t.Fatal("true inside an FPDU")
		}
		if err := fr.End(); err != nil {
			t.Fatal(err)
		}
		if got, want := fr.FPDUBuffered(), cut == len(second); got != want {
			t.Fatalf("%d of %d octets of the next FPDU buffered: %v", cut, len(second), got)
		}
	}
}
