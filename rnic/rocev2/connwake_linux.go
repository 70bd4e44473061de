//go:build linux

package rocev2

import (
	"encoding/binary"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// connWake is the wake-up a sending connection's goroutine waits on (Conn.park): an
// eventfd in the runtime's network poller instead of the connection's channel.
//
// Why: the goroutine that posts send work, or the receive goroutine whose ACK opened the
// window, wakes the connection's goroutine and goes on running. Woken through a channel,
// the connection's goroutine waits in that P's runnext slot, and the runtime wakes an idle
// thread to run it elsewhere; that thread finds it in a running P's runnext and sleeps
// 3 µs before it may take it (runtime.runqgrab), a nanosleep that the kernel's 50 µs
// timer slack stretches to ~55 µs, while it holds the other P and does not poll the
// network. Meanwhile the waker blocks and runs the connection's goroutine on its own P,
// which goes into its sendmmsg, and the packets it sends to a local peer wait for a
// poller that is asleep: a stall of tens of µs per window of WRITEs on a 2-core machine.
// Woken through the poller instead, the goroutine is found either by a thread blocked in
// the poller (an idle P: it runs at once, beside the waker) or by the waker's thread when
// the waker blocks: no thread is woken to spin, and nobody sleeps in runqgrab.
//
// The eventfd is never read: signals are counted in seq and only the first one since the
// waiter armed writes (one write per wait, not one per post); the poller is
// edge-triggered and reports every write.
type connWake struct {
	f       *os.File
	rc      syscall.RawConn
	ready   func(fd uintptr) bool // made once (a closure passed to RawConn escapes)
	write   func(fd uintptr) bool
	seq     atomic.Uint64 // signals so far
	armed   atomic.Uint64 // seq when the waiter armed
	one     [8]byte
	dl      time.Time // the read deadline set (zero: none)
	dlValid bool
}

const haveConnWake = true

// newConnWake opens the eventfd; nil when it cannot (the connection keeps its channel).
func newConnWake() *connWake {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &connWake{f: os.NewFile(uintptr(fd), "rocev2-conn-wake")}
	if w.rc, err = w.f.SyscallConn(); err != nil {
		_ = w.f.Close()
		return nil
	}
	binary.NativeEndian.PutUint64(w.one[:], 1)
	w.ready = func(uintptr) bool { return w.seq.Load() != w.armed.Load() }
	w.write = func(fd uintptr) bool {
		_, _ = unix.Write(int(fd), w.one[:])
		return true
	}
	return w
}

// arm starts a wait: a signal from now on ends it. The waiter arms before it looks for
// work, so a signal for work it does not see comes after the arm.
func (w *connWake) arm() { w.armed.Store(w.seq.Load()) }

// signal ends the current wait; only its first signal writes to the eventfd (through the
// RawConn: a concurrent close cannot hand its descriptor to another file first).
func (w *connWake) signal() {
	if w.seq.Add(1)-1 == w.armed.Load() {
		_ = w.rc.Write(w.write)
	}
}

// wait blocks until a signal since arm, or until deadline (zero: none).
func (w *connWake) wait(deadline time.Time) {
	if !w.dlValid || !deadline.Equal(w.dl) {
		_ = w.f.SetReadDeadline(deadline)
		w.dl, w.dlValid = deadline, true
	}
	_ = w.rc.Read(w.ready) // a deadline ends it with an error: the caller runs its timers
}

func (w *connWake) close() { _ = w.f.Close() }
