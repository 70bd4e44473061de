//go:build amd64 && !purego

package crc32c

import "golang.org/x/sys/cpu"

// hasFold reports whether foldBlocks can run here: AVX-512 with 512-bit VPCLMULQDQ for
// the folding, SSE 4.2 for the final CRC32 instructions (x/sys/cpu also checks that the
// OS saves the AVX-512 registers).
var hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasSSE42

// foldK holds the folding constants foldAVX512 takes, low constant first (foldConsts):
// by 2048 bits (the main loop), 512 (accumulator into accumulator), then 384, 256 and
// 128 (the last accumulator's lanes into its last one).
var foldK = func() (k [5][2]uint64) {
	for i, d := range []int{2048, 512, 384, 256, 128} {
		k[i][0], k[i][1] = foldConsts(d)
	}
	return k
}()

// foldAVX512 is foldRef (ref_test.go) in assembly: the register crc (not inverted) after
// p, a non-empty multiple of 256 bytes.
//
//go:noescape
func foldAVX512(crc uint32, p []byte, k *[5][2]uint64) uint32

func foldBlocks(crc uint32, p []byte) uint32 { return foldAVX512(crc, p, &foldK) }
