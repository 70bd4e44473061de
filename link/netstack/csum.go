package netstack

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Receive checksums. The link endpoint verifies the IPv4 header and TCP checksums of
// each received packet itself (one pass, which gVisor then skips), so that it can also
// accept a segment whose TCP checksum was left partial: a sender on the same host
// (veth, tap) with transmit checksum offload fills in only the pseudo-header sum
// (CHECKSUM_PARTIAL) and leaves the rest to a NIC that never sees the packet, and an
// AF_XDP socket gets the frame as it is. Such a checksum field equals the folded
// pseudo-header sum; the endpoint completes it in place and counts it
// (Stats.PartialChecksums). A correct checksum is left as it is even when it happens
// to equal that sum (completing it would write the same value), so what is accepted
// differs from strict verification only for a corrupted segment whose checksum field
// equals its pseudo-header sum (one in 65536 of corrupted segments, where MPA's CRC
// still stands guard).

type rxCsum uint8

const (
	csumBad     rxCsum = iota // not verified: gVisor checks (and counts) it again
	csumOK                    // verified
	csumPartial               // completed in place, then verified
)

// pseudoSum is the one's-complement sum of the TCP pseudo-header (RFC 9293 §3.1,
// RFC 8200 §8.1) of ip, a TCP segment of n bytes.
func pseudoSum(ip []byte, v6 bool, n int) uint16 {
	var s uint16
	if v6 {
		s = checksum.Checksum(ip[8:40], 0)
	} else {
		s = checksum.Checksum(ip[12:20], 0)
	}
	var tail [4]byte
	binary.BigEndian.PutUint16(tail[0:], uint16(n))
	tail[3] = 6 // TCP
	return checksum.Checksum(tail[:], s)
}

// verifyTCP checks the IP header checksum (IPv4) and the TCP checksum of the IP packet
// ip whose TCP header starts at l4 (the packet already parsed by the port: IPv4 without
// fragmentation, or IPv6 without extension headers), completing a partial TCP checksum.
func verifyTCP(ip []byte, l4 int) rxCsum {
	v6 := ip[0]>>4 == 6
	var n int
	if v6 {
		n = int(binary.BigEndian.Uint16(ip[4:]))
	} else {
		if checksum.Checksum(ip[:l4], 0) != 0xFFFF {
			return csumBad
		}
		n = int(binary.BigEndian.Uint16(ip[2:])) - l4
	}
	if n < 20 || l4+n > len(ip) {
		return csumBad
	}
	seg := ip[l4 : l4+n]
	ps := pseudoSum(ip, v6, n)
	if checksum.Checksum(seg, ps) == 0xFFFF {
		return csumOK
	}
	if binary.BigEndian.Uint16(seg[16:]) != ps {
		return csumBad
	}
	// partial: the field holds the pseudo-header sum as the seed of the rest
	binary.BigEndian.PutUint16(seg[16:], ^checksum.Checksum(seg, 0))
	return csumPartial
}
