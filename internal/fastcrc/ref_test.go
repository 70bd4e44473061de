package fastcrc

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// randBytes returns n bytes from r.
func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

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

// fold moves x forward by the constants k (foldConsts) and adds it to y.
func fold(x, y u128, k [2]uint64) u128 {
	a0, a1 := clmul(x.lo, k[0])
	b0, b1 := clmul(x.hi, k[1])
	return u128{a0 ^ b0 ^ y.lo, a1 ^ b1 ^ y.hi}
}

// foldRef is what the assembly does, in Go: p is a non-empty multiple of 256 bytes, crc
// the register (not inverted). Sixteen 128-bit lanes (four 512-bit accumulators) take
// the first 256 bytes, the register added to the first 4; each further 256 bytes are
// added to the lanes folded forward by 2048 bits (k[0]). Then each accumulator is folded
// into the next (512 bits, k[1]), and the last one's lanes 0, 1, 2 into its lane 3 (384,
// 256, 128 bits: k[2], k[3], k[4]). The result's CRC from a zero register is the
// register after p.
func foldRef(crc uint32, p []byte, k *[5][2]uint64) (lo, hi uint64) {
	var z [16]u128
	for i := range z {
		z[i] = load(p[16*i:])
	}
	z[0].lo ^= uint64(crc)
	for p = p[256:]; len(p) > 0; p = p[256:] {
		for i := range z {
			z[i] = fold(z[i], load(p[16*i:]), k[0])
		}
	}
	for a := range 3 {
		for l := range 4 {
			z[4*(a+1)+l] = fold(z[4*a+l], z[4*(a+1)+l], k[1])
		}
	}
	x := z[15]
	for l := range 3 {
		x = fold(z[12+l], x, k[2+l])
	}
	return x.lo, x.hi
}

var polys = []struct {
	name string
	q    *poly
}{{"castagnoli", castagnoli}, {"ieee", ieee}}

// finish is poly.update's last step, by hash/crc32: the CRC (inverted) of the folded
// 128 bits.
func finish(q *poly, lo, hi uint64) uint32 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], lo)
	binary.LittleEndian.PutUint64(b[8:], hi)
	return crc32.Update(0xffffffff, q.table, b[:])
}

// TestSmall checks slicing by 8 against hash/crc32 for every short length and a few
// start values, both polynomials.
func TestSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	b := randBytes(r, 80)
	for _, pq := range polys {
		for n := range len(b) {
			for _, c := range []uint32{0, 0xffffffff, r.Uint32()} {
				if got, want := pq.q.small(c, b[:n]), crc32.Update(c, pq.q.table, b[:n]); got != want {
					t.Fatalf("%s len %d crc %#x: %#08x, hash/crc32 %#08x", pq.name, n, c, got, want)
				}
			}
		}
	}
}

// TestFoldReference checks the folding method and its constants on every machine: the
// Go model of the assembly agrees with hash/crc32, for both polynomials.
func TestFoldReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, pq := range polys {
		for _, n := range []int{256, 512, 768, 4096, 65536} {
			p := randBytes(r, n)
			for _, c := range []uint32{0, 0xffffffff, r.Uint32()} {
				want := crc32.Update(c, pq.q.table, p)
				lo, hi := foldRef(^c, p, &pq.q.k)
				if got := finish(pq.q, lo, hi); got != want {
					t.Fatalf("%s len %d crc %#x: fold %#08x, hash/crc32 %#08x", pq.name, n, c, got, want)
				}
			}
		}
	}
}

func TestXPowMod(t *testing.T) {
	// x^32 mod P is P without x^32; x^31 is itself.
	for _, normal := range []uint32{0x1EDC6F41, 0x04C11DB7} {
		if got := xPowMod(normal, 32); got != normal {
			t.Fatalf("x^32 mod %#x = %#x", normal, got)
		}
		if got := xPowMod(normal, 31); got != 1<<31 {
			t.Fatalf("x^31 mod %#x = %#x", normal, got)
		}
	}
}
