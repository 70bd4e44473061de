package roce

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softrnic/softrnic/internal/fastcrc"
)

// The ICRC (IBTA Vol.1 §7.8.1, Annex A17.4) is CRC-32 (IEEE 802.3, as
// hash/crc32.ChecksumIEEE) over: 8 bytes of 0xFF standing for a masked LRH,
// the IP header with its variant fields set to all-ones (IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit), the UDP
// header with its checksum set to 0xFFFF, the BTH with byte 4 (FECN, BECN,
// Resv6a) set to 0xFF, and then the extended headers, payload and pad. The
// 32-bit value is sent least significant byte first.
//
// The functions here are incremental so a sender can cover headers and a
// payload that live in different buffers: start with ICRCStart*, feed the
// buffer that begins with the BTH to ICRCAddTransport, further bytes to
// ICRCAdd, then AppendICRC the result. None of them allocates.

// icrcLRH is the CRC (hash/crc32 convention) of the 8 0xFF bytes. rxe seeds
// crc32_le with its raw state, 0xDEBB20E3 = ^icrcLRH.
var icrcLRH = crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// addMasked runs the CRC over p with the bytes whose bit is set in mask
// (bit i = byte i, i < 64) replaced by 0xFF. It is a byte-at-a-time loop for
// short headers; it keeps p on the caller's stack.
func addMasked(crc uint32, p []byte, mask uint64) uint32 {
	t := crc32.IEEETable
	s := ^crc
	for i, c := range p {
		if i < 64 && mask&(1<<i) != 0 {
			c = 0xff
		}
		s = t[byte(s)^c] ^ s>>8
	}
	return ^s
}

const (
	maskIPv4 = 1<<1 | 1<<8 | 1<<10 | 1<<11 // TOS, TTL, checksum
	maskUDP  = 1<<6 | 1<<7                 // checksum
	maskBTH  = 1 << 4                      // FECN, BECN, Resv6a
)

// ICRCStart returns the CRC state after the masked LRH, IP header and UDP
// header, taken from real headers: ip is an IPv4 header (IHL×4 bytes,
// options included) or a 40-byte IPv6 header, udp the 8-byte UDP header.
func ICRCStart(ip, udp []byte) (uint32, error) {
	if len(udp) < 8 {
		return 0, ErrBadUDPHeader
	}
	if len(ip) < 1 {
		return 0, ErrBadIPHeader
	}
	crc := icrcLRH
	switch ip[0] >> 4 {
	case 4:
		hl := int(ip[0]&0x0F) * 4
		if hl < 20 || len(ip) < hl {
			return 0, ErrBadIPHeader
		}
		crc = addMasked(crc, ip[:hl], maskIPv4)
	case 6:
		if len(ip) < 40 {
			return 0, ErrBadIPHeader
		}
		// Byte 0 keeps the version nibble; its low nibble (traffic class) is masked.
		crc = addMasked(crc, []byte{ip[0] | 0x0F}, 0)
		crc = addMasked(crc, ip[1:40], 1<<0|1<<1|1<<2|1<<6)
	default:
		return 0, ErrBadIPHeader
	}
	return addMasked(crc, udp[:8], maskUDP), nil
}

// ICRCStartV4 is ICRCStart for the IPv4 header rxe sends (IHL 5, DF set
// when df, protocol UDP) with the given addresses and IP ID, and a UDP
// header with the given ports, for a transport packet whose BTH-through-pad
// part is ibLen bytes (the ICRC is added to the lengths).
func ICRCStartV4(src, dst [4]byte, id uint16, df bool, sport, dport uint16, ibLen int) uint32 {
	// The masked fields are written as 0xFF here, so the whole pseudo header goes
	// through fastcrc.IEEESmall's 8-bytes-a-step loop instead of addMasked's byte loop.
	var h [28]byte
	h[0] = 0x45
	h[1] = 0xff // TOS
	binary.BigEndian.PutUint16(h[2:], uint16(20+8+ibLen+ICRCLen))
	binary.BigEndian.PutUint16(h[4:], id)
	if df {
		h[6] = 0x40
	}
	h[8], h[9], h[10], h[11] = 0xff, 17, 0xff, 0xff // TTL, protocol, checksum
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	binary.BigEndian.PutUint16(h[20:], sport)
	binary.BigEndian.PutUint16(h[22:], dport)
	binary.BigEndian.PutUint16(h[24:], uint16(8+ibLen+ICRCLen))
	h[26], h[27] = 0xff, 0xff // UDP checksum
	return fastcrc.IEEESmall(icrcLRH, h[:])
}

// ICRCStartV6 is ICRCStartV4 for IPv6 (next header UDP, no extension headers).
func ICRCStartV6(src, dst [16]byte, sport, dport uint16, ibLen int) uint32 {
	var h [48]byte
	h[0], h[1], h[2], h[3] = 0x6F, 0xff, 0xff, 0xff // traffic class, flow label
	binary.BigEndian.PutUint16(h[4:], uint16(8+ibLen+ICRCLen))
	h[6], h[7] = 17, 0xff // next header, hop limit
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
	binary.BigEndian.PutUint16(h[40:], sport)
	binary.BigEndian.PutUint16(h[42:], dport)
	binary.BigEndian.PutUint16(h[44:], uint16(8+ibLen+ICRCLen))
	h[46], h[47] = 0xff, 0xff // UDP checksum
	return fastcrc.IEEESmall(icrcLRH, h[:])
}

// ICRCAddTransport adds ib, which starts with the BTH, masking BTH byte 4.
func ICRCAddTransport(crc uint32, ib []byte) uint32 {
	if len(ib) < BTHLen {
		return addMasked(crc, ib, maskBTH)
	}
	var bth [BTHLen]byte
	copy(bth[:], ib)
	bth[4] = 0xff
	return ICRCAdd(fastcrc.IEEESmall(crc, bth[:]), ib[BTHLen:])
}

// shortCRC is the length below which ICRCAdd runs fastcrc.IEEESmall: for extended
// headers and pads, the dispatch to a table loop costs more than the bytes (the
// carry-less multiplications need 64 bytes).
const shortCRC = 64

// ICRCAdd adds further unmasked bytes (payload, pad).
func ICRCAdd(crc uint32, p []byte) uint32 {
	if len(p) < shortCRC {
		return fastcrc.IEEESmall(crc, p)
	}
	return fastcrc.IEEE(crc, p)
}

// ICRC computes the ICRC of ib (BTH through pad, without the ICRC field)
// carried under the real IP and UDP headers ip and udp.
func ICRC(ip, udp, ib []byte) (uint32, error) {
	crc, err := ICRCStart(ip, udp)
	if err != nil {
		return 0, err
	}
	return ICRCAddTransport(crc, ib), nil
}

// ICRCv4 computes the ICRC of ib (BTH through pad) for the IPv4/UDP
// headers described as in ICRCStartV4.
func ICRCv4(src, dst [4]byte, id uint16, df bool, sport, dport uint16, ib []byte) uint32 {
	return ICRCAddTransport(ICRCStartV4(src, dst, id, df, sport, dport, len(ib)), ib)
}

// ICRCv6 computes the ICRC of ib (BTH through pad) for IPv6/UDP.
func ICRCv6(src, dst [16]byte, sport, dport uint16, ib []byte) uint32 {
	return ICRCAddTransport(ICRCStartV6(src, dst, sport, dport, len(ib)), ib)
}

// SplitIPPacket splits an IPv4 or IPv6 packet carrying UDP into its IP
// header, UDP header and UDP payload (bounded by the UDP length). It does
// not check the destination port or any checksum.
func SplitIPPacket(pkt []byte) (ip, udp, payload []byte, err error) {
	if len(pkt) < 1 {
		return nil, nil, nil, ErrBadIPHeader
	}
	var hl int
	switch pkt[0] >> 4 {
	case 4:
		hl = int(pkt[0]&0x0F) * 4
		if hl < 20 || len(pkt) < hl || pkt[9] != 17 {
			return nil, nil, nil, ErrBadIPHeader
		}
	case 6:
		hl = 40
		if len(pkt) < hl || pkt[6] != 17 {
			return nil, nil, nil, ErrBadIPHeader
		}
	default:
		return nil, nil, nil, ErrBadIPHeader
	}
	if len(pkt) < hl+8 {
		return nil, nil, nil, ErrBadUDPHeader
	}
	ulen := int(binary.BigEndian.Uint16(pkt[hl+4:]))
	if ulen < 8 || len(pkt) < hl+ulen {
		return nil, nil, nil, ErrBadUDPHeader
	}
	return pkt[:hl], pkt[hl : hl+8], pkt[hl+8 : hl+ulen], nil
}

// VerifyICRC checks the ICRC of a whole IP packet (IPv4 or IPv6 header, UDP
// header, BTH … ICRC). It returns ErrBadICRC on a mismatch.
func VerifyICRC(pkt []byte) error {
	ip, udp, ib, err := SplitIPPacket(pkt)
	if err != nil {
		return err
	}
	if len(ib) < BTHLen+ICRCLen {
		return ErrShort
	}
	n := len(ib) - ICRCLen
	crc, err := ICRC(ip, udp, ib[:n])
	if err != nil {
		return err
	}
	if crc != binary.LittleEndian.Uint32(ib[n:]) {
		return ErrBadICRC
	}
	return nil
}
