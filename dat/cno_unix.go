//go:build unix

package dat

import (
	"os"
	"syscall"
)

// notifyFD makes the CNO file readable without ever blocking the trigger:
// the byte is written with a raw non-blocking write, and a full pipe (the
// file is already readable) is simply left as is.
func notifyFD(w *os.File) {
	rc, err := w.SyscallConn()
	if err != nil {
		return
	}
	var b = [1]byte{1}
	_ = rc.Write(func(fd uintptr) bool {
		_, _ = syscall.Write(int(fd), b[:])
		return true
	})
}
