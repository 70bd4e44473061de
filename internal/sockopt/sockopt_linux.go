// Package sockopt sets and gets socket options whose values are structures, which
// golang.org/x/sys/unix has no general call for (its GetsockoptString stops at the first
// zero byte): AF_XDP's UMEM registration, mmap offsets and statistics, SO_MEMINFO.
// Integer options go through unix.SetsockoptInt and GetsockoptInt.
package sockopt

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set is setsockopt(2) of the n bytes at p. Errors are the syscall.Errno.
func Set(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// Get is getsockopt(2) into the n bytes at p; it returns how many the kernel wrote.
// Errors are the syscall.Errno.
func Get(fd, level, opt int, p unsafe.Pointer, n uintptr) (uintptr, error) {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}
