//go:build amd64 && !purego

package fastcrc

import "golang.org/x/sys/cpu"

// hasFold reports whether foldBlocks can run here: AVX-512 (F, VL) with 512-bit
// VPCLMULQDQ (x/sys/cpu also checks that the OS saves the AVX-512 registers).
var hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// foldBlocks is foldRef (ref_test.go) in assembly: crc is the register (not inverted)
// before p, a non-empty multiple of 256 bytes; the result is the 128 bits whose CRC from
// a zero register is the register after p.
//
//go:noescape
func foldBlocks(crc uint32, p []byte, k *[5][2]uint64) (lo, hi uint64)
