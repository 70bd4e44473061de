package roce

import "encoding/binary"

// AppendIPv4UDP appends the 20-byte IPv4 header and 8-byte UDP header rxe
// puts in front of a RoCEv2 packet (rxe_net.c prepare4): version 4, IHL 5,
// the given TOS, DF set, the given ID and TTL, protocol UDP, a correct
// header checksum, and UDP checksum 0. n is the length of the BTH through
// the pad. The 4 ICRC bytes are added to the lengths. Use it with a raw or
// AF_XDP link. The ICRC must then be computed with the same id
// (ICRCStartV4(src, dst, id, true, …)).
func AppendIPv4UDP(b []byte, src, dst [4]byte, tos, ttl uint8, id, sport, dport uint16, n int) []byte {
	start := len(b)
	b = append(b, 0x45, tos)
	b = binary.BigEndian.AppendUint16(b, uint16(20+8+n+ICRCLen))
	b = binary.BigEndian.AppendUint16(b, id)
	b = append(b, 0x40, 0, ttl, 17, 0, 0)
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	binary.BigEndian.PutUint16(b[start+10:], ipv4Checksum(b[start:start+20]))
	return appendUDP(b, sport, dport, n)
}

// AppendIPv6UDP appends the 40-byte IPv6 header and the UDP header (UDP
// checksum 0, as rxe sends it) for a RoCEv2 packet whose BTH-through-pad
// part is n bytes.
func AppendIPv6UDP(b []byte, src, dst [16]byte, tclass, hopLimit uint8, flowLabel uint32, sport, dport uint16, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, 6<<28|uint32(tclass)<<20|flowLabel&0xFFFFF)
	b = binary.BigEndian.AppendUint16(b, uint16(8+n+ICRCLen))
	b = append(b, 17, hopLimit)
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	return appendUDP(b, sport, dport, n)
}

func appendUDP(b []byte, sport, dport uint16, n int) []byte {
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(8+n+ICRCLen))
	return append(b, 0, 0)
}

// ipv4Checksum returns the RFC 791 header checksum of h (with its checksum
// field zero).
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}
