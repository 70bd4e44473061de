package roce

import (
	"math/bits"
	"sync/atomic"

	"github.com/softrnic/softrnic/internal/fastcrc"
)

// Joining a payload's CRC, computed apart, to an ICRC.
//
// The ICRC (IBTA Vol.1 §7.8.1; RoCEv2: Annex A17.3.3, A17.4) is one CRC-32 run over
// pseudo headers, the transport headers, the payload and the pad. CRC-32 is affine over
// GF(2), and with hash/crc32's conditioning (register preset to all-ones, result
// inverted) the constants cancel in a concatenation (zlib's crc32_combine):
//
//	crc(A‖B) = crc(A)·x^(8|B|) mod P  ⊕  crc(B)
//
// so a sender can run the CRC over a payload in one place, at one time (ICRCPart), and
// join it to the CRC of the headers it builds later (ICRCJoin) with one multiplication by
// the constant x^(8n) mod P, instead of a pass over the n payload bytes. For the lengths
// a RoCE path carries as a full packet (the five IB MTUs, 256–4096 bytes, and powers of
// two up to 8 KiB) the multiplication is a table of 512 bytes made on first use.

// ICRCPart returns the CRC of p alone (crc32.ChecksumIEEE), as ICRCJoin takes it. It
// does not allocate.
func ICRCPart(p []byte) uint32 { return fastcrc.IEEE(0, p) }

// ICRCJoin returns ICRCAdd(crc, p) for the n bytes p whose ICRCPart is part, without
// reading p: the ICRC state after the bytes crc covers and then p. It does not allocate
// and is safe for concurrent use.
func ICRCJoin(crc, part uint32, n int) uint32 {
	if n <= 0 {
		return crc
	}
	return joinMul(n, crc) ^ part
}

// icrcJoinTabs[k] multiplies by x^(8·2^k) mod P (k < len), made on first use; racing
// writers store equal tables.
var icrcJoinTabs [14]atomic.Pointer[crcMulTable]

// joinMul returns a·x^(8n) mod P: a table look-up for n a power of two up to 8 KiB,
// crcMulMod otherwise (about a microsecond: square and multiply).
func joinMul(n int, a uint32) uint32 {
	if n&(n-1) == 0 {
		if k := bits.TrailingZeros(uint(n)); k < len(icrcJoinTabs) {
			t := icrcJoinTabs[k].Load()
			if t == nil {
				t = newCRCMulTable(crcXPow(crcOne>>1, uint(8*n))) // crcOne>>1 is x
				icrcJoinTabs[k].Store(t)
			}
			return t.mul(a)
		}
	}
	return crcMulMod(a, crcXPow(crcOne>>1, uint(8*n)))
}
