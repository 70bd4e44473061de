package mpa

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

const benchMsg = 64 << 10

var benchOpts = []struct {
	name string
	opt  FramingOptions
}{
	{"plain", FramingOptions{}},
	{"crc", FramingOptions{CRC: true}},
	{"markers", FramingOptions{Markers: true}},
	{"crc+markers", FramingOptions{CRC: true, Markers: true}},
}

// benchSegments splits a 64 KiB message into DDP-like segments of an
// 18-octet header plus payload, each filling MULPDU(emss).
func benchSegments(emss int, markers bool) (hdr []byte, chunks [][]byte) {
	msg := make([]byte, benchMsg)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	hdr = make([]byte, 18)
	per := MULPDU(emss, markers) - len(hdr)
	for len(msg) > 0 {
		k := min(per, len(msg))
		chunks = append(chunks, msg[:k])
		msg = msg[k:]
	}
	return hdr, chunks
}

// BenchmarkWriter frames a 64 KiB message into FPDUs for EMSS 1460 and for
// a loopback-sized EMSS.
func BenchmarkWriter(b *testing.B) {
	for _, emss := range []int{1460, 65483} {
		for _, bo := range benchOpts {
			b.Run(fmt.Sprintf("emss%d/%s", emss, bo.name), func(b *testing.B) {
				hdr, chunks := benchSegments(emss, bo.opt.Markers)
				w := NewWriter(io.Discard, bo.opt)
				pl := make([][]byte, 1)
				b.SetBytes(benchMsg)
				b.ReportAllocs()
				for b.Loop() {
					w.Reset(io.Discard, bo.opt)
					for _, c := range chunks {
						pl[0] = c
						if err := w.WriteFPDU(hdr, pl); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkReader deframes the same streams, reading each DDP header into a
// small buffer and the payload straight into a 64 KiB destination.
func BenchmarkReader(b *testing.B) {
	for _, emss := range []int{1460, 65483} {
		for _, bo := range benchOpts {
			b.Run(fmt.Sprintf("emss%d/%s", emss, bo.name), func(b *testing.B) {
				hdr, chunks := benchSegments(emss, bo.opt.Markers)
				var out bytes.Buffer
				w := NewWriter(&out, bo.opt)
				for _, c := range chunks {
					if err := w.WriteFPDU(hdr, [][]byte{c}); err != nil {
						b.Fatal(err)
					}
				}
				wire := out.Bytes()
				dst := make([]byte, benchMsg)
				h := make([]byte, len(hdr))
				src := bytes.NewReader(wire)
				r := NewReader(src, bo.opt)
				b.SetBytes(benchMsg)
				b.ReportAllocs()
				for b.Loop() {
					src.Reset(wire)
					r.Reset(src, bo.opt)
					off := 0
					for range chunks {
						n, err := r.Next()
						if err != nil {
							b.Fatal(err)
						}
						if err := r.ReadFull(h); err != nil {
							b.Fatal(err)
						}
						k := n - len(h)
						if err := r.ReadFull(dst[off : off+k]); err != nil {
							b.Fatal(err)
						}
						off += k
						if err := r.End(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkSmallFlush writes one small FPDU (18-octet header, 64-octet payload, CRC: 88
// octets in 3 pieces) per operation to a loopback TCP connection that a goroutine
// drains: "pieces" by Flush (writev(2) of the pieces), "one" by FlushOwned (one write(2)
// of their copy). It is the evidence for flatMax.
func BenchmarkSmallFlush(b *testing.B) {
	for _, owned := range []bool{false, true} {
		name := "pieces"
		if owned {
			name = "one"
		}
		b.Run(name, func(b *testing.B) {
			a, c := tcpPair(b)
			go func() { _, _ = io.Copy(io.Discard, c) }()
			opt := FramingOptions{CRC: true}
			w := NewWriter(a, opt)
			hdr, pl := make([]byte, 18), [][]byte{make([]byte, 64)}
			flush := w.Flush
			if owned {
				flush = w.FlushOwned
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := w.QueueFPDU(hdr, pl); err != nil {
					b.Fatal(err)
				}
				if err := flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
