//go:build linux

package pollwake

import (
	"encoding/binary"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Supported reports whether New can return a Waker on this system.
const Supported = true

// Waker is the wake-up; see the package documentation. Arm and Wait belong to the one
// waiting goroutine; Signal may be called from any.
type Waker struct {
	f     *os.File
	rc    syscall.RawConn
	rd    func(fd uintptr) bool // method values, made once (a closure passed to RawConn escapes)
	wr    func(fd uintptr) bool
	seq   atomic.Uint64 // signals so far
	armed atomic.Uint64 // seq when the current wait was armed
	one   [8]byte
	dl    time.Time // the read deadline set, when dlSet
	dlSet bool
}

// New opens the eventfd; nil if it cannot (the caller then uses a channel).
func New() *Waker {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &Waker{f: os.NewFile(uintptr(fd), "pollwake-eventfd")}
	if w.rc, err = w.f.SyscallConn(); err != nil {
		_ = w.f.Close()
		return nil
	}
	w.rd, w.wr = w.ready, w.write
	binary.NativeEndian.PutUint64(w.one[:], 1)
	return w
}

// Arm starts a wait: a Signal from now on ends it. The caller arms before it looks for
// the work a signal announces (or holds the lock a signaller holds when it decides to
// signal), so no signal falls between the look and the wait.
func (w *Waker) Arm() { w.armed.Store(w.seq.Load()) }

// ready is the read callback: done if a signal came since Arm, else wait for the poller
// (again: a readiness left by an older signal, or dropped by RawConn.Read as it began, is
// no reason to stop; a signal counts before it writes, so its readiness comes after).
func (w *Waker) ready(uintptr) bool { return w.seq.Load() != w.armed.Load() }

// Wait blocks until Signal was called since Arm, the deadline passes (zero: none;
// os.ErrDeadlineExceeded) or the Waker is closed (an error).
func (w *Waker) Wait(deadline time.Time) error {
	if w.dlSet || !deadline.IsZero() {
		if !w.dlSet || !deadline.Equal(w.dl) {
			_ = w.f.SetReadDeadline(deadline)
			w.dl, w.dlSet = deadline, !deadline.IsZero()
		}
	}
	return w.rc.Read(w.rd)
}

// Signal ends the current wait. The first signal since Arm writes, through the RawConn
// (so a concurrent Close cannot hand the descriptor's number to another file first); a
// later one only counts.
func (w *Waker) Signal() {
	if w.seq.Add(1)-1 != w.armed.Load() {
		return
	}
	_ = w.rc.Write(w.wr)
}

// write is the write callback: add 1 to the count (64 bits: it does not overflow).
func (w *Waker) write(fd uintptr) bool {
	_, _ = unix.Write(int(fd), w.one[:])
	return true
}

// Close closes the eventfd; a Wait blocked on it returns an error.
func (w *Waker) Close() { _ = w.f.Close() }
