package crc32c

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// clmul is the carry-less product of a and b as PCLMULQDQ gives it (lo, hi).
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b&(1<<i) != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return
}

type u128 struct{ lo, hi uint64 }

func load(p []byte) u128 {
	return u128{binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])}
}

// fold moves x forward by d bits (foldConsts) and adds it to y.
func fold(x, y u128, d int) u128 {
	k1, k2 := foldConsts(d)
	a0, a1 := clmul(x.lo, k1)
	b0, b1 := clmul(x.hi, k2)
	return u128{a0 ^ b0 ^ y.lo, a1 ^ b1 ^ y.hi}
}

// crc32q is the CRC32 instruction on 8 bytes (Castagnoli, no inversions).
func crc32q(crc uint32, v uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return ^crc32.Update(^crc, table, b[:])
}

// foldRef is what the assembly does, in Go: p is a non-empty multiple of 256 bytes, crc
// the register (not inverted). Sixteen 128-bit lanes (four 512-bit accumulators) take
// the first 256 bytes, the register added to the first 4; each further 256 bytes are
// added to the lanes folded forward by 2048 bits. Then each accumulator is folded into
// the next (512 bits), the last one's four lanes into its last (384, 256, 128 bits), and
// the remaining 128 bits reduced with two CRC32 instructions from a zero register.
func foldRef(crc uint32, p []byte) uint32 {
	var z [16]u128
	for i := range z {
		z[i] = load(p[16*i:])
	}
	z[0].lo ^= uint64(crc)
	for p = p[256:]; len(p) > 0; p = p[256:] {
		for i := range z {
			z[i] = fold(z[i], load(p[16*i:]), 2048)
		}
	}
	for a := range 3 { // accumulator a into a+1, lane by lane
		for l := range 4 {
			z[4*(a+1)+l] = fold(z[4*a+l], z[4*(a+1)+l], 512)
		}
	}
	x := z[15]
	for l := range 3 {
		x = fold(z[12+l], x, 128*(3-l))
	}
	return crc32q(crc32q(0, x.lo), x.hi)
}

// TestFoldReference checks the folding method and its constants, on every machine: the
// Go model of the assembly agrees with hash/crc32.
func TestFoldReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{256, 512, 768, 4096, 65536} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		for _, c := range []uint32{0, 0xffffffff, r.Uint32()} {
			want := ^crc32.Update(^c, table, p)
			if got := foldRef(c, p); got != want {
				t.Fatalf("len %d crc %#x: fold %#08x, hash/crc32 %#08x", n, c, got, want)
			}
		}
	}
}

func TestXPowMod(t *testing.T) {
	// x^32 mod P is P without x^32; x^31 is itself.
	if got := xPowMod(32); got != castagnoliPoly {
		t.Fatalf("x^32 mod P = %#x", got)
	}
	if got := xPowMod(31); got != 1<<31 {
		t.Fatalf("x^31 mod P = %#x", got)
	}
	_ = bits.Len
}
