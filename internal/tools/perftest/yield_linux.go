package perftest

import "syscall"

// osYield gives the CPU to another runnable thread of the host, if there is one
// (sched_yield(2)); it returns at once when there is none.
func osYield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
