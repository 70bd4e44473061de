package perftest

import (
	"time"

	"golang.org/x/sys/unix"
)

// pause sleeps d in the kernel (nanosleep(2)): the calling thread, not the Go scheduler,
// so a sub-millisecond pause lasts about d (see spinner).
func pause(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = unix.Nanosleep(&ts, nil)
}
