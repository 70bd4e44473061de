// Package inetsum is the Internet checksum of RFC 1071: the one's-complement sum of a
// byte string taken as big-endian 16-bit words (an odd last byte is padded with a zero),
// accumulated in 64 bits by Add and folded to 16 bits by Fold. The checksum field of an
// IPv4, UDP or TCP header is ^Fold of the sum over what it covers.
package inetsum

import "encoding/binary"

// Add adds b to the running sum s. Sums over several pieces may be chained as long as
// every piece but the last has an even length.
func Add(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>48 + v>>32&0xFFFF + v>>16&0xFFFF + v&0xFFFF
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// Fold reduces a sum to 16 bits with end-around carries (RFC 1071 §2 (C)).
func Fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}
