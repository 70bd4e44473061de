package mpa

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"
)

// chunkReader returns at most n octets per Read, to exercise the buffered
// and direct paths of Reader.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// vecChunkReader is a chunkReader that is also a VectoredReader: each
// ReadVectored call returns up to 16n octets spread over bufs in order.
type vecChunkReader struct {
	chunkReader
	calls int
}

func (c *vecChunkReader) ReadVectored(bufs [][]byte) (int, error) {
	c.calls++
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	t := 0
	for _, p := range bufs {
		k := min(len(p), 16*c.n-t, len(c.b))
		copy(p, c.b[:k])
		c.b, t = c.b[k:], t+k
	}
	return t, nil
}

func fuzzOpts(flags byte, off uint16) FramingOptions {
	opt := FramingOptions{CRC: flags&1 != 0, Markers: flags&2 != 0, StreamOffset: uint32(off) &^ 3}
	if flags&4 != 0 {
		opt.ReadBuffer = 64
	}
	return opt
}

// deframeAll reads every FPDU of wire and returns the ULPDUs, the number of
// wire octets they occupied and the final error.
// With vec the input is a VectoredReader.
func deframeAll(wire []byte, opt FramingOptions, chunk int, vec bool) ([][]byte, int, error) {
	var in io.Reader = &chunkReader{b: wire, n: chunk}
	if vec {
		in = &vecChunkReader{chunkReader: chunkReader{b: wire, n: chunk}}
	}
	r := NewReader(in, opt)
	var us [][]byte
	used := 0
	for {
		n, err := r.Next()
		if err != nil {
			return us, used, err
		}
		u := make([]byte, n)
		if err := r.ReadFull(u); err != nil {
			return us, used, err
		}
		if err := r.End(); err != nil {
			return us, used, err
		}
		us = append(us, u)
		used = int(r.StreamOffset() - opt.StreamOffset&^3)
	}
}

// FuzzReader deframes arbitrary streams (with or without CRC and Markers, at
// any stream offset, with any read chunking, from a plain or (flags&8) a
// vectored reader), then re-frames what it delivered (one write per FPDU, or
// with flags&8 queued into batches): the result must deframe to the same
// ULPDUs, and with CRC on it must equal the consumed input octet for octet.
func FuzzReader(f *testing.F) {
	f.Add(figure5, byte(3), uint16(0), uint8(255))
	f.Add(figure6, byte(3), uint16(0x1ec), uint8(7))
	f.Add(figure6, byte(2), uint16(0x1ec), uint8(0))
	f.Add(mustHex("0022414300000000000000000000000100000000000055fc4d14cb90bfa48d000000004000000000"), byte(0), uint16(0), uint8(40))
	rng := rand.New(rand.NewSource(6))
	for _, opt := range allOpts {
		wire := writeStream(f, rng, opt, randomULPDUs(rng, 3, 600))
		var flags byte
		if opt.CRC {
			flags |= 1
		}
		if opt.Markers {
			flags |= 2
		}
		f.Add(wire, flags, uint16(opt.StreamOffset), uint8(rng.Intn(256)))
		f.Add(wire, flags|4, uint16(opt.StreamOffset), uint8(3))
		f.Add(wire, flags|4|8, uint16(opt.StreamOffset), uint8(rng.Intn(256)))
	}
	f.Fuzz(func(t *testing.T, wire []byte, flags byte, off uint16, chunk uint8) {
		opt := fuzzOpts(flags, off)
		vec := flags&8 != 0
		us, used, err := deframeAll(wire, opt, int(chunk)+1, vec)
		var me *Error
		if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &me) {
			t.Fatalf("unexpected error %v", err)
		}
		if me != nil && (me.Code != CodeCRC && me.Code != CodeMarker || me.Code == CodeCRC && !opt.CRC) {
			t.Fatalf("unexpected MPA error %v", me)
		}
		if err == io.EOF && used != len(wire) {
			t.Fatalf("EOF after %d of %d octets", used, len(wire))
		}
		var out bytes.Buffer
		w := NewWriter(&out, opt)
		for _, u := range us {
			var err error
			if vec {
				err = w.QueueFPDU(u[:len(u)/3], [][]byte{u[len(u)/3:]})
			} else {
				err = w.WriteFPDU(u[:len(u)/3], [][]byte{u[len(u)/3:]})
			}
			if err != nil {
				t.Fatalf("reframe: %v", err)
			}
		}
		if err := w.Flush(); err != nil || w.Buffered() != 0 {
			t.Fatalf("flush: %v, %d octets left", err, w.Buffered())
		}
		us2, used2, err := deframeAll(out.Bytes(), opt, 1<<20, !vec)
		if err != io.EOF || used2 != out.Len() || len(us2) != len(us) {
			t.Fatalf("re-deframe: %v, %d of %d octets, %d/%d ULPDUs", err, used2, out.Len(), len(us2), len(us))
		}
		for i := range us {
			if !bytes.Equal(us[i], us2[i]) {
				t.Fatalf("ULPDU %d differs", i)
			}
		}
		if opt.CRC && !bytes.Equal(out.Bytes(), wire[:used]) {
			t.Fatalf("round trip\n got %x\nwant %x", out.Bytes(), wire[:used])
		}
	})
}
