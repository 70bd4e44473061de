package rnic

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/internal/memcopy"
)

// nativeEndian is the byte order of registered memory as the CPU sees it: atomics read and
// write their 64-bit operands in it (RFC 7306 §5.3 and IBTA §9.4.5 operate on the
// responder's memory word, whatever the wire order).
var nativeEndian = binary.NativeEndian

// Segs is a scatter/gather list resolved to memory: the byte slices of a WQE's SGEs in
// order ([SendWQE.Segs], [RecvWQE.Segs]). Its methods address it as one contiguous message
// of Len bytes, which is how both transports place and gather payload (RFC 5041 §3: the
// message offset MO; IBTA §9.5: the message is the SGL's concatenation). None allocates.
type Segs [][]byte

// Len returns the total length of the list.
func (s Segs) Len() uint64 {
	var n uint64
	for _, b := range s {
		n += uint64(len(b))
	}
	return n
}

// Slices appends to dst[:0] the subslices of s that hold bytes [off, off+n) of the message
// and returns it: a vectored view for writev/readv with no copy. The caller checks that
// off+n ≤ s.Len(); bytes past the end are silently not included.
func (s Segs) Slices(dst [][]byte, off, n uint64) [][]byte {
	p := dst[:0]
	for _, b := range s {
		if n == 0 {
			break
		}
		l := uint64(len(b))
		if off >= l {
			off -= l
			continue
		}
		k := min(l-off, n)
		p = append(p, b[off:off+k])
		n -= k
		off = 0
	}
	return p
}

// ReadAt copies bytes [off, off+len(p)) of the message into p and returns how many it
// copied (fewer only past the end).
func (s Segs) ReadAt(p []byte, off uint64) int {
	done := 0
	for _, b := range s {
		if done == len(p) {
			break
		}
		l := uint64(len(b))
		if off >= l {
			off -= l
			continue
		}
		done += memcopy.Copy(p[done:], b[off:])
		off = 0
	}
	return done
}

// WriteAt copies p into bytes [off, off+len(p)) of the message and returns how many it
// copied (fewer only past the end).
func (s Segs) WriteAt(p []byte, off uint64) int {
	done := 0
	for _, b := range s {
		if done == len(p) {
			break
		}
		l := uint64(len(b))
		if off >= l {
			off -= l
			continue
		}
		done += memcopy.Copy(b[off:], p[done:])
		off = 0
	}
	return done
}
