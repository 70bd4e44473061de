//go:build !amd64 || purego

package fastcrc

const hasFold = false

func foldBlocks(uint32, []byte, *[5][2]uint64) (lo, hi uint64) {
	panic("fastcrc: no folding code")
}
