package handover

import (
	"sync/atomic"
	"testing"
	"time"
)

type nopWaker struct{}

func (nopWaker) Wake() {}

// TestQuitWhileLentAfterDeafAwait: the owner, woken while a Wait runs the receive, goes
// back to sleep deaf to quit (the Wait returns the receive); the Wait then keeps the
// receive lent, and the receive starts to end (quit closed). The owner takes the receive
// back at once, not at the reclaim timer (here an hour away): an endpoint's or
// connection's Close ending its receive must not wait one to two hold durations.
func TestQuitWhileLentAfterDeafAwait(t *testing.T) {
	var quitting atomic.Bool
	quit := make(chan struct{})
	h := New(time.Hour, func() {}, quitting.Load, quit)
	h.Lend() // the owner lent the receive to a Wait that asked for it
	got := make(chan bool, 1)
	ran := h.Drive(func() bool { return true }, nopWaker{}, func(_, _ func() bool) Result {
		h.signal() // a stale wake-up: the owner wakes while this Wait runs the receive
		go func() { got <- h.Await() }()
		for deadline := time.Now().Add(10 * time.Second); ; {
			h.mu.Lock()
			deaf := h.deaf
			h.mu.Unlock()
			if deaf {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the owner did not go back to sleep while the Wait ran the receive")
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		return Keep
	})
	if !ran {
		t.Fatal("Drive did not run the lent receive")
	}
	quitting.Store(true)
	close(quit)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("Await reported the receive ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner did not take the receive back when it started to end")
	}
	h.mu.Lock()
	owner := h.owner
	h.mu.Unlock()
	if owner != own {
		t.Fatalf("owner state %d after Await, want own", owner)
	}
}
