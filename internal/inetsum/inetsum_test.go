package inetsum

import (
	"math/rand/v2"
	"testing"
)

// TestRFC1071Example is the numerical example of RFC 1071 §3: the bytes 00 01 f2 03 f4 f5
// f6 f7 sum to 0x2ddf0, which folds to 0xddf2.
func TestRFC1071Example(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if s := Add(0, b); s != 0x2ddf0 {
		t.Fatalf("sum %#x, want 0x2ddf0", s)
	}
	if f := Fold(Add(0, b)); f != 0xddf2 {
		t.Fatalf("folded %#x, want 0xddf2", f)
	}
}

// TestAddMatchesWordSum: the 8-byte fast path equals a plain sum of 16-bit words for every
// length and split into an even head and any tail, and a header with its checksum filled
// in sums to 0xFFFF.
func TestAddMatchesWordSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 80 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		var want uint64
		for i := 0; i < n; i += 2 {
			w := uint64(b[i]) << 8
			if i+1 < n {
				w |= uint64(b[i+1])
			}
			want += w
		}
		for k := 0; k <= n; k += 2 {
			if got := Fold(Add(Add(0, b[:k]), b[k:])); got != Fold(want) {
				t.Fatalf("len %d split %d: %#x, want %#x", n, k, got, Fold(want))
			}
		}
		if n >= 12 && n%2 == 0 {
			b[10], b[11] = 0, 0
			c := ^Fold(Add(0, b))
			b[10], b[11] = byte(c>>8), byte(c)
			if f := Fold(Add(0, b)); f != 0xFFFF {
				t.Fatalf("len %d: checked sum %#x", n, f)
			}
		}
	}
}
