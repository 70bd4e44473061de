//go:build !linux

package perftest

import "time"

// pause sleeps d (see spinner; elsewhere than Linux a Go timer).
func pause(d time.Duration) { time.Sleep(d) }
