//go:build linux

package bench

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/pollwake"
)

// idleWakeGap is how long the waiting goroutine stays parked before each wake-up of
// BenchmarkIdleWake: long enough for its thread to block in the kernel and its CPU to go
// idle, as between two messages of a round trip.
const idleWakeGap = 100 * time.Microsecond

// BenchmarkIdleWake measures what handing work to a goroutine whose CPU is idle costs on
// this machine: the hand-off softrnic's pipeline makes between its goroutines (a
// completion from the connection's goroutine to a CQ.Wait, a packet from a RoCEv2
// sender to the receiving endpoint) when the receiving side has to be woken up.
//
// A goroutine waits in the runtime's network poller on an eventfd (package pollwake, as
// CQ.Wait does); the benchmark's goroutine, locked to its thread, busy-waits so that its
// own CPU stays busy and the other one idles, signals after idleWakeGap, and busy-waits
// for the waiter to record when it ran. p50-us and p90-us are the percentiles of the time
// from the signal to the waiter running. On a machine whose idle CPUs wake quickly they
// are a few microseconds; in a virtual machine without guest halt-polling each is an
// inter-processor interrupt through the hypervisor. When it is much longer than a
// pipeline stage, the runtime runs the stages one after another on the thread that is
// already awake (it finds the next goroutine when the current one parks, before the
// woken thread gets there), which is what an execution trace of BenchmarkRoCEv2Write/4KiB
// shows (bench/README.md).
func BenchmarkIdleWake(b *testing.B) {
	w := pollwake.New()
	if w == nil {
		b.Fatal("pollwake: no eventfd")
	}
	defer w.Close()
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }
	var armed atomic.Int64 // the iteration the waiter armed for
	var woke atomic.Int64  // when the waiter ran after the signal (0: not yet)
	var quit atomic.Bool
	done := make(chan error, 1)
	armed.Store(-1)
	go func() {
		for i := int64(0); ; i++ {
			w.Arm()
			armed.Store(i)
			if err := w.Wait(time.Time{}); err != nil {
				done <- err
				return
			}
			if quit.Load() {
				done <- nil
				return
			}
			woke.Store(now())
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		for armed.Load() != int64(i) {
		}
		for end := now() + int64(idleWakeGap); now() < end; {
		}
		woke.Store(0)
		sent := now()
		w.Signal()
		var t int64
		for t = woke.Load(); t == 0; t = woke.Load() {
		}
		lat[i] = time.Duration(t - sent)
	}
	b.StopTimer()
	for armed.Load() != int64(b.N) {
	}
	quit.Store(true)
	w.Signal()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*9/10])/1e3, "p90-us")
}
