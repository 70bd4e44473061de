package rnic

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWaitWakeups: a Wait blocked on the CQ (on the poller's eventfd where there is one)
// is woken by each completion, whether it is pushed before, while or after the waiter
// blocks, by several waiters at once, and by the end of its context; it leaves the CQ's
// arming alone.
func TestWaitWakeups(t *testing.T) {
	_, _, cq := setup(t)
	ctx := context.Background()
	var wc [1]Completion
	for i := range 2000 {
		done := make(chan error, 1)
		go func() {
			_, err := cq.Wait(ctx, wc[:])
			done <- err
		}()
		if i%3 == 0 {
			time.Sleep(time.Duration(i%50) * time.Microsecond) // sometimes after it blocked
		}
		cq.push(&Completion{WRID: uint64(i)})
		select {
		case err := <-done:
			if err != nil || wc[0].WRID != uint64(i) {
				t.Fatalf("round %d: %v, WRID %d", i, err, wc[0].WRID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Wait not woken", i)
		}
	}

	// Several waiters, one completion each.
	const waiters = 8
	var wg sync.WaitGroup
	got := make(chan uint64, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc [1]Completion
			if n, err := cq.Wait(ctx, wc[:]); err != nil || n != 1 {
				t.Errorf("Wait: %d, %v", n, err)
				return
			}
			got <- wc[0].WRID
		}()
	}
	for i := range waiters {
		cq.push(&Completion{WRID: uint64(100 + i)})
	}
	wg.Wait()
	close(got)
	seen := map[uint64]bool{}
	for id := range got {
		seen[id] = true
	}
	if len(seen) != waiters {
		t.Fatalf("waiters got %v", seen)
	}

	// The end of the context, by cancel and by deadline, with the same and new contexts.
	for i := range 4 {
		cctx, cancel := context.WithCancel(ctx)
		if i%2 == 1 {
			cctx, cancel = context.WithTimeout(ctx, time.Millisecond)
		}
		go func() {
			time.Sleep(time.Millisecond)
			cancel()
		}()
		if _, err := cq.Wait(cctx, wc[:]); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait after its context ended: %v", err)
		}
		cancel()
	}

	// Arming: a Wait (the only one) on a CQ armed for solicited completions does not make
	// it fire for an unsolicited one.
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if cq.pw != nil {
		t.Fatal("Destroy kept the eventfd")
	}
	cq, _ = cq.dev.CreateCQ(4)
	cq.Arm(true)
	go cq.push(&Completion{WRID: 7})
	if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].WRID != 7 {
		t.Fatalf("Wait: %v %+v", err, wc[0])
	}
	select {
	case <-cq.C():
		t.Fatal("solicited-armed CQ fired for an unsolicited completion")
	default:
	}
}

// TestWaitAllocs: a Wait that blocks and is woken by a completion allocates nothing, with
// a context that never ends and with one that can (reused Wait after Wait, as a polling
// loop passes it).
func TestWaitAllocs(t *testing.T) {
	_, _, cq := setup(t)
	req := make(chan struct{})
	go func() {
		for range req {
			// Push once the Wait has blocked, so that the blocking path is the one counted.
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				cq.mu.Lock()
				blocked := cq.pwBusy
				cq.mu.Unlock()
				if blocked {
					break
				}
				runtime.Gosched()
			}
			cq.push(&Completion{WRID: 9})
		}
	}()
	defer close(req)
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wc [1]Completion
	for _, ctx := range []context.Context{context.Background(), cctx} {
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			req <- struct{}{}
			if _, e := cq.Wait(ctx, wc[:]); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if allocs != 0 {
			t.Errorf("a blocking Wait allocates %.1f times (context %v)", allocs, ctx)
		}
	}
}
