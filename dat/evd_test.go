package dat

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func testIA(t testing.TB) (*IA, *EVD) { return testIAOn(t, "iwarp 127.0.0.1") }

func testIAOn(t testing.TB, instance string) (*IA, *EVD) {
	t.Helper()
	r := NewRegistry()
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "t", VersionMajor: 2}, InstanceData: instance}); err != nil {
		t.Fatal(err)
	}
	ia, async, err := r.OpenIA("t", 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ia.Close(CloseAbrupt) })
	return ia, async
}

func mustEVD(t testing.TB, ia *IA, qlen int, cno *CNO, f EVDFlags) *EVD {
	t.Helper()
	e, err := ia.CreateEVD(qlen, cno, f)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// waitBlocked waits until e has a direct waiter.
func waitBlocked(t *testing.T, e *EVD) {
	t.Helper()
	for i := 0; i < 5000; i++ {
		e.mu.Lock()
		w := e.waiting
		e.mu.Unlock()
		if w {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("waiter never blocked")
}

// §6.3.4.1 dat_evd_create
func TestEVDCreate(t *testing.T) {
	ia, _ := testIA(t)
	if _, err := ia.CreateEVD(0, nil, EVDDefault); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, err := ia.CreateEVD(4, nil, 0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if _, err := ia.CreateEVD(4, nil, 0x4000); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	var nilIA *IA
	if _, err := nilIA.CreateEVD(4, nil, EVDDefault); !errors.Is(err, ErrInvalidHandleIA) {
		t.Fatal(err)
	}
	ia2, _ := testIA(t)
	cno2, _ := ia2.CreateCNO(nil)
	if _, err := ia.CreateEVD(4, cno2, EVDDefault); !errors.Is(err, ErrInvalidHandleCNO) {
		t.Fatalf("foreign CNO: %v", err)
	}
	e := mustEVD(t, ia, 4, nil, EVDDefault|EVDSoftware)
	p, err := e.Query(EVDFieldAll)
	if err != nil || p.QLen != 4 || p.IA != ia || p.Flags != EVDDefault|EVDSoftware ||
		p.State != EVDStateEnabled|EVDStateWaitable|EVDStateConfigThreshold {
		t.Fatalf("query %+v %v", p, err)
	}
	if _, err := e.Query(0x100); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if ht, err := GetHandleType(e); err != nil || ht != HandleTypeEVD {
		t.Fatal(ht, err)
	}
}

// §6.3.4.2 dat_evd_free
func TestEVDFree(t *testing.T) {
	ia, async := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	e.addStream(0)
	if err := e.Free(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("with stream: %v", err)
	}
	e.removeStream(0)
	done := make(chan error)
	go func() { _, _, err := e.Wait(nil, TimeoutInfinite, 1); done <- err }()
	waitBlocked(t, e)
	if err := e.Free(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("with waiter: %v", err)
	}
	e.PostSE(nil)
	<-done
	if err := e.Free(); err != nil {
		t.Fatal(err)
	}
	if err := e.Free(); !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("double free: %v", err)
	}
	if err := e.PostSE(nil); !errors.Is(err, ErrInvalidHandle) {
		t.Fatal(err)
	}
	if _, err := GetHandleType(e); !errors.Is(err, ErrInvalidHandle) {
		t.Fatal(err)
	}
	if err := async.Free(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("async EVD of an open IA: %v", err)
	}
}

// §6.3.4.10 dat_evd_wait and §6.3.4.11 dat_evd_dequeue
func TestEVDWaitThresholdAndTimeout(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	if _, err := e.Dequeue(); !errors.Is(err, ErrQueueEmpty) {
		t.Fatal(err)
	}
	for _, th := range []int{0, -1, 5} {
		if _, _, err := e.Wait(nil, 0, th); !errors.Is(err, ErrInvalidParameter) {
			t.Fatalf("threshold %d: %v", th, err)
		}
	}
	if _, _, err := e.Wait(nil, -time.Second, 1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	e.PostSE(1)
	// timeout 0 below threshold: DAT_TIMEOUT_EXPIRED with nmore defined, nothing dequeued
	if _, n, err := e.Wait(nil, 0, 2); !errors.Is(err, ErrTimeoutExpired) || n != 1 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if _, n, err := e.Wait(nil, 5*time.Millisecond, 2); !errors.Is(err, ErrTimeoutExpired) || n != 1 {
		t.Fatalf("timed: n=%d err=%v", n, err)
	}
	e.PostSE(2)
	ev, n, err := e.Wait(nil, 0, 2)
	if err != nil || n != 1 || ev.Number != SoftwareEvent || ev.Software != 1 || ev.EVD != e {
		t.Fatalf("ev=%+v n=%d err=%v", ev, n, err)
	}
	ev, err = e.Dequeue()
	if err != nil || ev.Software != 2 {
		t.Fatal(ev, err)
	}
}

func TestEVDWaitWakesAtThreshold(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 8, nil, EVDDefault)
	type res struct {
		ev  Event
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() { ev, n, err := e.Wait(context.Background(), TimeoutInfinite, 3); done <- res{ev, n, err} }()
	waitBlocked(t, e)
	// a second dequeuer is refused while the EVD is claimed by a waiter
	if _, err := e.Dequeue(); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if _, _, err := e.Wait(nil, 0, 1); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case r := <-done:
			t.Fatalf("woke early after %d DTO events: %+v", i, r)
		default:
		}
		if err := e.post(Event{Number: DTOCompletionEvent, DTO: DTOCompletion{Cookie: uint64(i)}}, true); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if r.err != nil || r.n != 2 || r.ev.DTO.Cookie != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestEVDNotificationConfig(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 8, nil, EVDDefault)
	e.addStream(CompletionUnsignalled)
	if _, _, err := e.Wait(nil, 0, 2); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("threshold>1 on a notify EVD: %v", err)
	}
	p, _ := e.Query(EVDFieldState)
	if p.State&0x30 != EVDStateConfigNotify {
		t.Fatalf("state %v", p.State)
	}
	done := make(chan Event, 1)
	go func() { ev, _, _ := e.Wait(nil, TimeoutInfinite, 1); done <- ev }()
	waitBlocked(t, e)
	// a non-notification completion does not wake the waiter
	e.post(Event{Number: DTOCompletionEvent, DTO: DTOCompletion{Cookie: 1}}, false)
	select {
	case ev := <-done:
		t.Fatalf("woken by non-notification event %+v", ev)
	case <-time.After(20 * time.Millisecond):
	}
	e.post(Event{Number: DTOCompletionEvent, DTO: DTOCompletion{Cookie: 2}}, true)
	if ev := <-done; ev.DTO.Cookie != 1 {
		t.Fatalf("got %+v, want the first event", ev)
	}
	e.removeStream(CompletionUnsignalled)
}

// §6.3.4.7/8 unwaitable
func TestEVDUnwaitable(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	done := make(chan error, 1)
	go func() { _, _, err := e.Wait(nil, TimeoutInfinite, 1); done <- err }()
	waitBlocked(t, e)
	if err := e.SetUnwaitable(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrInvalidState) {
		t.Fatalf("waiter: %v", err)
	}
	if _, _, err := e.Wait(nil, 0, 1); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	// events still arrive and can be dequeued
	e.PostSE("x")
	if ev, err := e.Dequeue(); err != nil || ev.Software != "x" {
		t.Fatal(ev, err)
	}
	p, _ := e.Query(EVDFieldState)
	if p.State&EVDStateUnwaitable == 0 {
		t.Fatal(p.State)
	}
	e.ClearUnwaitable()
	e.PostSE("y")
	if ev, _, err := e.Wait(nil, TimeoutInfinite, 1); err != nil || ev.Software != "y" {
		t.Fatal(ev, err)
	}
}

func TestEVDWaitCancel(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := e.Wait(ctx, TimeoutInfinite, 1); done <- err }()
	waitBlocked(t, e)
	cancel()
	err := <-done
	if !errors.Is(err, ErrInterruptedCall) || !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// the EVD is waitable again
	e.PostSE(nil)
	if _, _, err := e.Wait(nil, 0, 1); err != nil {
		t.Fatal(err)
	}
}

// §6.2.1.2: IA close aborts EVD waiters and releases CNO waiters.
func TestIACloseAbortsWaiters(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	cno, _ := ia.CreateCNO(nil)
	mustEVD(t, ia, 4, cno, EVDSoftware)
	var wg sync.WaitGroup
	var evdErr, cnoErr error
	var cnoEVD *EVD
	wg.Add(2)
	go func() { defer wg.Done(); _, _, evdErr = e.Wait(nil, TimeoutInfinite, 1) }()
	go func() { defer wg.Done(); cnoEVD, cnoErr = cno.Wait(nil, TimeoutInfinite) }()
	waitBlocked(t, e)
	for {
		cno.mu.Lock()
		n := cno.waiters
		cno.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := ia.Close(CloseGraceful); !errors.Is(err, ErrInvalidStateIAInUse) {
		t.Fatal(err)
	}
	if err := ia.Close(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !errors.Is(evdErr, ErrAbort) {
		t.Fatalf("evd waiter: %v", evdErr)
	}
	if cnoErr != nil || cnoEVD != nil {
		t.Fatalf("cno waiter: %v %v", cnoEVD, cnoErr)
	}
	if err := ia.Close(CloseAbrupt); !errors.Is(err, ErrInvalidHandleIA) {
		t.Fatal(err)
	}
	if _, err := e.Dequeue(); !errors.Is(err, ErrInvalidHandle) {
		t.Fatal(err)
	}
}

// §6.3.4.12 dat_evd_post_se and §6.3.1 overflow rules
func TestEVDOverflow(t *testing.T) {
	ia, async := testIA(t)
	e := mustEVD(t, ia, 2, nil, EVDDefault|EVDSoftware)
	noSW := mustEVD(t, ia, 2, nil, EVDDTO)
	if err := noSW.PostSE(1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("post_se on a non-software EVD: %v", err)
	}
	e.PostSE(1)
	e.PostSE(2)
	if err := e.PostSE(3); !errors.Is(err, ErrQueueFull) {
		t.Fatal(err)
	}
	if _, err := async.Dequeue(); !errors.Is(err, ErrQueueEmpty) {
		t.Fatalf("software overflow must not raise async error: %v", err)
	}
	// a DTO completion that does not fit overflows the EVD
	if err := e.post(Event{Number: DTOCompletionEvent}, true); !errors.Is(err, ErrQueueFull) {
		t.Fatal(err)
	}
	ev, err := async.Dequeue()
	if err != nil || ev.Number != AsyncErrorEVDOverflow || ev.Async.Handle != e || ev.Async.Reason != EVDOverflowError {
		t.Fatalf("%+v %v", ev, err)
	}
	e.Dequeue()
	if err := e.post(Event{Number: DTOCompletionEvent}, true); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("overflowed EVD took a completion: %v", err)
	}
}

// §6.3.4.9 dat_evd_resize
func TestEVDResize(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 4, nil, EVDSoftware)
	for i := 0; i < 4; i++ {
		e.PostSE(i)
	}
	e.Dequeue() // move head so the ring wraps on copy
	e.PostSE(4)
	if err := e.Resize(3); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if err := e.Resize(0); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	if err := e.Resize(8); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		ev, err := e.Dequeue()
		if err != nil || ev.Software != i {
			t.Fatalf("after resize %d: %+v %v", i, ev, err)
		}
	}
	p, _ := e.Query(EVDFieldQLen)
	if p.QLen != 8 {
		t.Fatal(p.QLen)
	}
}

func TestConsumerContext(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 1, nil, EVDSoftware)
	if c, err := ConsumerContext(e); err != nil || c != nil {
		t.Fatal(c, err)
	}
	if err := SetConsumerContext(e, 42); err != nil {
		t.Fatal(err)
	}
	if c, _ := ConsumerContext(e); c != 42 {
		t.Fatal(c)
	}
	var nilEP *EP
	if err := SetConsumerContext(nilEP, 1); !errors.Is(err, ErrInvalidHandleEP) {
		t.Fatal(err)
	}
	if _, err := ConsumerContext(nil); !errors.Is(err, ErrInvalidHandle) {
		t.Fatal(err)
	}
	if ht, _ := GetHandleType(ia); ht != HandleTypeIA {
		t.Fatal(ht)
	}
}

func BenchmarkEVDPostDequeue(b *testing.B) {
	ia, _ := testIA(b)
	e := mustEVD(b, ia, 64, nil, EVDDefault)
	ev := Event{Number: DTOCompletionEvent}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.post(ev, true)
		if _, err := e.Dequeue(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEVDPostWait(b *testing.B) {
	ia, _ := testIA(b)
	e := mustEVD(b, ia, 64, nil, EVDDefault)
	ev := Event{Number: DTOCompletionEvent}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.post(ev, true)
		if _, _, err := e.Wait(nil, time.Second, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// §6.3.1: in CONFIG_THRESHOLD a waiter below its threshold is still woken by
// a notification (non-completion) event, and gets the first queued event.
func TestEVDThresholdWokenByNotification(t *testing.T) {
	ia, _ := testIA(t)
	e := mustEVD(t, ia, 8, nil, EVDDefault)
	done := make(chan Event, 1)
	go func() { ev, _, _ := e.Wait(nil, TimeoutInfinite, 3); done <- ev }()
	waitBlocked(t, e)
	e.post(Event{Number: DTOCompletionEvent, DTO: DTOCompletion{Cookie: 1}}, true)
	select {
	case ev := <-done:
		t.Fatalf("woken below threshold by a completion: %+v", ev)
	case <-time.After(20 * time.Millisecond):
	}
	e.post(Event{Number: ConnectionEventBroken}, true)
	if ev := <-done; ev.Number != DTOCompletionEvent || ev.DTO.Cookie != 1 {
		t.Fatalf("%+v", ev)
	}
	if ev, _ := e.Dequeue(); ev.Number != ConnectionEventBroken {
		t.Fatal(ev)
	}
}
