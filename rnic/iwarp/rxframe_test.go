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

// TestFPDUReader checks the readv deframer against FPDUs framed by mpa.AppendFPDU:
// random ULPDU sizes, random read splits (buffered and direct), CRC on and off, a
// corrupted CRC, and truncation.
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
		fr := newFPDUReader(r, crc)
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
	fr := newFPDUReader(r, true)
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
	fr = newFPDUReader(r, false)
	n, _ = fr.Next()
	if err := fr.ReadFull(make([]byte, n)); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v", err)
	}
}
