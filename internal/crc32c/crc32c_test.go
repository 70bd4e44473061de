package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestUpdate compares Update with hash/crc32 for lengths around the folding code's
// limits, every alignment of the start, and several initial CRCs; on a CPU without the
// folding code it says so (Update is then hash/crc32 itself).
func TestUpdate(t *testing.T) {
	if !hasFold {
		t.Log("crc32c: this CPU (or build) has no AVX-512 VPCLMULQDQ: the folding code is not run here; TestFoldReference checks its method")
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lens := []int{0, 1, 255, 256, 1023, 1024, 1025, 1279, 1280, 1500, 4096, 4100, 65536, 65536 + 255, 69000}
	for range 50 {
		lens = append(lens, r.IntN(len(buf)-64))
	}
	for _, n := range lens {
		for _, off := range []int{0, 1, 3, 8, 17, 63} {
			p := buf[off : off+n]
			for _, c := range []uint32{0, 0xffffffff, r.Uint32()} {
				want := crc32.Update(c, table, p)
				if got := Update(c, p); got != want {
					t.Fatalf("len %d offset %d crc %#x: %#08x, hash/crc32 %#08x", n, off, c, got, want)
				}
			}
		}
	}
}

// TestFoldBlocks runs the assembly on every multiple of 256 bytes up to 8 KiB against
// the Go model of it.
func TestFoldBlocks(t *testing.T) {
	if !hasFold {
		t.Skip("crc32c: no AVX-512 VPCLMULQDQ on this CPU: the folding code cannot run (TestFoldReference checks its method)")
	}
	r := rand.New(rand.NewPCG(5, 6))
	p := make([]byte, 8192)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	for n := 256; n <= len(p); n += 256 {
		c := r.Uint32()
		if got, want := foldBlocks(c, p[:n]), foldRef(c, p[:n]); got != want {
			t.Fatalf("len %d: assembly %#08x, model %#08x", n, got, want)
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 1024))
	f.Add(uint32(0x12345678), make([]byte, 3000))
	f.Fuzz(func(t *testing.T, c uint32, p []byte) {
		if got, want := Update(c, p), crc32.Update(c, table, p); got != want {
			t.Fatalf("len %d: %#08x, hash/crc32 %#08x", len(p), got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{256, 512, 1024, 4096, 65536} {
		p := make([]byte, n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				Update(0, p)
			}
		})
		b.Run(sizeName(n)+"/hash-crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				crc32.Update(0, table, p)
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return itoa(n/1024) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
