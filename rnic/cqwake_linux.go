package rnic

import (
	"encoding/binary"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// pollWaker is an eventfd registered with the runtime's network poller; CQ.Wait blocks
// on it. Waking a goroutine blocked on a channel puts it on the waker's run queue and,
// when a P is idle (on a 2-core machine: almost always between two processes' round
// trips), also wakes an idle thread to look for work: a futex wake, and a thread that
// runs, finds nothing and sleeps again, usually on the very CPU the round trip runs on
// (perf's sched and syscall tracepoints: 3-4 futex wakes and 2-3 extra context switches
// per 4 KiB READ between two processes). A goroutine blocked on the poller is instead
// found by the thread that completed the work as soon as that thread's goroutine blocks
// (the receiver reading the socket again): no other thread is involved.
//
// The eventfd is never read: its count is only a wake-up, the signals are counted in seq,
// and the poller (edge-triggered) reports every write whatever the count. So a wait costs
// no system call of its own, and only the first signal of a wait writes: the ones after it
// find the waiter woken already (a completion burst costs one write, not one each).
type pollWaker struct {
	f    *os.File
	rc   syscall.RawConn
	fn   func(fd uintptr) bool // rd, made once
	wfn  func(fd uintptr) bool // wr, made once
	seq  atomic.Uint64         // signals so far
	seen atomic.Uint64         // seq when the current wait was armed
	one  [8]byte
}

// newPollWaker opens the eventfd; nil if it cannot (the CQ then uses its channel).
func newPollWaker() *pollWaker {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &pollWaker{f: os.NewFile(uintptr(fd), "cq-eventfd")}
	if w.rc, err = w.f.SyscallConn(); err != nil {
		_ = w.f.Close()
		return nil
	}
	w.fn, w.wfn = w.rd, w.wr
	binary.NativeEndian.PutUint64(w.one[:], 1)
	return w
}

// arm starts a wait: signals from now on end it. The caller holds the CQ's lock, which a
// signaller holds when it decides to signal, so no signal falls between the two.
func (w *pollWaker) arm() { w.seen.Store(w.seq.Load()) }

// rd is the read callback: done if a signal came since arm, else wait for the poller
// (again: a readiness left by an older signal, or dropped by RawConn.Read as it began, is
// no reason to stop; a signal counts before it writes, so its readiness comes after).
func (w *pollWaker) rd(uintptr) bool { return w.seq.Load() != w.seen.Load() }

// wait blocks until signal was called since arm (or the file is closed). One goroutine
// at a time.
func (w *pollWaker) wait() error { return w.rc.Read(w.fn) }

// signal wakes the waiter: the first signal since arm writes, through the RawConn (so a
// concurrent close cannot hand the descriptor's number to another file first); a later
// one only counts. A signal that counts before an arm is one the armed waiter need not
// see (the CQ's lock orders the completion it announces before the arm's check); one
// that counts after it writes unless an earlier one already did.
func (w *pollWaker) signal() {
	if w.seq.Add(1)-1 != w.seen.Load() {
		return
	}
	_ = w.rc.Write(w.wfn)
}

// wr is the write callback: add 1 to the count (64 bits: it does not overflow).
func (w *pollWaker) wr(fd uintptr) bool {
	_, _ = unix.Write(int(fd), w.one[:])
	return true
}

func (w *pollWaker) close() { _ = w.f.Close() }
