//go:build amd64 && !purego

#include "textflag.h"

// func foldBlocks(crc uint32, p []byte, k *[5][2]uint64) (lo, hi uint64)
//
// Z0-Z3 are the four accumulators (Z0 the earliest 64 bytes of each 256), Z4 the
// constants of the fold being made. See foldRef in ref_test.go for the method.
TEXT ·foldBlocks(SB), NOSPLIT, $0-56
	MOVQ p_len+16(FP), CX
	MOVQ p_base+8(FP), SI
	MOVQ k+32(FP), DX
	MOVL crc+0(FP), AX

	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4      // the register, added to the first 4 bytes (VMOVD zeroes the rest)
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX
	JZ        reduce

	VBROADCASTI32X4 (DX), Z4 // by 2048 bits

loop:
	VPCLMULQDQ $0x00, Z4, Z0, Z5
	VPCLMULQDQ $0x11, Z4, Z0, Z0
	VPCLMULQDQ $0x00, Z4, Z1, Z6
	VPCLMULQDQ $0x11, Z4, Z1, Z1
	VPCLMULQDQ $0x00, Z4, Z2, Z7
	VPCLMULQDQ $0x11, Z4, Z2, Z2
	VPCLMULQDQ $0x00, Z4, Z3, Z8
	VPCLMULQDQ $0x11, Z4, Z3, Z3
	VPTERNLOGD $0x96, (SI), Z5, Z0
	VPTERNLOGD $0x96, 64(SI), Z6, Z1
	VPTERNLOGD $0x96, 128(SI), Z7, Z2
	VPTERNLOGD $0x96, 192(SI), Z8, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JNZ        loop

reduce:
	// Each accumulator into the next, 512 bits on.
	VBROADCASTI32X4 16(DX), Z4
	VPCLMULQDQ      $0x00, Z4, Z0, Z5
	VPCLMULQDQ      $0x11, Z4, Z0, Z0
	VPTERNLOGD      $0x96, Z5, Z0, Z1
	VPCLMULQDQ      $0x00, Z4, Z1, Z5
	VPCLMULQDQ      $0x11, Z4, Z1, Z1
	VPTERNLOGD      $0x96, Z5, Z1, Z2
	VPCLMULQDQ      $0x00, Z4, Z2, Z5
	VPCLMULQDQ      $0x11, Z4, Z2, Z2
	VPTERNLOGD      $0x96, Z5, Z2, Z3

	// Z3's lanes 0-2 into lane 3, 384, 256 and 128 bits on.
	VEXTRACTI32X4 $3, Z3, X0
	VEXTRACTI32X4 $2, Z3, X1
	VEXTRACTI32X4 $1, Z3, X2
	VMOVDQU       32(DX), X4
	VPCLMULQDQ    $0x00, X4, X3, X5
	VPCLMULQDQ    $0x11, X4, X3, X6
	VPTERNLOGD    $0x96, X5, X6, X0
	VMOVDQU       48(DX), X4
	VPCLMULQDQ    $0x00, X4, X2, X5
	VPCLMULQDQ    $0x11, X4, X2, X6
	VPTERNLOGD    $0x96, X5, X6, X0
	VMOVDQU       64(DX), X4
	VPCLMULQDQ    $0x00, X4, X1, X5
	VPCLMULQDQ    $0x11, X4, X1, X6
	VPTERNLOGD    $0x96, X5, X6, X0

	// The 128 bits left.
	VMOVQ   X0, lo+40(FP)
	VPEXTRQ $1, X0, hi+48(FP)
	VZEROUPPER
	RET
