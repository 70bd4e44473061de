// Package fastcrc computes the two CRC-32s softrnic checks on every byte it moves, as
// hash/crc32 does, faster on amd64 CPUs with AVX-512 and VPCLMULQDQ: CRC32c (Castagnoli;
// RFC 3720 §12.1), the CRC of MPA FPDUs (RFC 5044 §4.1), and CRC-32 (IEEE 802.3), the
// RoCEv2 ICRC (IBTA Annex A17.3.3).
//
// hash/crc32 computes CRC32c with the SSE 4.2 CRC32 instruction, three streams at a time
// (on a recent Xeon about 28 GB/s), and CRC-32 with one 512-bit accumulator of carry-less
// multiplications (49-62 GB/s). Here buffers of 256 bytes and more are folded 256 bytes
// at a time into four 512-bit accumulators, each 128-bit lane moved forward with the
// constants x^(2048+63) and x^(2048-1) mod P (the folding method of Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction", 2009); the 128 bits
// left are reduced as 16 bytes of data, by slicing by 8. The tail after the last full 256
// bytes (CRC-32's is sliced by 8 too when shorter than 64 bytes), shorter buffers, other
// CPUs and other architectures use hash/crc32.
package fastcrc

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// blockLen is the unit the folding code takes (four 64-byte accumulators), and the
// shortest buffer given to it: one block already costs less than hash/crc32. Three runs
// of `go test -run '^$' -bench . ./internal/fastcrc` on a Xeon with AVX-512 (CRC32c;
// IEEE within a few ns): 256 B 10.4-10.7 ns against 14.2-14.7 ns, 4 KiB 39 ns against
// 138-139 ns, 64 KiB 0.53-0.55 µs against 2.28-2.39 µs.
const blockLen = 256

// ieeeTail is CRC-32's slicedTail: hash/crc32 slices fewer than 64 bytes by 8 too, after
// a dispatch that costs more than a short tail. A RoCE packet's ICRC has one (a RETH after
// a 4 KiB payload's first 4,096 bytes, say). `go test -run '^$' -bench Tail -count 3
// ./internal/fastcrc`: 4,112 bytes 47.3-48.7 ns sliced against 52.8-59.0 through
// hash/crc32, 4,144 bytes 58.2-60.7 against 66.5-70.0. CRC32c has none: the SSE 4.2
// instruction beats slicing (4,144 bytes 48.8-49.4 ns against 61.7-62.0).
const ieeeTail = 64

// poly is one CRC-32: hash/crc32's table, the folding constants (foldConsts) by 2048
// bits (the main loop), 512 (accumulator into accumulator), then 384, 256 and 128 (the
// last accumulator's lanes into its last one), and slicing-by-8 tables (small).
type poly struct {
	table *crc32.Table
	k     [5][2]uint64
	// slicedTail: a tail after folded blocks shorter than this is sliced here (small)
	// rather than given to hash/crc32.
	slicedTail int
	s8         [8][256]uint32
}

func newPoly(reversed uint32, slicedTail int) *poly {
	q := &poly{table: crc32.MakeTable(reversed), slicedTail: slicedTail}
	normal := bits.Reverse32(reversed)
	for i, d := range []int{2048, 512, 384, 256, 128} {
		q.k[i][0], q.k[i][1] = foldConsts(normal, d)
	}
	q.s8[0] = *q.table
	for i := range 256 {
		c := q.s8[0][i]
		for k := 1; k < 8; k++ {
			c = q.s8[0][c&0xFF] ^ c>>8
			q.s8[k][i] = c
		}
	}
	return q
}

// small is update for short buffers: slicing by 8, and unlike crc32.Update it keeps p
// on the caller's stack (hash/crc32 lets its argument escape).
func (q *poly) small(crc uint32, p []byte) uint32 {
	t := &q.s8
	s := ^crc
	for len(p) >= 8 {
		s ^= uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
		s = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][s>>24] ^ t[5][s>>16&0xFF] ^ t[6][s>>8&0xFF] ^ t[7][s&0xFF]
		p = p[8:]
	}
	if len(p) >= 4 { // a RoCE BTH is 12 bytes: one step of 4 rather than 4 of 1
		s ^= uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
		s = t[0][s>>24] ^ t[1][s>>16&0xFF] ^ t[2][s>>8&0xFF] ^ t[3][s&0xFF]
		p = p[4:]
	}
	for _, c := range p {
		s = t[0][byte(s)^c] ^ s>>8
	}
	return ^s
}

var (
	castagnoli = newPoly(crc32.Castagnoli, 1) // only an empty tail
	ieee       = newPoly(crc32.IEEE, ieeeTail)
)

// Castagnoli returns the CRC32c of p appended to the data whose CRC32c is crc, as
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p) does.
func Castagnoli(crc uint32, p []byte) uint32 { return castagnoli.update(crc, p) }

// IEEE returns the CRC-32 of p appended to the data whose CRC-32 is crc, as
// crc32.Update(crc, crc32.IEEETable, p) does.
func IEEE(crc uint32, p []byte) uint32 { return ieee.update(crc, p) }

// IEEESmall is IEEE for short buffers (a header, a pad): slicing by 8, which for a few
// dozen bytes costs less than hash/crc32's dispatch, and p does not escape (IEEE lets it,
// as hash/crc32 does).
func IEEESmall(crc uint32, p []byte) uint32 { return ieee.small(crc, p) }

func (q *poly) update(crc uint32, p []byte) uint32 {
	if hasFold && len(p) >= blockLen {
		n := len(p) &^ (blockLen - 1)
		// The register after p[:n] is that of the 16 bytes lo, hi from a zero register.
		lo, hi := foldBlocks(^crc, p[:n], &q.k)
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], lo)
		binary.LittleEndian.PutUint64(b[8:], hi)
		crc = q.small(0xffffffff, b[:])
		if p = p[n:]; len(p) < q.slicedTail {
			return q.small(crc, p)
		}
	}
	return crc32.Update(crc, q.table, p)
}
