package fastcrc

import "math/bits"

// xPowMod returns x^n mod P, P = x^32 + normal (most significant bit first; degree < 32).
func xPowMod(normal uint32, n int) uint32 {
	v := uint64(1)
	for range n {
		v <<= 1
		if v&(1<<32) != 0 {
			v ^= 1<<32 | uint64(normal)
		}
	}
	return uint32(v)
}

// foldConsts returns the two constants that fold a 128-bit accumulator forward by d bits,
// as the bit-reflected 64-bit operands the carry-less multiplications take: the low
// (earlier) half of the accumulator is multiplied by x^(d+64) mod P, the high half by
// x^d mod P, each divided by x because a product of two reflected operands comes out one
// bit position too high.
func foldConsts(normal uint32, d int) (lo, hi uint64) {
	return bits.Reverse64(uint64(xPowMod(normal, d+63))), bits.Reverse64(uint64(xPowMod(normal, d-1)))
}
