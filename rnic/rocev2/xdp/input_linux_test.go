//go:build linux

package xdp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softrnic/softrnic/internal/inetsum"
	"github.com/softrnic/softrnic/roce"
)

var (
	tLocal = netip.MustParseAddrPort("10.199.7.1:4791")
	tPeer  = netip.MustParseAddrPort("10.199.7.2:50000")
)

func testLink() *Link { return &Link{local: tLocal, lip: tLocal.Addr().As4()} }

// frame builds an Ethernet/IPv4/UDP frame carrying a RoCE packet (BTH +
// payload) whose ICRC is computed over the real header with IP ID id.
func frame(id uint16, opts int, payload int) (f []byte, ib []byte) {
	ib = make([]byte, roce.BTHLen+payload)
	ib[0] = 0x04 // RC SEND Only
	binary.BigEndian.PutUint16(ib[2:], 0xFFFF)
	binary.BigEndian.PutUint32(ib[4:], 0x12)
	for i := roce.BTHLen; i < len(ib); i++ {
		ib[i] = byte(i * 13)
	}
	f = make([]byte, 14, 2048)
	binary.BigEndian.PutUint16(f[12:], etherIPv4)
	f = roce.AppendIPv4UDP(f, tPeer.Addr().As4(), tLocal.Addr().As4(), 0, 64, id, tPeer.Port(), tLocal.Port(), len(ib))
	ip := f[14:34]
	if opts > 0 { // insert NOP options, fix IHL, lengths and checksum
		ipo := append(append(append([]byte{}, ip...), make([]byte, opts)...), f[34:]...)
		for i := 20; i < 20+opts; i++ {
			ipo[i] = 1
		}
		ipo[0] = 0x40 | byte((20+opts)/4)
		binary.BigEndian.PutUint16(ipo[2:], uint16(binary.BigEndian.Uint16(ipo[2:])+uint16(opts)))
		f = append(f[:14], ipo...)
		ip = f[14 : 34+opts]
		binary.BigEndian.PutUint16(ip[10:], 0)
		var s uint32
		for i := 0; i < len(ip); i += 2 {
			s += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for s>>16 != 0 {
			s = s&0xFFFF + s>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
	}
	crc, err := roce.ICRC(ip, f[14+len(ip):14+len(ip)+8], ib)
	if err != nil {
		panic(err)
	}
	f = append(f, ib...)
	f = roce.AppendICRC(f, crc)
	return f, ib
}

func TestInputICRC(t *testing.T) {
	canon := func(ib []byte) uint32 {
		return roce.ICRCv4(tPeer.Addr().As4(), tLocal.Addr().As4(), 0, true, tPeer.Port(), tLocal.Port(), ib)
	}
	for _, tc := range []struct {
		name    string
		id      uint16
		opts    int
		corrupt bool
		ok      bool
		restamp bool
		zeroID  uint16 // ICRC computed with ID 0, header carries this ID
		strict  bool
	}{
		{"gso id", 0, 0, false, true, false, 3, false},
		{"gso id strict", 0, 0, false, false, false, 3, true},
		{"canonical", 0, 0, false, true, false, 0, false},
		{"canonical corrupt (left to the transport)", 0, 0, true, true, false, 0, false},
		{"ip id", 0x1234, 0, false, true, true, 0, false},
		{"ip id corrupt", 0x1234, 0, true, false, false, 0, false},
		{"options", 0, 8, false, true, true, 0, false},
		{"options corrupt", 7, 8, true, false, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLink()
			l.strict = tc.strict
			f, ib := frame(tc.id, tc.opts, 100)
			if tc.zeroID != 0 {
				binary.BigEndian.PutUint16(f[14+4:], tc.zeroID)
			}
			if tc.corrupt {
				f[len(f)-10] ^= 1
			}
			buf := make([]byte, 4096)
			var size int
			var from netip.AddrPort
			ok := l.input(f, buf, &size, &from)
			if ok != tc.ok {
				t.Fatalf("accepted %v, want %v (stats %+v)", ok, tc.ok, l.Stats())
			}
			if !ok {
				if l.icrcErrors.Load() != 1 {
					t.Fatalf("ICRC errors %d", l.icrcErrors.Load())
				}
				return
			}
			if from != tPeer || size != len(ib)+4 {
				t.Fatalf("from %v size %d", from, size)
			}
			got := binary.LittleEndian.Uint32(buf[len(ib):size])
			if !tc.corrupt && got != canon(ib) {
				t.Fatalf("ICRC %08x, want canonical %08x", got, canon(ib))
			}
			if (l.icrcRestamped.Load() == 1) != tc.restamp {
				t.Fatalf("restamped %d", l.icrcRestamped.Load())
			}
			if (l.icrcZeroID.Load() == 1) != (tc.zeroID != 0) {
				t.Fatalf("zero-ID ICRCs %d", l.icrcZeroID.Load())
			}
		})
	}
}

func TestInputRejects(t *testing.T) {
	good, _ := frame(0, 0, 64)
	mod := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	for name, f := range map[string][]byte{
		"arp":       mod(func(b []byte) { binary.BigEndian.PutUint16(b[12:], 0x0806) }),
		"other ip":  mod(func(b []byte) { b[14+19] = 9 }),
		"port":      mod(func(b []byte) { b[14+20+3] ^= 1 }),
		"fragment":  mod(func(b []byte) { b[14+6] |= 0x20 }),
		"frag off":  mod(func(b []byte) { b[14+7] = 1 }),
		"tcp":       mod(func(b []byte) { b[14+9] = 6 }),
		"udp len":   mod(func(b []byte) { binary.BigEndian.PutUint16(b[14+24:], 0xFFFF) }),
		"ihl small": mod(func(b []byte) { b[14] = 0x44 }),
	} {
		l := testLink()
		var size int
		var from netip.AddrPort
		if l.input(f, make([]byte, 4096), &size, &from) {
			t.Errorf("%s: accepted", name)
		}
	}
	// a receive buffer too small for the payload
	var size int
	var from netip.AddrPort
	if testLink().input(good, make([]byte, 10), &size, &from) {
		t.Error("oversize accepted")
	}
	// every prefix of a valid frame is rejected without panicking
	for i := range len(good) {
		if testLink().input(good[:i], make([]byte, 4096), &size, &from) {
			t.Errorf("prefix %d accepted", i)
		}
	}
}

func FuzzInput(f *testing.F) {
	g, _ := frame(0, 0, 64)
	f.Add(g)
	g, _ = frame(9, 4, 10)
	f.Add(g)
	f.Fuzz(func(t *testing.T, b []byte) {
		l := testLink()
		buf := make([]byte, 4096)
		var size int
		var from netip.AddrPort
		if l.input(b, buf, &size, &from) && size > len(b) {
			t.Fatalf("size %d from a %d-byte frame", size, len(b))
		}
	})
}

func TestInputIPv6(t *testing.T) {
	local := netip.MustParseAddrPort("[fd00:199:7::1]:4791")
	peer := netip.MustParseAddrPort("[fd00:199:7::2]:1234")
	l := &Link{local: local, lip6: local.Addr().As16(), v6: true}
	ib := make([]byte, roce.BTHLen+37)
	for i := range ib {
		ib[i] = byte(i*5 + 1)
	}
	f := make([]byte, 14, 512)
	binary.BigEndian.PutUint16(f[12:], etherIPv6)
	f = roce.AppendIPv6UDP(f, peer.Addr().As16(), local.Addr().As16(), 0, 64, 0, peer.Port(), local.Port(), len(ib))
	f = append(f, ib...)
	f = roce.AppendICRC(f, roce.ICRCv6(peer.Addr().As16(), local.Addr().As16(), peer.Port(), local.Port(), ib))
	udp6Checksum(f[14:])
	// RFC 768/8200: the one's-complement sum over pseudo header and
	// datagram, checksum included, is 0xFFFF.
	pseudo := inetsum.Add(uint64(len(f)-54)+17, f[14+8:14+40])
	if s := inetsum.Fold(inetsum.Add(pseudo, f[54:])); s != 0xFFFF || binary.BigEndian.Uint16(f[54+6:]) == 0 {
		t.Fatalf("UDP checksum: sum %#x", s)
	}
	buf := make([]byte, 4096)
	var size int
	var from netip.AddrPort
	if !l.input(f, buf, &size, &from) || from != peer || size != len(ib)+4 {
		t.Fatalf("IPv6 packet: size %d from %v", size, from)
	}
	// wrong destination, an IPv4 frame on an IPv6 link, every prefix
	g := append([]byte(nil), f...)
	g[14+39] ^= 1
	if l.input(g, buf, &size, &from) {
		t.Error("other destination accepted")
	}
	v4, _ := frame(0, 0, 10)
	if l.input(v4, buf, &size, &from) {
		t.Error("IPv4 frame accepted by an IPv6 link")
	}
	for i := range len(f) {
		if l.input(f[:i], buf, &size, &from) {
			t.Errorf("prefix %d accepted", i)
		}
	}
}
