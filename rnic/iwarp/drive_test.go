package iwarp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/drivetest"
	"github.com/softrnic/softrnic/rnic"
)

// drivePair connects two QPs whose devices let CQ waiters drive the receive, spinning on
// an empty socket for spin (rnic.Config.ReceiveSpin).
func drivePair(t *testing.T, shared bool, hold, spin time.Duration) (cli, srv *side) {
	t.Helper()
	return newPair(t, &pairOpts{dev: rnic.Config{WaitDrivesReceive: hold, ReceiveSpin: spin}, sharedCQ: shared,
		cliP: ConnParam{IRD: 8, ORD: 8}, srvP: ConnParam{IRD: 8, ORD: 8}})
}

// TestDriveReceivePingPong: SENDs both ways with each side's Wait driving its receive;
// the payloads arrive intact. With a long hold the Waits ran the receive themselves
// (after the one hand-over from each connection's goroutine); with a 1 ms one the
// connections' goroutines also take it back and hand it over again during the run. With
// a spin (rnic.Config.ReceiveSpin) replies are found by spinning Waits.
func TestDriveReceivePingPong(t *testing.T) {
	for _, c := range []struct{ hold, spin time.Duration }{{time.Second, 0}, {time.Millisecond, 0}, {time.Second, 2 * time.Millisecond}} {
		t.Run(fmt.Sprintf("hold=%v,spin=%v", c.hold, c.spin), func(t *testing.T) { testDrivePingPong(t, c.hold, c.spin) })
	}
}

// spins is the ReceiveSpin of the tests below: none, and one longer than their
// deadlines, so that a spin that ignored what ends a Wait or a connection fails them.
var spins = []time.Duration{0, time.Minute}

func testDrivePingPong(t *testing.T, hold, spin time.Duration) {
	noLeak(t)
	cli, srv := drivePair(t, false, hold, spin)
	const rounds = 2000
	cmr, cbuf := cli.reg(t, 128, allAccess)
	smr, sbuf := srv.reg(t, 128, allAccess)
	drivetest.PingPong(t, drivetest.End{QP: cli.qp, RCQ: cli.rcq, MR: cmr, Buf: cbuf}, drivetest.End{QP: srv.qp, RCQ: srv.rcq, MR: smr, Buf: sbuf},
		rounds, func() string { return fmt.Sprintf("client conn: %v; server conn: %v", cli.conn.Err(), srv.conn.Err()) })
	for _, s := range []*side{cli, srv} {
		d := s.conn.drv
		t.Logf("hand-overs %d, reclaims %d, driven Waits %d", d.h.Lent.Load(), d.h.Reclaims.Load(), d.h.Driven.Load())
		if d.h.Lent.Load() == 0 || d.h.Driven.Load() == 0 || hold == time.Second && d.h.Driven.Load() < rounds/2 {
			t.Errorf("hand-overs %d, driven Waits %d of %d rounds", d.h.Lent.Load(), d.h.Driven.Load(), rounds)
		}
		st := s.qp.Counters().Snapshot()
		t.Logf("spins that found data %d, that ran out %d", st.SpinHits, st.SpinTimeouts)
		if spin > 0 && st.SpinHits == 0 || spin == 0 && st.SpinHits+st.SpinTimeouts > 0 {
			t.Errorf("spin %v: %d spins found data, %d ran out", spin, st.SpinHits, st.SpinTimeouts)
		}
	}
}

// TestDriveReceiveReclaim: after its Waits stop, a side's connection goroutine takes the
// receive back, so the peer's Reads of its memory are answered without any Wait.
func TestDriveReceiveReclaim(t *testing.T) {
	for _, spin := range spins {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) { testDriveReclaim(t, spin) })
	}
}

func testDriveReclaim(t *testing.T, spin time.Duration) {
	noLeak(t)
	cli, srv := drivePair(t, false, 20*time.Millisecond, spin)
	cmr, cbuf := cli.reg(t, 4096, allAccess)
	smr, sbuf := srv.reg(t, 4096, allAccess)
	// a Wait with nothing to come takes the server's receive over and drives it
	takeReceive(t, srv)
	copy(sbuf, bytes.Repeat([]byte("reclaim!"), 512))
	for i := range 20 { // nobody waits on the server now
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cmr.SGE(0, 4096)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
		expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
		if !bytes.Equal(cbuf, sbuf) {
			t.Fatal("read data differs")
		}
	}
	if srv.conn.drv.h.Reclaims.Load() == 0 {
		t.Fatal("the server's receive was not taken back")
	}
	// and a later Wait gets it again
	takeReceive(t, srv)
}

// takeReceive makes Waits on s's receive CQ until one has run the receive.
func takeReceive(t *testing.T, s *side) {
	t.Helper()
	drivetest.TakeReceive(t, s.rcq, s.qp, func() uint64 { return s.conn.drv.h.Driven.Load() })
}

// TestDriveReceiveCancelMidMessage: Waits whose contexts end while a large SEND is
// arriving leave it half read; the next Wait (or the connection's goroutine) goes on
// from there and the message arrives intact. Whether a context ends mid-message depends
// on scheduling (under load the whole message can be read before a 50 µs timer fires),
// so the SEND is repeated, up to five times, until one attempt had a Wait end by its
// context; every attempt's message must arrive intact.
func TestDriveReceiveCancelMidMessage(t *testing.T) {
	for _, spin := range spins {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) { testDriveCancelMidMessage(t, spin) })
	}
}

func testDriveCancelMidMessage(t *testing.T, spin time.Duration) {
	noLeak(t)
	cli, srv := drivePair(t, false, time.Second, spin)
	const size = 8 << 20
	cmr, cbuf := cli.reg(t, size, allAccess)
	smr, sbuf := srv.reg(t, size, allAccess)
	cancelled := 0
	for attempt := 0; attempt < 5 && cancelled == 0; attempt++ {
		for i := range cbuf {
			cbuf[i] = byte(i*7 + i>>12 + attempt)
		}
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(attempt), SGL: []rnic.SGE{smr.SGE(0, size)}})
		takeReceive(t, srv) // a first Wait takes the receive over
		if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		var wc [1]rnic.Completion
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
			n, err := srv.rcq.Wait(ctx, wc[:])
			cancel()
			if n == 1 {
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			cancelled++
			if time.Now().After(deadline) {
				t.Fatal("the message never completed")
			}
		}
		expect(t, wc[0], rnic.WCRecv, rnic.StatusSuccess)
		if wc[0].WRID != uint64(attempt) || wc[0].ByteLen != size || !bytes.Equal(sbuf, cbuf) {
			t.Fatalf("attempt %d: receive %d of %d bytes, equal %v", attempt, wc[0].ByteLen, size, bytes.Equal(sbuf, cbuf))
		}
		expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
		t.Logf("attempt %d: %d Waits ended by their context; driven %d", attempt, cancelled, srv.conn.drv.h.Driven.Load())
	}
	if cancelled == 0 {
		t.Fatal("in five SENDs of 8 MiB no Wait ended while the message was arriving")
	}
}

// TestDriveReceiveKick: on a CQ shared by send and receive, a send completion made by
// the connection's sender while a Wait drives the receive (nothing arrives) ends the Wait.
func TestDriveReceiveKick(t *testing.T) {
	for _, spin := range spins {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) { testDriveKick(t, spin) })
	}
}

func testDriveKick(t *testing.T, spin time.Duration) {
	noLeak(t)
	cli, srv := drivePair(t, true, time.Second, spin)
	cmr, _ := cli.reg(t, 4<<20, allAccess)
	smr, _ := srv.reg(t, 4<<20, allAccess)
	for i := range 5 {
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{smr.SGE(0, 4<<20)}})
	}
	takeReceive(t, cli) // hand the client's receive to its Waits first
	for i := range 5 {
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 4<<20)}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wc [1]rnic.Completion
		n, err := cli.scq.Wait(ctx, wc[:])
		if ctx.Err() != nil { // the completion did not end the Wait: its context did
			t.Fatalf("send %d: the Wait ended with its context (n=%d err=%v)", i, n, err)
		}
		cancel()
		expect(t, wc[0], rnic.WCSend, rnic.StatusSuccess)
		expect(t, wait(t, srv.scq), rnic.WCRecv, rnic.StatusSuccess)
	}
	if cli.conn.drv.h.Driven.Load() == 0 {
		t.Fatal("no Wait drove the client's receive")
	}
}

// TestDriveReceivePeerGone: a Wait driving the receive returns the flushed receives when
// the peer's QP is destroyed, and when its own is.
func TestDriveReceivePeerGone(t *testing.T) {
	for _, spin := range spins {
		t.Run(fmt.Sprint("spin=", spin), func(t *testing.T) { testDrivePeerGone(t, spin) })
	}
}

func testDrivePeerGone(t *testing.T, spin time.Duration) {
	noLeak(t)
	for _, own := range []bool{false, true} {
		cli, srv := drivePair(t, false, time.Second, spin)
		mr, _ := srv.reg(t, 64, allAccess)
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 9, SGL: []rnic.SGE{mr.SGE(0, 64)}})
		got := make(chan rnic.Completion, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wc [1]rnic.Completion
			if n, err := srv.rcq.Wait(ctx, wc[:]); n != 1 || err != nil {
				wc[0].Status = rnic.StatusGeneralErr
			}
			got <- wc[0]
		}()
		for deadline := time.Now().Add(10 * time.Second); srv.conn.drv.h.Driven.Load() == 0; { // until the Wait drives the receive
			if time.Now().After(deadline) {
				t.Fatal("the Wait never drove the receive")
			}
			time.Sleep(time.Millisecond)
		}
		if own {
			_ = srv.qp.Destroy()
		} else {
			_ = cli.qp.Destroy()
		}
		if c := <-got; c.Status != rnic.StatusWRFlushErr || c.WRID != 9 {
			t.Fatalf("own %v: completion %+v: want receive 9 flushed", own, c)
		}
	}
}
