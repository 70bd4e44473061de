//go:build linux

package pollwake

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestWaker: a signal after Arm ends the wait (before or while it blocks, from another
// goroutine), one before Arm does not, a deadline ends it with os.ErrDeadlineExceeded and
// is cleared by a zero one, and Close ends it with an error.
func TestWaker(t *testing.T) {
	w := New()
	if w == nil {
		t.Fatal("no eventfd")
	}
	w.Arm()
	w.Signal()
	w.Signal() // counted only
	if err := w.Wait(time.Time{}); err != nil {
		t.Fatal(err)
	}
	for range 1000 { // signals from another goroutine while the wait blocks
		w.Arm()
		done := make(chan struct{})
		go func() { w.Signal(); close(done) }()
		if err := w.Wait(time.Time{}); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	w.Signal() // before the Arm: not for the next wait
	w.Arm()
	if err := w.Wait(time.Now().Add(5 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("wait after a stale signal: %v", err)
	}
	w.Arm()
	go w.Signal()
	if err := w.Wait(time.Time{}); err != nil { // the old deadline is gone
		t.Fatal(err)
	}
	w.Arm()
	go w.Close()
	if err := w.Wait(time.Time{}); err == nil {
		t.Fatal("a closed waker's wait returned no error")
	}
}
