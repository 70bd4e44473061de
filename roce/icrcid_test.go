package roce

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"
)

func TestCRCMulModBasics(t *testing.T) {
	const x = crcOne >> 1
	if got := crcMulMod(x, crcXInv); got != crcOne {
		t.Fatalf("x·x^-1 = %#08x, want 1", got)
	}
	// Appending n zero bytes to a message multiplies its raw CRC register by
	// x^(8n): check crcXPow against hash/crc32 on the difference of two messages.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 3, 17, 1000, 4200} {
		a := make([]byte, 8+n)
		b := make([]byte, 8+n)
		for i := range 8 {
			a[i] = byte(rng.Uint32())
			b[i] = byte(rng.Uint32())
		}
		d0 := crc32.ChecksumIEEE(a[:8]) ^ crc32.ChecksumIEEE(b[:8])
		dn := crc32.ChecksumIEEE(a) ^ crc32.ChecksumIEEE(b)
		if got := crcMulMod(d0, crcXPow(x, uint(8*n))); got != dn {
			t.Errorf("n=%d: shifted difference %#08x, want %#08x", n, got, dn)
		}
	}
	if got := crcMulMod(crcXPow(crcXInv, 12345), crcXPow(x, 12345)); got != crcOne {
		t.Fatalf("x^-k·x^k = %#08x", got)
	}
}

// crcMulTable multiplies as crcMulMod does.
func TestCRCMulTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := rng.Uint32()
		tab := newCRCMulTable(b)
		for _, a := range []uint32{0, 1, crcOne, 0xffffffff, rng.Uint32(), rng.Uint32()} {
			if got, want := tab.mul(a), crcMulMod(a, b); got != want {
				t.Fatalf("%#08x·%#08x = %#08x, want %#08x", a, b, got, want)
			}
		}
	}
}

// icrcDiffs returns the columns of M for a packet: the ICRC change caused by
// each single ID bit, computed by brute force with ICRCv4.
func icrcDiffs(src, dst [4]byte, sp, dp uint16, ib []byte) (c0 uint32, m [16]uint32) {
	c0 = ICRCv4(src, dst, 0, true, sp, dp, ib)
	for i := range 16 {
		m[i] = c0 ^ ICRCv4(src, dst, 1<<i, true, sp, dp, ib)
	}
	return c0, m
}

// gf2Rank is the rank of the 32-bit vectors v over GF(2).
func gf2Rank(v []uint32) int {
	v = append([]uint32(nil), v...)
	r := 0
	for bit := 31; bit >= 0; bit-- {
		p := -1
		for i := r; i < len(v); i++ {
			if v[i]>>bit&1 != 0 {
				p = i
				break
			}
		}
		if p < 0 {
			continue
		}
		v[r], v[p] = v[p], v[r]
		for i := range v {
			if i != r && v[i]>>bit&1 != 0 {
				v[i] ^= v[r]
			}
		}
		r++
	}
	return r
}

func TestSolveICRCIPv4IDRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src, dst := [4]byte{192, 168, 78, 2}, [4]byte{192, 168, 78, 1}
	lengths := []int{12, 16, 28, 44, 300, 1036, 4108, 4124, icrcIDCacheLen + 4} // last: beyond the cache
	for _, n := range lengths {
		ib := make([]byte, n)
		for i := range ib {
			ib[i] = byte(rng.Uint32())
		}
		_, m := icrcDiffs(src, dst, 49152, UDPPort, ib)
		if r := gf2Rank(m[:]); r != 16 {
			t.Errorf("len %d: rank of M = %d, want 16", n, r)
		}
		for range 200 {
			id := uint16(rng.Uint32())
			if n%3 == 0 {
				id = 1 << (rng.Uint32() % 16)
			}
			got := ICRCv4(src, dst, id, true, 49152, UDPPort, ib)
			c0 := ICRCv4(src, dst, 0, true, 49152, UDPPort, ib)
			sid, ok := SolveICRCIPv4ID(c0, got, n)
			if !ok || sid != id {
				t.Fatalf("len %d: id %#04x solved as %#04x ok=%v", n, id, sid, ok)
			}
		}
	}
	if id, ok := SolveICRCIPv4ID(1, 1, -1); !ok || id != 0 {
		t.Error("equal ICRCs must give ID 0")
	}
	if _, ok := SolveICRCIPv4ID(1, 2, -1); ok {
		t.Error("negative length accepted")
	}
}

// TestSolveICRCIPv4IDCapture solves rxe's captured packets (non-zero IP IDs)
// and checks the recovered ID against the IP header.
func TestSolveICRCIPv4IDCapture(t *testing.T) {
	pkts := readRoCE(t, "roce_pingpong.pcap")
	nonzero := 0
	for i := range pkts {
		c := &pkts[i]
		p, err := ParsePacket(c.body)
		if err != nil {
			t.Fatal(err)
		}
		ibLen := len(p.Covered())
		c0 := ICRCv4(c.src, c.dst, 0, c.df, c.sp, c.dp, p.Covered())
		id, ok := SolveICRCIPv4ID(c0, p.ICRCValue(), ibLen)
		if !ok || id != c.id {
			t.Errorf("packet %d: solved ID %#04x ok=%v, IP header has %#04x", i, id, ok, c.id)
		}
		if c.id != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("the capture has no non-zero IP IDs: nothing was solved")
	}
	t.Logf("%d packets, %d with non-zero IP IDs, all IDs recovered", len(pkts), nonzero)
}

// rxCheck is what a UDP-socket receiver can do with a wire IPv4 packet
// (IPv4 header, UDP, BTH … ICRC): rebuild the ICRC with ID 0 from the header
// it sees and solve for the ID.
func rxCheck(l3 []byte) (uint16, bool) {
	ip := make([]byte, 20)
	copy(ip, l3[:20])
	ip[4], ip[5] = 0, 0
	ib := l3[28 : len(l3)-ICRCLen]
	c0, err := ICRC(ip, l3[20:28], ib)
	if err != nil {
		return 0, false
	}
	return SolveICRCIPv4ID(c0, binary.LittleEndian.Uint32(l3[len(l3)-ICRCLen:]), len(ib))
}

// TestSolveICRCIPv4IDSingleFlips flips every covered bit of the captured
// packets except the IP ID and the masked fields (IPv4 TOS, TTL, checksum;
// UDP checksum; BTH byte 4), ICRC included, and counts the flips that still
// solve. A flip is undetectable only if its CRC difference lies in the span
// of M.
func TestSolveICRCIPv4IDSingleFlips(t *testing.T) {
	pkts := readRoCE(t, "roce_pingpong.pcap")
	masked := map[int]bool{1: true, 4: true, 5: true, 8: true, 10: true, 11: true, 26: true, 27: true, 28 + 4: true}
	flips, missed := 0, 0
	for i := range pkts {
		l3 := append([]byte(nil), pkts[i].l3...)
		if len(l3) < 20+8+BTHLen+ICRCLen || l3[0] != 0x45 {
			continue
		}
		if _, ok := rxCheck(l3); !ok {
			t.Fatalf("packet %d does not verify unflipped", i)
		}
		for off := range l3 {
			if masked[off] {
				continue
			}
			for bit := range 8 {
				l3[off] ^= 1 << bit
				if id, ok := rxCheck(l3); ok {
					missed++
					t.Errorf("packet %d: flip of byte %d bit %d undetected (solves as ID %#04x)", i, off, bit, id)
				}
				l3[off] ^= 1 << bit
				flips++
			}
		}
	}
	t.Logf("%d single-bit flips in %d packets, %d undetected", flips, len(pkts), missed)
	if flips == 0 {
		t.Fatal("no packets flipped")
	}
}

// TestSolveICRCIPv4IDRandomCorruption corrupts random bytes of BTH … ICRC
// and checks the false-accept rate is about 2^-16.
func TestSolveICRCIPv4IDRandomCorruption(t *testing.T) {
	trials := 1 << 21
	if testing.Short() {
		trials = 1 << 18
	}
	rng := rand.New(rand.NewPCG(5, 6))
	src, dst := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
	ib := make([]byte, 12+64+ICRCLen)
	for i := range ib {
		ib[i] = byte(rng.Uint32())
	}
	n := len(ib) - ICRCLen
	id := uint16(0x1234)
	binary.LittleEndian.PutUint32(ib[n:], ICRCv4(src, dst, id, true, 49152, UDPPort, ib[:n]))
	start := ICRCStartV4(src, dst, 0, true, 49152, UDPPort, n)
	accepted := 0
	bad := append([]byte(nil), ib...)
	for range trials {
		copy(bad, ib)
		for k := 1 + rng.IntN(4); k > 0; k-- {
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		}
		c0 := ICRCAddTransport(start, bad[:n])
		if got, ok := SolveICRCIPv4ID(c0, binary.LittleEndian.Uint32(bad[n:]), n); ok {
			if got == id && string(bad[:4]) == string(ib[:4]) && string(bad[5:]) == string(ib[5:]) {
				continue // only BTH byte 4 (masked) changed: not a corruption
			}
			accepted++
		}
	}
	want := float64(trials) / 65536
	t.Logf("%d corruptions, %d accepted (expected %.1f at 2^-16)", trials, accepted, want)
	// Poisson bounds far out in the tails (about 5 sigma).
	if lo, hi := want-5*math.Sqrt(want)-1, want+5*math.Sqrt(want)+1; float64(accepted) < lo || float64(accepted) > hi {
		t.Fatalf("accepted %d, outside [%.1f, %.1f]", accepted, lo, hi)
	}
}

var sinkID uint16

// BenchmarkSolveICRCIPv4ID measures the solver alone on a 4 KiB write
// (the ICRC with ID 0 is already computed by the normal check).
func BenchmarkSolveICRCIPv4ID(b *testing.B) {
	pkt := benchPacket()
	p, _ := ParsePacket(pkt)
	c0 := ICRCv4([4]byte{192, 168, 78, 2}, [4]byte{192, 168, 78, 1}, 0, true, 49577, UDPPort, p.Covered())
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		id, ok := SolveICRCIPv4ID(c0, p.ICRCValue(), len(p.Covered()))
		if !ok {
			b.Fatal("not solved")
		}
		sinkID = id
	}
}

// BenchmarkVerifyICRCIPv4IDSolved is the whole receive check of a packet
// with a non-zero IP ID: ICRC with ID 0 over 4 KiB, then the solver.
func BenchmarkVerifyICRCIPv4IDSolved(b *testing.B) {
	pkt := benchPacket()
	p, _ := ParsePacket(pkt)
	src, dst := [4]byte{192, 168, 78, 2}, [4]byte{192, 168, 78, 1}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		n := len(p.Covered())
		c0 := ICRCAddTransport(ICRCStartV4(src, dst, 0, true, 49577, UDPPort, n), p.Covered())
		id, ok := SolveICRCIPv4ID(c0, p.ICRCValue(), n)
		if !ok {
			b.Fatal("not solved")
		}
		sinkID = id
	}
}

// TestSolveICRCIPv4IDFlipDistances proves, for every packet length the
// cache covers (jumbo frames included), that no single-bit error is
// mistaken for an ID change: a flip j bits after the ID field (ICRC bits
// included, j ≤ 8·(22+ibLen)+32) is undetected iff x^-j mod P has degree
// < 16, and a flip in IPv4 header bytes 0-3 (x^j relative to the ID's last bit, 16 ≤ j < 48)
// iff x^j mod P does.
func TestSolveICRCIPv4IDFlipDistances(t *testing.T) {
	maxJ := 8*(22+icrcIDCacheLen) + 32
	v := uint32(crcOne)
	for j := 1; j <= maxJ; j++ {
		v = crcMulMod(v, crcXInv)
		if v&0xFFFF == 0 {
			t.Fatalf("a flip %d bits after the IP ID is undetectable (x^-j = %#08x)", j, v)
		}
	}
	v = crcOne
	for j := 1; j <= 48; j++ {
		v = crcMulMod(v, crcOne>>1)
		if j >= 16 && v&0xFFFF == 0 {
			t.Fatalf("a flip %d bits before the IP ID is undetectable", j)
		}
	}
}

var sinkU32 uint32

// BenchmarkICRCIDShiftUncached is the one-time cost of a new packet length
// (or the per-packet cost beyond icrcIDCacheLen).
func BenchmarkICRCIDShiftUncached(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkU32 = crcXPow(crcXInv, uint(32+8*(22+4124)))
	}
}

// FuzzSolveICRCIPv4ID: for any transport bytes, addresses, ports and ID,
// the solver recovers the ID from the ICRC computed with it; a flip of one
// bit of the transport bytes is never accepted (see
// TestSolveICRCIPv4IDFlipDistances); arbitrary inputs do not panic.
func FuzzSolveICRCIPv4ID(f *testing.F) {
	f.Add([]byte("0123456789ab"), uint32(0x0a000001), uint32(0x0a000002), uint16(49152), uint16(0x1234), uint32(0), uint32(0))
	f.Add(make([]byte, 1100), uint32(0xc0a84e02), uint32(0xc0a84e01), uint16(4791), uint16(0), uint32(77), uint32(5))
	f.Fuzz(func(t *testing.T, ib []byte, src, dst uint32, sport, id uint16, flip, junk uint32) {
		_, _ = SolveICRCIPv4ID(junk, flip, int(int32(junk)))
		if len(ib) > 2*icrcIDCacheLen {
			return
		}
		var s, d [4]byte
		binary.BigEndian.PutUint32(s[:], src)
		binary.BigEndian.PutUint32(d[:], dst)
		got := ICRCv4(s, d, id, true, sport, UDPPort, ib)
		c0 := ICRCv4(s, d, 0, true, sport, UDPPort, ib)
		if sid, ok := SolveICRCIPv4ID(c0, got, len(ib)); !ok || sid != id {
			t.Fatalf("id %#04x solved as %#04x ok=%v", id, sid, ok)
		}
		if len(ib) == 0 {
			return
		}
		bit := int(flip % uint32(8*len(ib)))
		if len(ib) >= 5 && bit/8 == 4 {
			return // BTH byte 4 is masked
		}
		bad := append([]byte(nil), ib...)
		bad[bit/8] ^= 1 << (bit % 8)
		if _, ok := SolveICRCIPv4ID(ICRCv4(s, d, 0, true, sport, UDPPort, bad), got, len(ib)); ok {
			t.Fatalf("flip of bit %d accepted", bit)
		}
	})
}

// ICRCIPv4IDDelta turns the ICRC computed with ID 0 into the one computed with the ID,
// for every length class and random IDs, and SolveICRCIPv4ID undoes it.
func TestICRCIPv4IDDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{12, 28, 60, 1036, 4108, icrcIDCacheLen + 4} {
		ib := make([]byte, n)
		for i := range ib {
			ib[i] = byte(rng.Uint32())
		}
		src, dst := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
		c0 := ICRCv4(src, dst, 0, true, 4791, 4791, ib)
		for _, id := range []uint16{0, 1, 2, 3, 63, 0x8000, 0xffff, uint16(rng.Uint32())} {
			want := ICRCv4(src, dst, id, true, 4791, 4791, ib)
			if got := c0 ^ ICRCIPv4IDDelta(id, n); got != want {
				t.Fatalf("ibLen %d id %d: %#x, want %#x", n, id, got, want)
			}
			if s, ok := SolveICRCIPv4ID(c0, want, n); !ok || s != id {
				t.Fatalf("ibLen %d id %d: solved %d %v", n, id, s, ok)
			}
		}
	}
}
