package netstack

import (
	"encoding/binary"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// segment builds an IPv4 or IPv6 packet carrying a TCP segment of payload bytes with a
// correct checksum.
func segment(v6 bool, payload int) (ip []byte, l4 int) {
	tcp := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(tcp[0:], 4791)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 5 << 4
	for i := range payload {
		tcp[20+i] = byte(i*13 + 1)
	}
	if v6 {
		ip = make([]byte, 40, 40+len(tcp))
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
		ip[6], ip[7] = 6, 64
		ip[8], ip[23] = 0xfd, 1
		ip[24], ip[39] = 0xfd, 2
		l4 = 40
	} else {
		ip = make([]byte, 20, 20+len(tcp))
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)))
		ip[8], ip[9] = 64, 6
		copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		binary.BigEndian.PutUint16(ip[10:], ^checksum.Checksum(ip[:20], 0))
		l4 = 20
	}
	ip = append(ip, tcp...)
	binary.BigEndian.PutUint16(ip[l4+16:], ^checksum.Checksum(ip[l4:], pseudoSum(ip, v6, len(tcp))))
	return ip, l4
}

func TestVerifyTCP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 1, 1447, 8000} {
			ip, l4 := segment(v6, n)
			good := append([]byte(nil), ip...)
			if got := verifyTCP(ip, l4); got != csumOK {
				t.Fatalf("v6=%v %d: good segment: %v", v6, n, got)
			}
			// partial (CHECKSUM_PARTIAL): the field holds the pseudo-header sum
			binary.BigEndian.PutUint16(ip[l4+16:], pseudoSum(ip, v6, len(ip)-l4))
			if got := verifyTCP(ip, l4); got != csumPartial || string(ip) != string(good) {
				t.Fatalf("v6=%v %d: partial: %v, completed right %v", v6, n, got, string(ip) == string(good))
			}
			// a flipped bit anywhere in the segment, or a wrong field, is bad
			for _, i := range []int{l4 + 4, l4 + 17, len(ip) - 1} {
				ip[i] ^= 0x10
				if got := verifyTCP(ip, l4); got != csumBad {
					t.Fatalf("v6=%v %d: byte %d flipped: %v", v6, n, i, got)
				}
				ip[i] ^= 0x10
			}
			if !v6 {
				ip[8]-- // TTL: the IPv4 header checksum
				if got := verifyTCP(ip, l4); got != csumBad {
					t.Fatalf("bad IPv4 header checksum: %v", got)
				}
				ip[8]++
			}
			if got := verifyTCP(ip[:len(ip)-1], l4); got != csumBad {
				t.Fatalf("v6=%v %d: truncated: %v", v6, n, got)
			}
		}
	}
}

// FuzzVerifyTCP: any packet the port could hand over (IPv4 without fragmentation or
// IPv6 without extension headers, lengths consistent) is classified without a panic,
// and a partial checksum completed once verifies the second time.
func FuzzVerifyTCP(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		ip, _ := segment(v6, 100)
		f.Add(ip)
	}
	f.Fuzz(func(t *testing.T, ip []byte) {
		if len(ip) < 20 {
			return
		}
		var l4 int
		switch ip[0] >> 4 {
		case 4:
			l4 = int(ip[0]&0x0F) * 4
			if l4 < 20 || int(binary.BigEndian.Uint16(ip[2:])) > len(ip) || int(binary.BigEndian.Uint16(ip[2:])) < l4 {
				return
			}
		case 6:
			if len(ip) < 40 || 40+int(binary.BigEndian.Uint16(ip[4:])) > len(ip) {
				return
			}
			l4 = 40
		default:
			return
		}
		if verifyTCP(ip, l4) == csumPartial && verifyTCP(ip, l4) != csumOK {
			t.Fatal("a completed partial checksum does not verify")
		}
	})
}
