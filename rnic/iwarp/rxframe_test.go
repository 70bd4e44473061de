package iwarp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/softrnic/softrnic/mpa"
)

func tcpPairT(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func newRxReader(nc net.Conn, crc bool) *mpa.Reader {
	return mpa.NewReader(rxStream(nc), mpa.FramingOptions{CRC: crc, ReadBuffer: rxReadBuffer})
}

// TestFPDUReader checks the receive path (mpa.Reader over vecConn's readv) against FPDUs
// framed by mpa.AppendFPDU: random ULPDU sizes, random read splits (buffered and direct),
// CRC on and off, a corrupted CRC, and truncation.
func TestFPDUReader(t *testing.T) {
	for _, crc := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(7, uint64(len(t.Name()))))
		var ulpdus [][]byte
		var stream []byte
		for i := 0; i < 200; i++ {
			n := rng.IntN(3000)
			if i%10 == 0 {
				n = rng.IntN(mpa.MaxULPDU + 1)
			}
			u := make([]byte, n)
			for j := range u {
				u[j] = byte(rng.Uint32())
			}
			ulpdus = append(ulpdus, u)
			stream = mpa.AppendFPDU(stream, crc, u)
		}
		w, r := tcpPairT(t)
		go func(w net.Conn, b []byte) {
			_, _ = w.Write(b)
			w.Close()
		}(w, stream)
		fr := newRxReader(r, crc)
		for i, u := range ulpdus {
			n, err := fr.Next()
			if err != nil || n != len(u) {
				t.Fatalf("crc=%v FPDU %d: Next %d %v, want %d", crc, i, n, err, len(u))
			}
			got := make([]byte, 0, n)
			for len(got) < n {
				k := min(n-len(got), 1+rng.IntN(2000))
				if rng.IntN(4) == 0 {
					k = n - len(got)
				}
				p := make([]byte, k)
				if err := fr.ReadFull(p); err != nil {
					t.Fatalf("FPDU %d: ReadFull: %v", i, err)
				}
				got = append(got, p...)
			}
			if err := fr.End(); err != nil {
				t.Fatalf("FPDU %d: End: %v", i, err)
			}
			if !bytes.Equal(got, u) {
				t.Fatalf("FPDU %d: payload differs", i)
			}
		}
		if _, err := fr.Next(); err != io.EOF {
			t.Fatalf("after the last FPDU: %v, want EOF", err)
		}
	}
	// a corrupted CRC is reported by End, then sticks
	stream := mpa.AppendFPDU(nil, true, make([]byte, 4000))
	stream[100] ^= 1
	w, r := tcpPairT(t)
	go func(w net.Conn, b []byte) { _, _ = w.Write(b); w.Close() }(w, stream)
	fr := newRxReader(r, true)
	n, _ := fr.Next()
	if err := fr.ReadFull(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	var me *mpa.Error
	if err := fr.End(); !errors.As(err, &me) || me.Code != mpa.CodeCRC {
		t.Fatalf("End: %v, want CRC error", err)
	}
	if _, err := fr.Next(); !errors.As(err, &me) {
		t.Fatal("error not sticky")
	}
	// truncation inside an FPDU is an unexpected EOF
	stream = mpa.AppendFPDU(nil, false, make([]byte, 5000))
	w, r = tcpPairT(t)
	go func(w net.Conn, b []byte) { _, _ = w.Write(b); w.Close() }(w, stream[:3000])
	fr = newRxReader(r, false)
	n, _ = fr.Next()
	if err := fr.ReadFull(make([]byte, n)); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v", err)
	}
}

// TestVecConnReadVectored: one readv fills the buffers in order; empty buffers are
// skipped; EOF is reported.
func TestVecConnReadVectored(t *testing.T) {
	w, r := tcpPairT(t)
	v, ok := rxStream(r).(mpa.VectoredReader)
	if !ok {
		t.Fatal("TCP connection not wrapped")
	}
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	a, b := make([]byte, 4), make([]byte, 16)
	got := 0
	for got < 10 {
		n, err := v.ReadVectored([][]byte{a[min(got, 4):], nil, b[max(got-4, 0):]})
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if string(a) != "0123" || string(b[:6]) != "456789" {
		t.Fatalf("read %q %q", a, b[:6])
	}
	w.Close()
	if n, err := v.ReadVectored([][]byte{a, b}); n != 0 || err != io.EOF {
		t.Fatalf("after close: %d %v", n, err)
	}
}
