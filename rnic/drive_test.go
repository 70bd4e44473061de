package rnic

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestCQSoleQP: a CQ knows the one QP that uses it (whose receive a Wait may drive) until
// a second one does; then it stays mixed until none does, and lets go of a destroyed QP.
func TestCQSoleQP(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	other, _ := d.CreateCQ(16)
	state := func() (*QP, bool, int) {
		cq.mu.Lock()
		defer cq.mu.Unlock()
		return cq.soleQP, cq.mixed, cq.qpRefs
	}
	newQP := func(send, recv *CQ) *QP {
		q, err := d.CreateQP(pd, QPAttr{SendCQ: send, RecvCQ: recv})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a := newQP(cq, cq) // send and receive CQ: bound twice, still the sole QP
	if q, mixed, refs := state(); q != a || mixed || refs != 2 {
		t.Fatalf("one QP: sole %p (want %p), mixed %v, refs %d", q, a, mixed, refs)
	}
	b := newQP(other, cq)
	if _, mixed, _ := state(); !mixed {
		t.Fatal("two QPs on the CQ and not mixed")
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if q, mixed, refs := state(); q != nil || !mixed || refs != 1 {
		t.Fatalf("after the first QP's Destroy: sole %p (want none kept), mixed %v, refs %d", q, mixed, refs)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	c := newQP(cq, other)
	if q, mixed, refs := state(); q != c || mixed || refs != 1 {
		t.Fatalf("a new QP on the emptied CQ: sole %p (want %p), mixed %v, refs %d", q, c, mixed, refs)
	}
}

// fakeDriver is a transport whose receive DriveReceive runs: each run "places" one
// arrival; Kick is counted. With refuse set, CanDriveReceive reports false.
type fakeDriver struct {
	tq     *TransportQP
	placed atomic.Int32
	kicks  atomic.Int32
	refuse atomic.Bool
}

func (f *fakeDriver) CanDriveReceive() bool { return !f.refuse.Load() }

func (f *fakeDriver) DriveReceive(ready func() bool, w Waker) bool {
	f.placed.Add(1)
	return true
}
func (f *fakeDriver) Kick()           { f.kicks.Add(1) }
func (f *fakeDriver) Disconnect(bool) { f.tq.TransportDone(nil) }
func (f *fakeDriver) SendQueued()     {}

// TestQPDriveReceiveContext: DriveReceive runs the receive until its condition holds; the
// end of its context kicks the receive while the QP lives, and no more once the QP is
// destroyed, though the context lives on (the registration is stopped, and with it the
// reference to the transport).
func TestQPDriveReceiveContext(t *testing.T) {
	d, pd, cq := setupCfg(t, Config{WaitDrivesReceive: time.Second})
	for _, destroy := range []bool{false, true} {
		q, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeDriver{}
		if f.tq, err = AttachTransport(q, f); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := q.DriveReceive(ctx, func() bool { return f.placed.Load() == 3 }); err != nil || f.placed.Load() != 3 {
			t.Fatalf("DriveReceive: %v after %d arrivals", err, f.placed.Load())
		}
		if destroy {
			_ = q.Destroy()
		}
		cancel()
		want := int32(1)
		if destroy {
			want = 0
		}
		// context.AfterFunc runs its function on a goroutine of its own
		for deadline := time.Now().Add(2 * time.Second); f.kicks.Load() != want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if destroy {
			time.Sleep(20 * time.Millisecond) // a late Kick would show here
		}
		if k := f.kicks.Load(); k != want {
			t.Fatalf("destroyed %v: %d kicks at the context's end, want %d", destroy, k, want)
		}
		if !destroy {
			_ = q.Destroy()
		}
	}
}

// TestDriveRefused: a transport whose CanDriveReceive reports false is not driven:
// QP.DriveReceive returns ErrNoDriver and CQ.Wait waits as without the mode.
func TestDriveRefused(t *testing.T) {
	d, pd, cq := setupCfg(t, Config{WaitDrivesReceive: time.Second})
	q, err := d.CreateQP(pd, QPAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDriver{}
	f.refuse.Store(true)
	if f.tq, err = AttachTransport(q, f); err != nil {
		t.Fatal(err)
	}
	if err := q.DriveReceive(context.Background(), func() bool { return false }); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("DriveReceive: %v, want ErrNoDriver", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if n, err := cq.Wait(ctx, make([]Completion, 1)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %d, %v", n, err)
	}
	if f.placed.Load() != 0 {
		t.Fatalf("a refusing transport was driven %d times", f.placed.Load())
	}
	_ = q.Destroy()
}
