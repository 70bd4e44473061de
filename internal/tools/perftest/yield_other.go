//go:build !linux

package perftest

// osYield does nothing where sched_yield(2) is not called: the spinner yields only to
// the process's goroutines.
func osYield() {}
