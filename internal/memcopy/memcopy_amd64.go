package memcopy

import "unsafe"

// Copy copies src into dst like the builtin copy, overlapping slices included, and
// returns the number of bytes copied: min(len(dst), len(src)).
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < repMinLen {
		return copy(dst, src)
	}
	d, s := uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(unsafe.Pointer(unsafe.SliceData(src)))
	if d&15 != 0 || s&7 == 0 || s < d+uintptr(n) && d < s+uintptr(n) {
		return copy(dst, src) // not the slow case, or overlapping: one copy keeps memmove's order
	}
	copy(dst[:8], src[:8])
	return 8 + copy(dst[8:n], src[8:n])
}
