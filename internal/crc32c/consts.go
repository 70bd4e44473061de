package crc32c

import "math/bits"

// castagnoliPoly is the CRC32c polynomial, x^32 omitted, most significant bit first.
const castagnoliPoly = 0x1EDC6F41

// xPowMod returns x^n mod P, most significant bit first (degree < 32).
func xPowMod(n int) uint32 {
	v := uint64(1)
	for range n {
		v <<= 1
		if v&(1<<32) != 0 {
			v ^= 1<<32 | castagnoliPoly
		}
	}
	return uint32(v)
}

// foldConsts returns the two constants that fold a 128-bit accumulator forward by d bits,
// as the bit-reflected 64-bit operands the carry-less multiplications take: the low
// (earlier) half of the accumulator is multiplied by x^(d+64) mod P, the high half by
// x^d mod P, each divided by x because a product of two reflected operands comes out one
// bit position too high.
func foldConsts(d int) (lo, hi uint64) {
	return bits.Reverse64(uint64(xPowMod(d + 63))), bits.Reverse64(uint64(xPowMod(d - 1)))
}
