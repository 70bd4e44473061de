package dat

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// §6.1.3 thread safety: every softrnic DAT call is thread safe. Several
// goroutines post on one EP while another drains the EVD.
func TestConcurrentPosters(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	// the EVD must hold every completion that can be outstanding (the send
	// queue depth), or it overflows and breaks the connection (§6.3.1)
	big := mustEVD(t, cli.ia, 256, nil, EVDDTO)
	ep, _ := cli.ia.CreateEP(cli.pz, cli.dto, big, cli.conn, nil)
	cli.ep.Free()
	cli.ep = ep
	connectPair(t, srv, cli, nil)
	const posters, per = 4, 200
	var wg sync.WaitGroup
	var posted, fulls atomic.Int64
	errs := make(chan error, posters)
	for g := 0; g < posters; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			iov := []LMRTriplet{cli.lmr.Triplet(g*64, 64)}
			remote := srv.lmr.RMRTriplet(g*64, 64)
			for i := 0; i < per; {
				err := cli.ep.PostRDMAWrite(iov, uint64(g*per+i), remote, CompletionDefault)
				if errors.Is(err, ErrInsufficientResources) {
					fulls.Add(1)
					runtime.Gosched()
					continue // send queue full: retry
				}
				if err != nil {
					errs <- err
					return
				}
				posted.Add(1)
				i++
			}
		}(g)
	}
	seen := make(map[uint64]bool)
	for len(seen) < posters*per {
		ev, _, err := big.Wait(nil, 2*time.Second, 1)
		if err != nil {
			a, _ := cli.ia.AsyncEVD().Dequeue()
			c, _ := cli.conn.Dequeue()
			t.Fatalf("%v after %d completions (%d posted, %d full); async %v; conn %v; cq len %d; evd n %d; ep %v qp %v", err, len(seen), posted.Load(), fulls.Load(), a.Number, c.Number, big.cq.Len(), big.count(), cli.ep.State(), cli.ep.qp.State())
		}
		if ev.DTO.Status != DTOSuccess || seen[ev.DTO.Cookie] {
			t.Fatalf("%+v (dup %v)", ev.DTO, seen[ev.DTO.Cookie])
		}
		seen[ev.DTO.Cookie] = true
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Queue-full is reported as DAT_INSUFFICIENT_RESOURCES and loses nothing.
func TestSendQueueFull(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	attr := DefaultEPAttr()
	attr.MaxRequestDTOs = 2
	ep, _ := cli.ia.CreateEP(cli.pz, cli.dto, cli.dto, cli.conn, &attr)
	cli.ep.Free()
	cli.ep = ep
	connectPair(t, srv, cli, nil)
	posted := 0
	var full bool
	for i := 0; i < 64 && !full; i++ {
		err := ep.PostRDMAWrite([]LMRTriplet{cli.lmr.Triplet(0, 4096)}, uint64(i), srv.lmr.RMRTriplet(0, 4096), 0)
		switch {
		case err == nil:
			posted++
		case errors.Is(err, ErrInsufficientResources):
			full = true
		default:
			t.Fatal(err)
		}
	}
	for i := 0; i < posted; i++ {
		ev := cli.wait(cli.dto)
		if ev.DTO.Cookie != uint64(i) || ev.DTO.Status != DTOSuccess {
			t.Fatalf("completion %d: %+v", i, ev.DTO)
		}
	}
}

// With DAT_HANDLE_NULL EVDs the EP's queue entries are released at
// completion (nobody can reap them).
func TestNullEVDStreams(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	attr := DefaultEPAttr()
	attr.MaxRequestDTOs, attr.MaxRecvDTOs = 2, 2
	sep, _ := srv.ia.CreateEP(srv.pz, nil, nil, srv.conn, &attr)
	srv.ep.Free()
	srv.ep = sep
	connectPair(t, srv, cli, nil)
	for i := 0; i < 20; i++ {
		for {
			err := sep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 8)}, 0, 0)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrInsufficientResources) {
				t.Fatal(err)
			}
			runtime.Gosched()
		}
		if err := cli.ep.PostSend(nil, uint64(i), 0); err != nil {
			t.Fatal(err)
		}
		cli.waitDTO(DTOSend, uint64(i))
	}
	if cli.ep.State() != EPStateConnected {
		t.Fatal(cli.ep.State())
	}
}

// Closing the IA while other goroutines post and wait: posts fail with
// DAT_INVALID_HANDLE, waiters return DAT_ABORT, nothing panics or hangs.
func TestCloseWhileBusy(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	connectPair(t, srv, cli, nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := cli.ep.PostRDMAWrite([]LMRTriplet{cli.lmr.Triplet(0, 64)}, 1, srv.lmr.RMRTriplet(0, 64), CompletionSuppress)
				if errors.Is(err, ErrInvalidHandle) {
					return
				}
				runtime.Gosched()
			}
		}()
	}
	var waitErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, waitErr = cli.conn.Wait(nil, TimeoutInfinite, 1)
	}()
	time.Sleep(20 * time.Millisecond)
	if err := cli.ia.Close(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if !errors.Is(waitErr, ErrAbort) {
		t.Fatalf("waiter: %v", waitErr)
	}
	srv.waitConn(ConnectionEventDisconnected)
}

// DTO completions that race ahead of ESTABLISHED are held back until it is
// posted (spec §6.3.1: connection establishment precedes DTO completions).
func TestHoldUntilEstablished(t *testing.T) {
	s := newSide(t, "s")
	ep := s.ep
	ep.mu.Lock()
	ep.hold.Store(true)
	ep.mu.Unlock()
	if err := ep.holdOrPost(s.dto, Event{Number: DTOCompletionEvent, DTO: DTOCompletion{Cookie: 5}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dto.Dequeue(); !errors.Is(err, ErrQueueEmpty) {
		t.Fatal("held event delivered early")
	}
	ep.mu.Lock()
	ep.postConn(ConnectionEventEstablished, nil)
	ep.releaseHold()
	ep.mu.Unlock()
	if ev, err := s.conn.Dequeue(); err != nil || ev.Number != ConnectionEventEstablished {
		t.Fatal(ev, err)
	}
	if ev, err := s.dto.Dequeue(); err != nil || ev.DTO.Cookie != 5 {
		t.Fatal(ev, err)
	}
	if err := ep.holdOrPost(s.dto, Event{Number: DTOCompletionEvent}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dto.Dequeue(); err != nil {
		t.Fatal("not posted after release")
	}
}
