package roce

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestICRCJoin checks ICRCJoin(crc, ICRCPart(p), len(p)) against ICRCAdd(crc, p) for the
// table lengths and others, at many starting states and contents: a sender that joins
// a payload CRC computed apart puts the same ICRC on the wire as one that runs over it.
func TestICRCJoin(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lens := []int{0, 1, 2, 3, 7, 8, 64, 255, 256, 257, 511, 512, 1024, 1500, 2048, 4095, 4096, 4097, 8192, 8999}
	for _, n := range lens {
		for k := range 20 {
			off := r.IntN(len(buf) - n + 1)
			p := buf[off : off+n]
			crc := r.Uint32()
			if k == 0 {
				crc = 0
			}
			if got, want := ICRCJoin(crc, ICRCPart(p), n), ICRCAdd(crc, p); got != want {
				t.Fatalf("len %d off %d crc %08x: join %08x, direct %08x", n, off, crc, got, want)
			}
		}
	}
	// A whole packet: pseudo headers and transport headers, then the payload joined,
	// then the pad, equals ICRCv4 over the packet in one buffer.
	src, dst := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
	for _, n := range []int{256, 1021, 4096} {
		ib := make([]byte, 28+n)
		copy(ib, buf[:28])
		copy(ib[28:], buf[100:100+n])
		ib = AppendPad(ib, n)
		want := ICRCv4(src, dst, 0, true, 0xC001, UDPPort, ib)
		crc := ICRCAddTransport(ICRCStartV4(src, dst, 0, true, 0xC001, UDPPort, len(ib)), ib[:28])
		crc = ICRCJoin(crc, ICRCPart(ib[28:28+n]), n)
		if got := ICRCAdd(crc, ib[28+n:]); got != want {
			t.Fatalf("packet with %d payload bytes: joined %08x, ICRCv4 %08x", n, got, want)
		}
	}
	if ICRCPart(buf[:77]) != crc32.ChecksumIEEE(buf[:77]) {
		t.Fatal("ICRCPart is not crc32.ChecksumIEEE")
	}
}

func TestICRCJoinAllocs(t *testing.T) {
	p := make([]byte, 4096)
	ICRCJoin(1, ICRCPart(p), len(p))
	if n := testing.AllocsPerRun(100, func() { ICRCJoin(1, ICRCPart(p), len(p)) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func BenchmarkICRCJoin4096(b *testing.B) {
	crc := uint32(0x12345678)
	for range b.N {
		crc = ICRCJoin(crc, 0xdeadbeef, 4096)
	}
	sinkCRC = crc
}
