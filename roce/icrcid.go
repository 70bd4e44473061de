package roce

import (
	"math/bits"
	"sync/atomic"
)

// Solving an IPv4 ICRC for the unknown IP Identification.
//
// The ICRC covers the IPv4 Identification (IBTA Vol.1 Annex A17.4.1.1),
// which a receiver on a UDP socket never sees. CRC-32 is affine over GF(2):
// for a fixed covered length, changing the ID from 0 to id changes the CRC
// by D(id) = id(x)·x^(32+8n) mod P, where id(x) is the 16 ID bits as a
// polynomial of degree < 16 in wire bit order and n is the number of covered
// bytes after the ID field (22 + the BTH-through-pad length: 6 bytes of IP
// header, 8 of UDP). x is a unit modulo P (P has a constant term), so
// multiplying by x^(32+8n) is injective: the 2^16 IDs give 2^16 distinct
// differences (rank 16), and given the received ICRC r and the ICRC c0
// computed with ID 0,
//
//	t = (c0 ^ r)·x^-(32+8n) mod P
//
// has degree < 16 exactly when some ID explains the packet, and then t is
// that ID. A corrupted packet is therefore accepted with probability 2^-16
// (plus the chance that the corruption is itself a multiple of
// x^(32+8n)·(degree < 16) — see the tests for single-bit flips).
//
// Polynomials are in the reflected representation of hash/crc32: the
// coefficient of x^k is bit 31-k, so 1 is 0x80000000 and x is 0x40000000.

const (
	crcPolyRefl = 0xEDB88320 // P(x) without x^32, reflected
	crcOne      = 1 << 31    // the polynomial 1
	// crcXInv is x^-1 mod P: P = 1 + x·Q, so x·Q ≡ 1 and x^-1 = Q = P/x,
	// whose reflected form is P's shifted up one place with x^31 (bit 0) set.
	crcXInv = crcPolyRefl<<1&0xFFFFFFFF | 1
)

// crcMulMod returns a·b mod P (reflected representation).
func crcMulMod(a, b uint32) uint32 {
	var p uint32
	for range 32 {
		p ^= b & -(a >> 31)
		a <<= 1
		b = b>>1 ^ crcPolyRefl&-(b&1) // b·x mod P
	}
	return p
}

// crcXPow returns base^e mod P by square and multiply.
func crcXPow(base uint32, e uint) uint32 {
	r := uint32(crcOne)
	for ; e != 0; e >>= 1 {
		if e&1 != 0 {
			r = crcMulMod(r, base)
		}
		base = crcMulMod(base, base)
	}
	return r
}

// icrcIDCacheLen bounds the lazily filled table of per-length inverse
// shifts: BTH-through-pad lengths below it (jumbo frames included) are
// computed once; longer ones are computed per call.
const icrcIDCacheLen = 9216

// icrcIDInv[ibLen] is x^-(32+8·(22+ibLen)) mod P, or 0 while not computed
// (a power of x is never 0). Racing writers store the same value.
var icrcIDInv [icrcIDCacheLen]atomic.Uint32

// icrcIDShiftInv returns x^-(32+8·(22+ibLen)) mod P.
func icrcIDShiftInv(ibLen int) uint32 {
	if ibLen < icrcIDCacheLen {
		if v := icrcIDInv[ibLen].Load(); v != 0 {
			return v
		}
	}
	v := crcXPow(crcXInv, uint(32+8*(22+ibLen)))
	if ibLen < icrcIDCacheLen {
		icrcIDInv[ibLen].Store(v)
	}
	return v
}

// crcMulTable multiplies by a fixed polynomial b modulo P: entry [i][v] is the
// product of b with the polynomial whose reflected bits are v<<(4i), so a·b is the
// XOR of eight look-ups, one per nibble of a (crcMulMod takes 32 dependent steps).
type crcMulTable [8][16]uint32

func newCRCMulTable(b uint32) *crcMulTable {
	t := new(crcMulTable)
	for bit := 31; bit >= 0; bit-- { // reflected bit 31-k is x^k; b is x^k·b here
		for v := range 16 {
			if v>>(bit%4)&1 != 0 {
				t[bit/4][v] ^= b
			}
		}
		b = b>>1 ^ crcPolyRefl&-(b&1) // ·x
	}
	return t
}

func (t *crcMulTable) mul(a uint32) uint32 {
	return t[0][a&15] ^ t[1][a>>4&15] ^ t[2][a>>8&15] ^ t[3][a>>12&15] ^
		t[4][a>>16&15] ^ t[5][a>>20&15] ^ t[6][a>>24&15] ^ t[7][a>>28]
}

// icrcIDInvTab[ibLen] multiplies by icrcIDShiftInv(ibLen), built on the first
// packet of that length that needs solving (512 bytes per length seen).
var icrcIDInvTab [icrcIDCacheLen]atomic.Pointer[crcMulTable]

func icrcIDInvTable(ibLen int) *crcMulTable {
	t := icrcIDInvTab[ibLen].Load()
	if t == nil {
		t = newCRCMulTable(icrcIDShiftInv(ibLen))
		icrcIDInvTab[ibLen].Store(t) // racing writers store equal tables
	}
	return t
}

// SolveICRCIPv4ID finds the IPv4 Identification under which a packet's
// ICRC verifies, for receivers that see everything but the ID (a UDP
// socket). crc0 is the ICRC computed with ID 0 (ICRCStartV4 with id 0,
// then ICRCAddTransport/ICRCAdd) over a BTH-through-pad part of ibLen bytes,
// got the ICRC received. ok is false when no ID makes the ICRC match: the
// packet is corrupt. When ok, the ICRC computed with id equals got; a
// random corruption still yields ok with probability 2^-16. It does not
// allocate and is safe for concurrent use.
func SolveICRCIPv4ID(crc0, got uint32, ibLen int) (id uint16, ok bool) {
	s := crc0 ^ got
	if s == 0 {
		return 0, true
	}
	if ibLen < 0 {
		return 0, false
	}
	var t uint32
	if ibLen < icrcIDCacheLen {
		t = icrcIDInvTable(ibLen).mul(s)
	} else {
		t = crcMulMod(s, icrcIDShiftInv(ibLen))
	}
	if t&0xFFFF != 0 {
		return 0, false
	}
	// id(x) has degree < 16: the ID's first wire bit (bit 0 of its high
	// byte, CRC bytes are taken LSB first) is x^15, at reflected bit 16.
	return bits.ReverseBytes16(uint16(t >> 16)), true
}

// icrcIDFwd[ibLen] is x^(32+8·(22+ibLen)) mod P, or 0 while not computed.
var icrcIDFwd [icrcIDCacheLen]atomic.Uint32

// icrcIDShift returns x^(32+8·(22+ibLen)) mod P.
func icrcIDShift(ibLen int) uint32 {
	if ibLen < icrcIDCacheLen {
		if v := icrcIDFwd[ibLen].Load(); v != 0 {
			return v
		}
	}
	v := crcXPow(crcOne>>1, uint(32+8*(22+ibLen))) // crcOne>>1 is x
	if ibLen < icrcIDCacheLen {
		icrcIDFwd[ibLen].Store(v)
	}
	return v
}

// ICRCIPv4IDDelta is what an IPv4 ICRC changes by when the IP Identification goes
// from 0 to id, for a BTH-through-pad part of ibLen bytes: the ICRC computed with id is
// the one computed with ID 0 XOR the delta (the inverse of SolveICRCIPv4ID). A sender
// that knows the ID the kernel will give a packet — UDP GSO numbers the segments of a
// super-datagram sent with ID 0 as 0, 1, 2… — fixes each segment's ICRC with it, so
// receivers that check the real ID (rxe) accept them. It does not allocate and is safe
// for concurrent use.
func ICRCIPv4IDDelta(id uint16, ibLen int) uint32 {
	if id == 0 || ibLen < 0 {
		return 0
	}
	return crcMulMod(uint32(bits.ReverseBytes16(id))<<16, icrcIDShift(ibLen))
}
