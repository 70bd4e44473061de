package capture

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrnic/softrnic/internal/inetsum"
)

// Synthetic headers: Ethernet with locally administered MACs derived from
// the IP address, IPv4 (ID 0, DF, TTL 64: what rxe sends and the RoCE ICRC
// assumes) or IPv6 (hop limit 64), UDP or TCP, with correct checksums (the
// UDP checksum over IPv4 is 0, as RoCEv2 senders leave it).

const (
	ethLen   = 14
	ipv4Len  = 20
	ipv6Len  = 40
	udpLen   = 8
	tcpLen   = 20
	protoTCP = 6
	protoUDP = 17
)

// macOf is 02:00 followed by the last four bytes of the address.
func macOf(a netip.Addr) [6]byte {
	s := a.AsSlice()
	return [6]byte{0x02, 0x00, s[len(s)-4], s[len(s)-3], s[len(s)-2], s[len(s)-1]}
}

// ipHeaderLen is the IP header length for a (IPv4 or IPv6).
func ipHeaderLen(a netip.Addr) int {
	if a.Is4() {
		return ipv4Len
	}
	return ipv6Len
}

// putEthIP writes Ethernet and IP headers for a packet of l4 bytes of
// protocol proto into b and returns their length.
func putEthIP(b []byte, src, dst netip.Addr, proto uint8, l4 int) int {
	sm, dm := macOf(src), macOf(dst)
	copy(b[0:6], dm[:])
	copy(b[6:12], sm[:])
	ip := b[ethLen:]
	if src.Is4() {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4Len+l4))
		binary.BigEndian.PutUint16(ip[4:], 0)      // ID
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, proto
		ip[10], ip[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^inetsum.Fold(inetsum.Add(0, ip[:ipv4Len])))
		return ethLen + ipv4Len
	}
	binary.BigEndian.PutUint16(b[12:], 0x86DD)
	binary.BigEndian.PutUint32(ip[0:], 6<<28)
	binary.BigEndian.PutUint16(ip[4:], uint16(l4))
	ip[6], ip[7] = proto, 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	return ethLen + ipv6Len
}

// l4Checksum returns the transport checksum of seg (its checksum field
// zero) between src and dst (RFC 768, RFC 9293 §3.1, RFC 8200 §8.1).
func l4Checksum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	s := inetsum.Add(0, src.AsSlice())
	s = inetsum.Add(s, dst.AsSlice())
	s += uint64(proto) + uint64(len(seg))
	c := ^inetsum.Fold(inetsum.Add(s, seg))
	if c == 0 && proto == protoUDP {
		c = 0xFFFF
	}
	return c
}

// UDP records a UDP datagram from src to dst carrying payload, behind
// synthetic headers, on interface iface.
func (w *Writer) udp(iface int, src, dst netip.AddrPort, payload []byte) {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if sa.Is4() != da.Is4() {
		w.dropped.Add(1)
		return
	}
	hl := ethLen + ipHeaderLen(sa)
	n := hl + udpLen + len(payload)
	b := w.reserve(n)
	if b == nil {
		return
	}
	f := *b
	putEthIP(f, sa, da, protoUDP, udpLen+len(payload))
	u := f[hl:n]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen+len(payload)))
	binary.BigEndian.PutUint16(u[6:], 0)
	copy(u[udpLen:], payload)
	if sa.Is6() {
		binary.BigEndian.PutUint16(u[6:], l4Checksum(sa, da, protoUDP, u))
	}
	w.commit(iface, b, n)
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

// tcp records a TCP segment behind synthetic headers.
func (w *Writer) tcp(iface int, src, dst netip.AddrPort, seq, ack uint32, flags uint8, payload []byte) {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	hl := ethLen + ipHeaderLen(sa)
	n := hl + tcpLen + len(payload)
	b := w.reserve(n)
	if b == nil {
		return
	}
	f := *b
	putEthIP(f, sa, da, protoTCP, tcpLen+len(payload))
	t := f[hl:n]
	binary.BigEndian.PutUint16(t[0:], src.Port())
	binary.BigEndian.PutUint16(t[2:], dst.Port())
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], ack)
	t[12], t[13] = tcpLen/4<<4, flags
	binary.BigEndian.PutUint16(t[14:], 0xFFFF) // window
	binary.BigEndian.PutUint32(t[16:], 0)      // checksum, urgent pointer
	copy(t[tcpLen:], payload)
	binary.BigEndian.PutUint16(t[16:], l4Checksum(sa, da, protoTCP, t))
	w.commit(iface, b, n)
}
