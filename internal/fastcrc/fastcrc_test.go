package fastcrc

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

var funcs = []struct {
	name  string
	f     func(uint32, []byte) uint32
	table *crc32.Table
}{{"Castagnoli", Castagnoli, crc32.MakeTable(crc32.Castagnoli)}, {"IEEE", IEEE, crc32.IEEETable}}

// TestUpdate compares Castagnoli and IEEE with hash/crc32 for lengths around the folding
// code's limits, every alignment class of the start, and several initial CRCs; on a CPU
// without the folding code it says so (they are then hash/crc32 itself).
func TestUpdate(t *testing.T) {
	if !hasFold {
		t.Log("fastcrc: this CPU (or build) has no AVX-512 VPCLMULQDQ: the folding code is not run here; TestFoldReference checks its method")
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := randBytes(r, 70000)
	lens := []int{0, 1, 15, 16, 255, 256, 257, 511, 512, 1023, 1024, 1025, 1279, 1280, 1500, 4096, 4100, 65536, 65536 + 255, 69000}
	for range 50 {
		lens = append(lens, r.IntN(len(buf)-64))
	}
	for _, fn := range funcs {
		for _, n := range lens {
			for _, off := range []int{0, 1, 3, 8, 17, 63} {
				p := buf[off : off+n]
				for _, c := range []uint32{0, 0xffffffff, r.Uint32()} {
					want := crc32.Update(c, fn.table, p)
					if got := fn.f(c, p); got != want {
						t.Fatalf("%s len %d offset %d crc %#x: %#08x, hash/crc32 %#08x", fn.name, n, off, c, got, want)
					}
				}
			}
		}
	}
}

// TestFoldBlocks runs the assembly on every multiple of 256 bytes up to 8 KiB against
// the Go model of it, for both polynomials.
func TestFoldBlocks(t *testing.T) {
	if !hasFold {
		t.Skip("fastcrc: no AVX-512 VPCLMULQDQ on this CPU: the folding code cannot run (TestFoldReference checks its method)")
	}
	r := rand.New(rand.NewPCG(5, 6))
	p := randBytes(r, 8192)
	for _, pq := range polys {
		for n := 256; n <= len(p); n += 256 {
			c := r.Uint32()
			lo, hi := foldBlocks(c, p[:n], &pq.q.k)
			wlo, whi := foldRef(c, p[:n], &pq.q.k)
			if lo != wlo || hi != whi {
				t.Fatalf("%s len %d: assembly %#016x %#016x, model %#016x %#016x", pq.name, n, hi, lo, whi, wlo)
			}
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 1024))
	f.Add(uint32(0x12345678), make([]byte, 3000))
	f.Fuzz(func(t *testing.T, c uint32, p []byte) {
		for _, fn := range funcs {
			if got, want := fn.f(c, p), crc32.Update(c, fn.table, p); got != want {
				t.Fatalf("%s len %d: %#08x, hash/crc32 %#08x", fn.name, len(p), got, want)
			}
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, fn := range funcs {
		for _, n := range []int{256, 512, 1024, 2048, 4096, 65536} {
			p := make([]byte, n)
			b.Run(fn.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					fn.f(0, p)
				}
			})
			b.Run(fn.name+"/"+strconv.Itoa(n)+"/hash-crc32", func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					crc32.Update(0, fn.table, p)
				}
			})
		}
	}
}

// BenchmarkTail measures the tail after the folded blocks both ways, for the choice
// slicedTail makes: buffers of 4,096 bytes and a tail (a RETH's 16 bytes after a 4 KiB
// payload, and 48), the tail through hash/crc32 or sliced by 8 (small), beside Update.
func BenchmarkTail(b *testing.B) {
	for _, fn := range funcs {
		q := castagnoli
		if fn.name == "IEEE" {
			q = ieee
		}
		for _, n := range []int{4096 + 16, 4096 + 48} {
			p := make([]byte, n)
			for _, v := range []struct {
				name string
				f    func() uint32
			}{
				{"Update", func() uint32 { return fn.f(0, p) }},
				{"tail-hash-crc32", func() uint32 { return crc32.Update(fn.f(0, p[:4096]), fn.table, p[4096:]) }},
				{"tail-sliced", func() uint32 { return q.small(fn.f(0, p[:4096]), p[4096:]) }},
			} {
				b.Run(fn.name+"/"+strconv.Itoa(n)+"/"+v.name, func(b *testing.B) {
					b.SetBytes(int64(n))
					for range b.N {
						v.f()
					}
				})
			}
		}
	}
}
