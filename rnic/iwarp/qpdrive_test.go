package iwarp

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/drivetest"
	"github.com/softrnic/softrnic/rnic"
)

// TestQPDriveReceiveWrites: the server learns of the client's RDMA Writes only by polling
// its memory, as perftest's write_lat does, through QP.DriveReceive; every Write arrives
// and the server's goroutine placed them itself (the connection's goroutine handed the
// receive over once). With a spin (rnic.Config.ReceiveSpin) too.
func TestQPDriveReceiveWrites(t *testing.T) {
	for _, spin := range []time.Duration{0, 2 * time.Millisecond} {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) {
			noLeak(t)
			cli, srv := drivePair(t, false, time.Second, spin)
			cmr, cbuf := cli.reg(t, 64, allAccess)
			smr, sbuf := srv.reg(t, 64, allAccess)
			const rounds = 500
			var want atomic.Uint32
			until := func() bool { return uint32(drivetest.Polled(&sbuf[63])) == want.Load()&0xff }
			before := srv.conn.drv.h.Driven.Load()
			for i := 1; i <= rounds; i++ {
				want.Store(uint32(i))
				cbuf[63] = byte(i)
				if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 64)},
					RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := srv.qp.DriveReceive(ctx, until)
				cancel()
				if err != nil {
					t.Fatalf("round %d: %v (memory holds %d)", i, err, drivetest.Polled(&sbuf[63]))
				}
			}
			if n := srv.conn.drv.h.Driven.Load() - before; n < rounds/2 {
				t.Fatalf("the server's goroutine ran the receive in %d of %d rounds", n, rounds)
			}
			// a round allocates nothing: the Write's post, and DriveReceive with the
			// same context and condition each time (counted without the race detector)
			if raceEnabled {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wr := &rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 64)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}
			i := rounds
			allocs := testing.AllocsPerRun(100, func() {
				i++
				want.Store(uint32(i))
				cbuf[63] = byte(i)
				if err := cli.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				if err := srv.qp.DriveReceive(ctx, until); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per round", allocs)
			}
		})
	}
}

// TestQPDriveReceiveEnds: DriveReceive returns ctx's error when its context ends (also
// in a spin longer than the context), ErrQPState when the peer's QP goes away,
// ErrDriveBusy beside another, and ErrNoDriver without the mode.
func TestQPDriveReceiveEnds(t *testing.T) {
	never := func() bool { return false }
	for _, spin := range spins {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) {
			noLeak(t)
			cli, srv := drivePair(t, false, time.Second, spin)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			t0 := time.Now()
			err := srv.qp.DriveReceive(ctx, never)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 10*time.Second {
				t.Fatalf("context end: %v after %v", err, time.Since(t0))
			}
			got := make(chan error, 2)
			go func() { got <- srv.qp.DriveReceive(context.Background(), never) }()
			for deadline := time.Now().Add(10 * time.Second); srv.conn.drv.h.Driven.Load() < 2; {
				if time.Now().After(deadline) {
					t.Fatal("the second DriveReceive never ran the receive")
				}
				time.Sleep(time.Millisecond)
			}
			if err := srv.qp.DriveReceive(context.Background(), never); !errors.Is(err, rnic.ErrDriveBusy) {
				t.Fatalf("beside another: %v", err)
			}
			_ = cli.qp.Destroy()
			select {
			case err := <-got:
				if !errors.Is(err, rnic.ErrQPState) {
					t.Fatalf("peer gone: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("DriveReceive did not end when the peer's QP went away")
			}
		})
	}
	noLeak(t)
	cli, _ := newPair(t, &pairOpts{})
	if err := cli.qp.DriveReceive(context.Background(), never); !errors.Is(err, rnic.ErrNoDriver) {
		t.Fatalf("without WaitDrivesReceive: %v", err)
	}
}

// TestQPDriveReceiveBesideWait: one goroutine waits on the server's receive CQ for SENDs
// while another drives the receive for each Write in turn; the receive goes back and forth
// between them, each woken when the other stops driving, and both see everything the
// client sends, interleaved.
func TestQPDriveReceiveBesideWait(t *testing.T) {
	noLeak(t)
	cli, srv := drivePair(t, false, time.Second, 0)
	cmr, cbuf := cli.reg(t, 128, allAccess)
	smr, sbuf := srv.reg(t, 128, allAccess)
	const rounds = 120 // within the receive queue's default depth
	for i := range rounds {
		if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{smr.SGE(64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waits := make(chan error, 1)
	go func() {
		var wc [1]rnic.Completion
		for i := range rounds {
			if _, err := srv.rcq.Wait(ctx, wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
				waits <- fmt.Errorf("receive %d: %v %v", i, err, wc[0].Status)
				return
			}
		}
		waits <- nil
	}()
	drives := make(chan error, 1)
	go func() { // a DriveReceive per Write, as write_lat polls: the receive is lent in between
		for i := 1; i <= rounds; i++ {
			if err := srv.qp.DriveReceive(ctx, func() bool { return drivetest.Polled(&sbuf[0]) >= byte(i) }); err != nil {
				drives <- fmt.Errorf("write %d: %w", i, err)
				return
			}
		}
		drives <- nil
	}()
	for i := 1; i <= rounds; i++ {
		cbuf[0] = byte(i)
		if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 1)},
			RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(64, 8)}}); err != nil {
			t.Fatal(err)
		}
		expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
	}
	for _, c := range []chan error{waits, drives} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}
