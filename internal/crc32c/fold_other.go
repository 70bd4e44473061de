//go:build !amd64 || purego

package crc32c

const hasFold = false

func foldBlocks(uint32, []byte) uint32 { panic("crc32c: no folding code") }
