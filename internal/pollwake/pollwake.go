// Package pollwake is a wake-up that one goroutine at a time waits for in the runtime's
// network poller, as it would wait for a socket.
//
// Waking a goroutine blocked on a channel puts it on the waker's run queue and, when a
// processor is idle, also wakes an idle thread to look for work: a futex wake, and a
// thread that finds the woken goroutine in the waker's run-next slot and sleeps 3 µs
// (runtime.runqgrab) before it may take it, a nanosleep the kernel's 50 µs timer slack
// stretches to ~55 µs while that thread holds the other processor and nobody polls the
// network. A goroutine blocked in the poller is found instead by a thread already blocked
// there (an idle processor: it runs at once, beside the waker) or by the waker's thread
// when the waker blocks: no other thread is involved. rnic's CQ.Wait and rocev2's
// connections wait this way.
//
// On Linux the wake-up is an eventfd that is never read: its count is only a wake-up,
// the signals are counted in memory, and the poller (edge-triggered) reports every write
// whatever the count. So a wait costs no system call of its own, and only the first
// signal of a wait writes (a burst of signals costs one write). Elsewhere New returns nil
// and callers keep a channel.
package pollwake
