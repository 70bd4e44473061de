package mpa

import (
	"io"
	"net"
	"testing"
)

// tcpPair returns a connected loopback TCP pair.
func tcpPair(tb testing.TB) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// BenchmarkTCP frames a 64 KiB message onto a loopback TCP connection (one
// writev per FPDU) and deframes it on the other end into a destination
// buffer, as the engine does. Allocations count both sides.
func BenchmarkTCP(b *testing.B) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			c, s := tcpPair(b)
			hdr, chunks := benchSegments(65483, bo.opt.Markers)
			w := NewWriter(c, bo.opt)
			r := NewReader(s, bo.opt)
			dst := make([]byte, benchMsg)
			h := make([]byte, len(hdr))
			pl := make([][]byte, 1)
			start, done := make(chan bool), make(chan error, 1)
			go func() {
				for range start {
					var err error
					for _, ch := range chunks {
						pl[0] = ch
						if err = w.WriteFPDU(hdr, pl); err != nil {
							break
						}
					}
					done <- err
				}
			}()
			defer close(start)
			b.SetBytes(benchMsg)
			b.ReportAllocs()
			for b.Loop() {
				start <- true
				off := 0
				for range chunks {
					n, err := r.Next()
					if err != nil {
						b.Fatal(err)
					}
					if err := r.ReadFull(h); err != nil {
						b.Fatal(err)
					}
					if err := r.ReadFull(dst[off : off+n-len(h)]); err != nil {
						b.Fatal(err)
					}
					off += n - len(h)
					if err := r.End(); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil && err != io.EOF {
					b.Fatal(err)
				}
			}
		})
	}
}
