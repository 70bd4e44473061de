package dat

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// §6.3.2 CNO

func TestCNOTriggerSticky(t *testing.T) {
	ia, _ := testIA(t)
	cno, err := ia.CreateCNO(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := mustEVD(t, ia, 4, cno, EVDSoftware)
	if evd, err := cno.Wait(nil, 0); !errors.Is(err, ErrQueueEmpty) || evd != nil {
		t.Fatal(evd, err)
	}
	if _, err := cno.Wait(nil, 2*time.Millisecond); !errors.Is(err, ErrQueueEmpty) {
		t.Fatal(err)
	}
	if _, err := cno.Wait(nil, -1); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
	e.PostSE(1) // no waiter: the trigger is remembered
	if evd, err := cno.Wait(nil, TimeoutInfinite); err != nil || evd != e {
		t.Fatal(evd, err)
	}
	if last, _ := cno.Trigger(); last != e {
		t.Fatal(last)
	}
	// a disabled EVD does not trigger
	e.Disable()
	e.PostSE(2)
	if _, err := cno.Wait(nil, 0); !errors.Is(err, ErrQueueEmpty) {
		t.Fatalf("disabled EVD triggered: %v", err)
	}
	e.Enable()
	done := make(chan *EVD)
	go func() { evd, _ := cno.Wait(context.Background(), TimeoutInfinite); done <- evd }()
	for {
		cno.mu.Lock()
		n := cno.waiters
		cno.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	e.PostSE(3)
	if got := <-done; got != e {
		t.Fatal(got)
	}
}

func TestCNONotTriggeredWithEVDWaiter(t *testing.T) {
	ia, _ := testIA(t)
	cno, _ := ia.CreateCNO(nil)
	e := mustEVD(t, ia, 4, cno, EVDSoftware)
	done := make(chan error)
	go func() { _, _, err := e.Wait(nil, TimeoutInfinite, 1); done <- err }()
	waitBlocked(t, e)
	e.PostSE(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := cno.Wait(nil, 0); !errors.Is(err, ErrQueueEmpty) {
		t.Fatalf("CNO triggered while the EVD had a waiter: %v", err)
	}
}

func TestCNOAgentAndModify(t *testing.T) {
	ia, _ := testIA(t)
	var calls atomic.Int32
	var got atomic.Pointer[EVD]
	agent := func(e *EVD) { calls.Add(1); got.Store(e) }
	cno, _ := ia.CreateCNO(agent)
	p, err := cno.Query(CNOFieldAll)
	if err != nil || p.Agent == nil || p.IA != ia {
		t.Fatal(p, err)
	}
	e := mustEVD(t, ia, 4, cno, EVDSoftware)
	e.PostSE(1)
	e.PostSE(2)
	if calls.Load() != 1 || got.Load() != e {
		t.Fatalf("agent called %d times", calls.Load())
	}
	if p, _ := cno.Query(CNOFieldAgent); p.Agent != nil {
		t.Fatal("agent still associated after invocation")
	}
	cno.ModifyAgent(agent)
	e.PostSE(3)
	if calls.Load() != 2 {
		t.Fatal(calls.Load())
	}
	if _, err := cno.Query(0x80); !errors.Is(err, ErrInvalidParameter) {
		t.Fatal(err)
	}
}

func TestCNOFreeAndEVDModify(t *testing.T) {
	ia, _ := testIA(t)
	cno, _ := ia.CreateCNO(nil)
	e := mustEVD(t, ia, 4, cno, EVDSoftware)
	if err := cno.Free(); !errors.Is(err, ErrInvalidStateCNOInUse) {
		t.Fatal(err)
	}
	cno2, _ := ia.CreateCNO(nil)
	if err := e.ModifyCNO(cno2); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.Query(EVDFieldCNO); p.CNO != cno2 {
		t.Fatal(p.CNO)
	}
	e.PostSE(1)
	if evd, err := cno2.Wait(nil, 0); err != nil || evd != e {
		t.Fatal(evd, err)
	}
	if err := cno.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := cno.Wait(nil, 0); !errors.Is(err, ErrInvalidHandleCNO) {
		t.Fatal(err)
	}
	if err := e.ModifyCNO(cno); !errors.Is(err, ErrInvalidHandleCNO) {
		t.Fatal(err)
	}
	// freeing the last EVD of a CNO releases its waiters with a nil EVD
	done := make(chan error)
	go func() {
		evd, err := cno2.Wait(nil, TimeoutInfinite)
		if evd != nil {
			err = errors.New("non-nil EVD")
		}
		done <- err
	}()
	for {
		cno2.mu.Lock()
		n := cno2.waiters
		cno2.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := e.Free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := cno2.Free(); err != nil {
		t.Fatal(err)
	}
}

func TestCNOFD(t *testing.T) {
	ia, _ := testIA(t)
	cno, fd, err := ia.CreateCNOFD()
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := cno.Query(CNOFieldFD); p.FD != fd {
		t.Fatal("fd not reported")
	}
	e := mustEVD(t, ia, 4, cno, EVDSoftware)
	e.PostSE(1)
	fd.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [8]byte
	if n, err := fd.Read(b[:]); err != nil || n < 1 {
		t.Fatalf("fd not readable: %d %v", n, err)
	}
	if last, _ := cno.Trigger(); last != e {
		t.Fatal(last)
	}
	e.Free()
	if err := cno.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.Read(b[:]); err == nil {
		t.Fatal("fd still open after free")
	}
}
