//go:build linux

package afxdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of the four AF_XDP rings mapped from the socket
// (Documentation/networking/af_xdp.rst): a power-of-two array of entries
// with a producer and a consumer index that only ever grow (modulo 2^32).
// One side produces, the other consumes; each keeps a private copy of its
// own index and publishes it with an atomic store, and reads the other's
// with an atomic load.
type ring struct {
	mem   []byte
	prod  *uint32
	cons  *uint32
	base  unsafe.Pointer // first entry
	mask  uint32
	local uint32 // our index: producer or consumer, depending on the ring
}

func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, n int, entSize uintptr) (ring, error) {
	size := int(off.Desc) + n*int(entSize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, err
	}
	p := unsafe.Pointer(&mem[0])
	return ring{
		mem:  mem,
		prod: (*uint32)(unsafe.Add(p, off.Producer)),
		cons: (*uint32)(unsafe.Add(p, off.Consumer)),
		base: unsafe.Add(p, off.Desc),
		mask: uint32(n - 1),
	}, nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// addr returns entry i of a fill or completion ring (a UMEM address).
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.base, uintptr(i&r.mask)*8))
}

// desc returns entry i of an RX or TX ring.
func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.base, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// free is the number of entries a producer may still write.
func (r *ring) free() uint32 { return r.mask + 1 - (r.local - atomic.LoadUint32(r.cons)) }

// publish makes the produced entries up to r.local visible to the kernel.
func (r *ring) publish() { atomic.StoreUint32(r.prod, r.local) }

// ready is the number of entries a consumer may read.
func (r *ring) ready() uint32 { return atomic.LoadUint32(r.prod) - r.local }

// release returns the consumed entries up to r.local to the kernel.
func (r *ring) release() { atomic.StoreUint32(r.cons, r.local) }
