package sockopt

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSetGet sets SO_RCVBUF with Set and reads it back with Get and with x/sys's
// GetsockoptInt; an unknown option reports the kernel's errno.
func TestSetGet(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	v := int32(64 << 10)
	if err := Set(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, unsafe.Pointer(&v), unsafe.Sizeof(v)); err != nil {
		t.Fatal(err)
	}
	var got [2]int32 // room for more than the kernel writes
	n, err := Get(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, unsafe.Pointer(&got), unsafe.Sizeof(got))
	if err != nil {
		t.Fatal(err)
	}
	want, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 || int(got[0]) != want || want != 2*int(v) {
		t.Fatalf("Get wrote %d bytes, %d; GetsockoptInt %d; set %d (Linux doubles it)", n, got[0], want, v)
	}
	if _, err := Get(fd, unix.SOL_SOCKET, 0x7fff, unsafe.Pointer(&got), unsafe.Sizeof(got)); !errors.Is(err, unix.ENOPROTOOPT) {
		t.Fatalf("unknown option: %v, want ENOPROTOOPT", err)
	}
}
