package roce

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The vectors of rocev2-wire-facts.md §6 (scapy roce.uts, recomputed with zlib).
var icrcVectors = []struct {
	name string
	pkt  string // IP header through pad (without ICRC)
	icrc string // wire bytes
}{
	{"cx4-cnp", "45c2003c718c400040119161 0a001101 0a001201 000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000", "82fd002a"},
	{"uc-send-only", "45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17104630818be28935d90e9a95505401be885e500000", "78f353f3"},
}

func TestICRCVectors(t *testing.T) {
	for _, v := range icrcVectors {
		t.Run(v.name, func(t *testing.T) {
			pkt := append(unhex(t, v.pkt), unhex(t, v.icrc)...)
			if err := VerifyICRC(pkt); err != nil {
				t.Fatalf("VerifyICRC: %v", err)
			}
			ip, udp, ib, err := SplitIPPacket(pkt)
			if err != nil {
				t.Fatal(err)
			}
			ibody := ib[:len(ib)-4]
			crc, err := ICRC(ip, udp, ibody)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(AppendICRC(nil, crc)); got != v.icrc {
				t.Errorf("ICRC wire bytes %s, want %s", got, v.icrc)
			}
			// The synthesized-header form must agree for these plain IPv4 headers.
			var src, dst [4]byte
			copy(src[:], ip[12:16])
			copy(dst[:], ip[16:20])
			c4 := ICRCv4(src, dst, binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0,
				binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:]), ibody)
			if c4 != crc {
				t.Errorf("ICRCv4 = %08x, ICRC = %08x", c4, crc)
			}
			// Variant fields do not matter: change TOS, TTL, IP checksum, UDP checksum, FECN/BECN.
			mut := append([]byte(nil), pkt...)
			mut[1] ^= 0x5a
			mut[8] ^= 0x33
			mut[10] ^= 0x12
			mut[11] ^= 0x34
			mut[20+6] ^= 0x77
			mut[28+4] ^= 0xC0
			if err := VerifyICRC(mut); err != nil {
				t.Errorf("variant-field change broke the ICRC: %v", err)
			}
			// Invariant fields do: every other byte flip must be caught.
			variant := map[int]bool{1: true, 8: true, 10: true, 11: true, 26: true, 27: true, 32: true}
			for i := 0; i < len(pkt)-4; i++ {
				if variant[i] || i == 2 || i == 3 || i == 24 || i == 25 {
					continue // lengths change the split, tested elsewhere
				}
				mut := append([]byte(nil), pkt...)
				mut[i] ^= 0x01
				if i == 0 || i == 9 {
					continue // version/protocol make it not RoCE
				}
				if err := VerifyICRC(mut); !errors.Is(err, ErrBadICRC) {
					t.Errorf("flip of byte %d: err %v, want ErrBadICRC", i, err)
				}
			}
		})
	}
}

func TestICRCSeed(t *testing.T) {
	// rxe seeds crc32_le with 0xDEBB20E3, the raw state after 8×0xFF.
	if ^icrcLRH != 0xDEBB20E3 {
		t.Fatalf("LRH state %08x, want ^0xDEBB20E3", icrcLRH)
	}
}

func TestICRCIncrementalMatchesOneShot(t *testing.T) {
	pkt := append(unhex(t, icrcVectors[1].pkt), unhex(t, icrcVectors[1].icrc)...)
	ip, udp, ib, _ := SplitIPPacket(pkt)
	body := ib[:len(ib)-4]
	want, _ := ICRC(ip, udp, body)
	for cut := 0; cut <= len(body); cut++ {
		if cut < BTHLen {
			continue
		}
		c, _ := ICRCStart(ip, udp)
		c = ICRCAddTransport(c, body[:cut])
		c = ICRCAdd(c, body[cut:])
		if c != want {
			t.Fatalf("cut %d: %08x want %08x", cut, c, want)
		}
	}
}

// A reference ICRC built the slow, obvious way: copy, mask, crc32.ChecksumIEEE.
func refICRC(ip, udp, ib []byte) uint32 {
	var buf []byte
	buf = append(buf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	h := append([]byte(nil), ip...)
	if h[0]>>4 == 4 {
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
	} else {
		h[0] |= 0x0f
		h[1], h[2], h[3], h[7] = 0xff, 0xff, 0xff, 0xff
	}
	buf = append(buf, h...)
	u := append([]byte(nil), udp...)
	u[6], u[7] = 0xff, 0xff
	buf = append(buf, u...)
	b := append([]byte(nil), ib...)
	b[4] = 0xff
	buf = append(buf, b...)
	return crc32.ChecksumIEEE(buf)
}

func TestICRCv6(t *testing.T) {
	var src, dst [16]byte
	for i := range src {
		src[i], dst[i] = byte(i+1), byte(0xf0-i)
	}
	body := unhex(t, "0400ffff00000011 80949ef3 0102030405060708")
	ip := make([]byte, 40)
	ip[0], ip[1], ip[2], ip[3] = 0x6a, 0xbc, 0xde, 0xf1 // TC and flow label set: masked
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(body)+4))
	ip[6], ip[7] = 17, 3
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	udp := []byte{0xc1, 0x23, 0x12, 0xb7, 0, 0, 0xab, 0xcd}
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(body)+4))
	want := refICRC(ip, udp, body)
	got, err := ICRC(ip, udp, body)
	if err != nil || got != want {
		t.Fatalf("ICRC = %08x, %v; want %08x", got, err, want)
	}
	if g := ICRCv6(src, dst, 0xc123, UDPPort, body); g != want {
		t.Fatalf("ICRCv6 = %08x want %08x", g, want)
	}
	pkt := AppendICRC(append(append(append([]byte(nil), ip...), udp...), body...), want)
	if err := VerifyICRC(pkt); err != nil {
		t.Fatal(err)
	}
	pkt[len(pkt)-1] ^= 1
	if err := VerifyICRC(pkt); !errors.Is(err, ErrBadICRC) {
		t.Fatalf("corrupted: %v", err)
	}
}

func TestICRCBadHeaders(t *testing.T) {
	udp := make([]byte, 8)
	for _, ip := range [][]byte{nil, {0x45}, {0x44, 0, 0, 0}, make([]byte, 39), {0x55}} {
		if _, err := ICRC(ip, udp, nil); err == nil {
			t.Errorf("ICRC(% x) accepted", ip)
		}
	}
	if _, err := ICRC(make([]byte, 20), udp[:7], nil); err == nil {
		t.Error("short UDP accepted")
	}
}

// ICRCAdd is crc32.Update over the IEEE table for every short length (the small path and
// the first lengths past it) and several start values.
func TestICRCAddLengths(t *testing.T) {
	b := make([]byte, 80)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	for n := range len(b) {
		for _, crc := range []uint32{0, 0xDEBB20E3, 0x12345678} {
			if got, want := ICRCAdd(crc, b[:n]), crc32.Update(crc, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("len %d crc %#x: %#x, want %#x", n, crc, got, want)
			}
		}
	}
}
