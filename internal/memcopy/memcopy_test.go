package memcopy

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopy checks Copy against the builtin copy for lengths around the runtime's REP
// MOVSQ threshold, every source and destination alignment mod 16, short slices on
// either side, and overlapping slices both ways.
func TestCopy(t *testing.T) {
	pool := make([]byte, 3*8192)
	for i := range pool {
		pool[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 8, 255, repMinLen - 1, repMinLen, repMinLen + 7, repMinLen + 8, repMinLen + 9, 4096, 4099, 8000} {
		for so := range 16 {
			for do := range 16 {
				for _, short := range []int{0, 1, 9} { // dst, then src, shorter by short bytes
					src := pool[so : so+n]
					got := make([]byte, n+32)[do : do+n]
					want := make([]byte, n)
					dst := got[:max(0, n-short)]
					if k, wk := Copy(dst, src), copy(want[:len(dst)], src); k != wk || !bytes.Equal(got, want) {
						t.Fatalf("n=%d src+%d dst+%d dst short %d: copied %d, want %d; bytes differ: %v", n, so, do, short, k, wk, !bytes.Equal(got, want))
					}
					got2 := make([]byte, n+32)[do : do+n]
					want2 := make([]byte, n)
					s2 := src[:max(0, n-short)]
					if k, wk := Copy(got2, s2), copy(want2, s2); k != wk || !bytes.Equal(got2, want2) {
						t.Fatalf("n=%d src+%d dst+%d src short %d: copied %d, want %d", n, so, do, short, k, wk)
					}
				}
			}
		}
	}
	for _, shift := range []int{-12, -4, 4, 12, 4100} {
		for _, n := range []int{4096, 8000} {
			a := append([]byte(nil), pool[:16384]...)
			b := append([]byte(nil), pool[:16384]...)
			base := 4096 // 16-byte aligned in a fresh allocation of this size
			Copy(a[base:base+n], a[base+shift:base+shift+n])
			copy(b[base:base+n], b[base+shift:base+shift+n])
			if !bytes.Equal(a, b) {
				t.Fatalf("overlapping copy, source at %+d, %d bytes: differs from copy", shift, n)
			}
		}
	}
}

// BenchmarkCopy copies 4 KiB to a 16-byte-aligned destination from sources at several
// alignments, with Copy and with the builtin copy: the figures of the package comment.
func BenchmarkCopy(b *testing.B) {
	src := make([]byte, 8192)
	dst := make([]byte, 8192)
	for _, so := range []int{0, 4, 12, 28} {
		for _, f := range []struct {
			name string
			fn   func(d, s []byte) int
		}{{"memcopy", Copy}, {"builtin", func(d, s []byte) int { return copy(d, s) }}} {
			b.Run(fmt.Sprintf("src+%d/%s", so, f.name), func(b *testing.B) {
				b.SetBytes(4096)
				for b.Loop() {
					f.fn(dst[:4096], src[so:so+4096])
				}
			})
		}
	}
}
