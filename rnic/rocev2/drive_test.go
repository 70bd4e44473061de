package rocev2

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

// drivePair connects two endpoints over loopback UDP (GSO and GRO on) whose devices let
// CQ waiters run the endpoint's receive, with hold as rnic.Config.WaitDrivesReceive.
func drivePair(t *testing.T, hold time.Duration) (cli, srv *side) {
	t.Helper()
	return udpPairDev(t, "127.0.0.1:0", &UDPOptions{GSO: true, GRO: true}, testConfig(), rnic.Config{WaitDrivesReceive: hold})
}

// TestDriveReceivePingPong: SENDs both ways with each side's receive-CQ Wait running its
// endpoint's receive; the payloads arrive intact. With a long hold the Waits ran the
// receive themselves after the one hand-over from each endpoint's goroutine; with a 1 ms
// hold the endpoints' goroutines also take it back and hand it over again.
func TestDriveReceivePingPong(t *testing.T) {
	for _, hold := range []time.Duration{time.Second, time.Millisecond} {
		t.Run(fmt.Sprint("hold=", hold), func(t *testing.T) { testDrivePingPong(t, hold) })
	}
}

func testDrivePingPong(t *testing.T, hold time.Duration) {
	cli, srv := drivePair(t, hold)
	const rounds = 2000
	cmr, cbuf := cli.reg(t, 128, allAccess)
	smr, sbuf := srv.reg(t, 128, allAccess)
	drivetest.PingPong(t, drivetest.End{QP: cli.qp, RCQ: cli.rcq, MR: cmr, Buf: cbuf}, drivetest.End{QP: srv.qp, RCQ: srv.rcq, MR: smr, Buf: sbuf},
		rounds, func() string { return fmt.Sprintf("client conn: %v; server conn: %v", cli.conn.Err(), srv.conn.Err()) })
	for _, s := range []*side{cli, srv} {
		st := s.ep.DriveStats()
		s.conn.mu.Lock()
		joined := s.conn.ackJoined
		s.conn.mu.Unlock()
		deferred := s.ep.AcksDeferred.Load()
		t.Logf("%+v; ACKs deferred %d, joined to a send %d", st, deferred, joined)
		if st.Lent == 0 || st.Driven == 0 || hold == time.Second && st.Driven < rounds/2 {
			t.Errorf("%+v over %d rounds", st, rounds)
		}
		// Each side's Wait gets the message it waits for and defers its ACK, which then
		// leaves with the message the program posts in answer (rxDrive.deferAck).
		if hold == time.Second && (deferred < rounds/2 || joined < rounds/2) {
			t.Errorf("ACKs deferred %d, joined to a send %d, over %d rounds", deferred, joined, rounds)
		}
	}
}

// TestDeferredAckSent: an ACK that a Wait deferred (rxDrive.deferAck) still reaches the
// sender, whose signaled SEND completes successfully with no retransmission, when the
// program that received the SEND posts nothing: it Waits again (the receive sends the
// ACK before it waits for the socket), stops waiting (the timer sends it after
// ackDeferMax; or, with a hold shorter than that, the endpoint's goroutine takes the
// receive back and sends it), disconnects, or closes the endpoint (the end of the
// connection sends it). Each case but "idle" keeps the timer out of it.
func TestDeferredAckSent(t *testing.T) {
	for _, end := range []string{"wait", "idle", "reclaim", "disconnect", "close"} {
		t.Run(end, func(t *testing.T) {
			hold := time.Minute // longer than the test
			if end == "reclaim" {
				hold = 2 * time.Millisecond
			}
			cli, srv := drivePair(t, hold)
			if end != "idle" {
				srv.conn.mu.Lock()
				srv.conn.ackDeferMax = time.Hour
				srv.conn.mu.Unlock()
			}
			cmr, _ := cli.reg(t, 64, allAccess)
			got := drivingWait(t, srv, 1)
			if err := cli.qp.PostSend(&rnic.SendWR{WRID: 9, Opcode: rnic.OpSend, Flags: rnic.Signaled,
				SGL: []rnic.SGE{cmr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			select {
			case c := <-got:
				if c.Status != rnic.StatusSuccess {
					t.Fatalf("server receive: %+v", c)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server's Wait did not get the SEND")
			}
			if n := srv.ep.AcksDeferred.Load(); n != 1 {
				t.Fatalf("ACKs deferred: %d, want 1", n)
			}
			switch end {
			case "wait":
				drivetest.IdleWait(t, srv.rcq)
			case "disconnect":
				srv.conn.Disconnect(true)
			case "close":
				_ = srv.ep.Close()
			}
			if c := wait(t, cli.scq, 1)[0]; c.WRID != 9 || c.Status != rnic.StatusSuccess {
				t.Fatalf("client SEND: %+v", c)
			}
			if n := cli.qp.Counters().Retransmits.Load(); n != 0 {
				t.Fatalf("the client retransmitted %d packets: the ACK was late", n)
			}
			want := uint64(0) // only "idle" leaves the ACK to the timer
			if end == "idle" {
				want = 1
			}
			if n := srv.ep.AckDeferTimeouts.Load(); n != want {
				t.Fatalf("ACKs the timer sent: %d, want %d", n, want)
			}
		})
	}
}

// TestDriveReceiveReclaim: after its Waits stop, an endpoint's goroutine takes the
// receive back, so the peer's READs of its memory are answered with no Wait running; a
// later Wait gets the receive again.
func TestDriveReceiveReclaim(t *testing.T) {
	cli, srv := drivePair(t, 20*time.Millisecond)
	cmr, cbuf := cli.reg(t, 4096, allAccess)
	smr, sbuf := srv.reg(t, 4096, allAccess)
	copy(sbuf, bytes.Repeat([]byte("reclaim!"), 512)) // before the hand-overs, which order it before the READs (-race)
	takeReceive(t, srv)
	for i := range 20 { // nobody waits on the server now
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cmr.SGE(0, 4096)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusSuccess {
			t.Fatalf("READ %d: %+v", i, c)
		}
		if !bytes.Equal(cbuf, sbuf) {
			t.Fatal("read data differs")
		}
	}
	if st := srv.ep.DriveStats(); st.Reclaims == 0 {
		t.Fatalf("the server's receive was not taken back: %+v", st)
	}
	takeReceive(t, srv)
}

// takeReceive makes Waits on s's receive CQ until one has run the receive.
func takeReceive(t *testing.T, s *side) {
	t.Helper()
	drivetest.TakeReceive(t, s.rcq, s.qp, func() uint64 { return s.ep.DriveStats().Driven })
}

// TestDriveReceiveSecondConn: a second connection on an endpoint takes a lent receive
// back at once (the hold here is a minute), and no Wait runs the endpoint's receive while
// two connections use it; both carry their SENDs. Once the second one ends, Waits run it
// again.
func TestDriveReceiveSecondConn(t *testing.T) {
	cli, srv := drivePair(t, time.Minute)
	takeReceive(t, srv)
	if !srv.conn.CanDriveReceive() {
		t.Fatal("CanDriveReceive false with one connection")
	}
	// The second QPs have CQs of their own: a CQ that two QPs used never drives a receive again.
	mk := func(s *side) (*rnic.QP, *rnic.CQ) {
		cq, _ := s.dev.CreateCQ(64)
		qp, err := s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 64}})
		if err != nil {
			t.Fatal(err)
		}
		return qp, cq
	}
	cqp, _ := mk(cli)
	sqp, scq2 := mk(srv)
	if _, err := cli.ep.Connect(cqp, ConnAttr{Remote: srv.ep.LocalAddr(), RemoteQPN: sqp.Num(), SendPSN: 7, RecvPSN: 9}); err != nil {
		t.Fatal(err)
	}
	sconn, err := srv.ep.Connect(sqp, ConnAttr{Remote: cli.ep.LocalAddr(), RemoteQPN: cqp.Num(), SendPSN: 9, RecvPSN: 7})
	if err != nil {
		t.Fatal(err)
	}
	st := srv.ep.DriveStats()
	if st.Reclaims != 1 {
		t.Fatalf("after the second Connect: %+v, want 1 reclaim", st)
	}
	if srv.conn.CanDriveReceive() || sconn.CanDriveReceive() {
		t.Fatal("CanDriveReceive true with two connections")
	}
	if err := srv.qp.DriveReceive(context.Background(), func() bool { return false }); !errors.Is(err, rnic.ErrNoDriver) {
		t.Fatalf("QP.DriveReceive with two connections: %v, want ErrNoDriver", err)
	}
	cmr, _ := cli.reg(t, 64, allAccess)
	smr, _ := srv.reg(t, 128, allAccess)
	for i, q := range []*rnic.QP{srv.qp, sqp, srv.qp, sqp} {
		if err := q.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{smr.SGE(64, 64)}}); err != nil {
			t.Fatal(err)
		}
		src, cq := cli.qp, srv.rcq
		if q == sqp {
			src, cq = cqp, scq2
		}
		if err := src.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if c := wait(t, cq, 1)[0]; c.Status != rnic.StatusSuccess || c.WRID != uint64(i) {
			t.Fatalf("SEND %d: %+v", i, c)
		}
	}
	if got := srv.ep.DriveStats(); got.Driven != st.Driven {
		t.Fatalf("Waits ran the receive of an endpoint with two connections: %+v, then %+v", st, got)
	}
	if err := sqp.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sconn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the second connection did not end")
	}
	if !srv.conn.CanDriveReceive() {
		t.Fatal("CanDriveReceive false once the second connection ended")
	}
	takeReceive(t, srv)
}

// TestDriveReceiveKick: a Wait running the receive, where nothing arrives, returns the
// flush completion that the connection's own goroutine queues when the QP is
// disconnected (the completion kicks it out of its socket wait).
func TestDriveReceiveKick(t *testing.T) {
	_, srv := drivePair(t, time.Minute)
	got := drivingWait(t, srv, 42)
	srv.conn.Disconnect(false)
	expectFlushed(t, got, 42)
}

// drivingWait posts a receive (wrid) on s's QP and starts a Wait on its receive CQ, where
// nothing is to come, and returns once that Wait runs the endpoint's receive. The channel
// gets what the Wait returned, then closes.
func drivingWait(t *testing.T, s *side, wrid uint64) <-chan rnic.Completion {
	t.Helper()
	mr, _ := s.reg(t, 64, allAccess)
	if err := s.qp.PostRecv(&rnic.RecvWR{WRID: wrid, SGL: []rnic.SGE{mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	takeReceive(t, s)
	got := make(chan rnic.Completion, 1)
	before := s.ep.DriveStats().Driven
	go func() {
		var wc [1]rnic.Completion
		if n, err := s.rcq.Wait(context.Background(), wc[:]); n == 1 && err == nil {
			got <- wc[0]
		}
		close(got)
	}()
	for deadline := time.Now().Add(10 * time.Second); s.ep.DriveStats().Driven == before; {
		if time.Now().After(deadline) {
			t.Fatal("the Wait did not run the receive")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return got
}

// expectFlushed checks that the Wait of drivingWait returned receive wrid flushed.
func expectFlushed(t *testing.T, got <-chan rnic.Completion, wrid uint64) {
	t.Helper()
	select {
	case c, ok := <-got:
		if !ok || c.WRID != wrid || c.Status != rnic.StatusWRFlushErr {
			t.Fatalf("Wait returned %+v (ok %v), want the flushed receive %d", c, ok, wrid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Wait running the receive did not return the flush completion")
	}
}

// TestDriveReceiveEndpointClose: closing the endpoint while a Wait runs its receive ends
// both: Close returns, and the Wait returns the flushed receive.
func TestDriveReceiveEndpointClose(t *testing.T) {
	_, srv := drivePair(t, time.Minute)
	got := drivingWait(t, srv, 7)
	closed := make(chan error, 1)
	go func() { closed <- srv.ep.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Endpoint.Close did not return while a Wait ran the receive")
	}
	expectFlushed(t, got, 7)
}

// TestQPDriveReceiveWrites: a program polling its memory for RDMA WRITEs runs the
// endpoint's receive with QP.DriveReceive and sees every WRITE placed; without
// WaitDrivesReceive the call is refused with ErrNoDriver.
func TestQPDriveReceiveWrites(t *testing.T) {
	cli, srv := drivePair(t, time.Second)
	cmr, cbuf := cli.reg(t, 4096, allAccess)
	smr, sbuf := srv.reg(t, 4096, allAccess)
	for i := 1; i <= 200; i++ {
		fill(cbuf, byte(i))
		cbuf[len(cbuf)-1] = byte(i) // the flag the target polls: placed last (one message, in PSN order)
		if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 4096)},
			RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := srv.qp.DriveReceive(ctx, func() bool { return drivetest.PolledEqual(sbuf[len(sbuf)-1:], cbuf[len(cbuf)-1:]) })
		cancel()
		if err != nil {
			t.Fatalf("WRITE %d: %v", i, err)
		}
		if !drivetest.PolledEqual(sbuf, cbuf) {
			t.Fatalf("WRITE %d: data differs", i)
		}
	}
	if st := srv.ep.DriveStats(); st.Driven == 0 {
		t.Fatalf("no DriveReceive ran the receive: %+v", st)
	}
	_, plain := udpPair(t, "127.0.0.1:0", &UDPOptions{GSO: true, GRO: true}, testConfig())
	if err := plain.qp.DriveReceive(context.Background(), func() bool { return false }); !errors.Is(err, rnic.ErrNoDriver) {
		t.Fatalf("without WaitDrivesReceive: %v, want ErrNoDriver", err)
	}
}
