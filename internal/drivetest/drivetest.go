// Package drivetest holds what rnic.Config.WaitDrivesReceive's tests in rnic/iwarp and
// rnic/rocev2 share: a SEND ping-pong over a connected QP pair, Waits that take a
// receive over, and reads of memory that RDMA Writes place while it is polled.
package drivetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// End is one side: its QP, the CQ its receives complete on, and a registered buffer of
// at least 128 bytes (its MR and bytes): bytes 0-63 are sent, 64-127 received.
type End struct {
	QP  *rnic.QP
	RCQ *rnic.CQ
	MR  *rnic.MR
	Buf []byte
}

// PingPong runs rounds round trips from cli to srv and back: the client sends 64 bytes,
// the server echoes them with the first byte incremented. It fails t at the first receive
// that does not succeed or echo that differs; peerState names the connections' states
// for the failure message.
func PingPong(t testing.TB, cli, srv End, rounds int, peerState func() string) {
	t.Helper()
	recv := func(i int) error {
		return srv.QP.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{srv.MR.SGE(64, 64)}})
	}
	if err := recv(0); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		var wc [1]rnic.Completion
		for i := 0; i < rounds; i++ {
			if _, err := srv.RCQ.Wait(context.Background(), wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
				errc <- fmt.Errorf("server receive %d: %v %+v", i, err, wc[0])
				return
			}
			copy(srv.Buf[:64], srv.Buf[64:128])
			srv.Buf[0]++
			if i+1 < rounds { // before the echo: the client's next SEND may follow it at once
				if err := recv(i + 1); err != nil {
					errc <- err
					return
				}
			}
			if err := srv.QP.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{srv.MR.SGE(0, 64)}}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var wc [1]rnic.Completion
	for i := 0; i < rounds; i++ {
		if err := cli.QP.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{cli.MR.SGE(64, 64)}}); err != nil {
			t.Fatal(err)
		}
		for j := range 64 {
			cli.Buf[j] = byte(i + j)
		}
		if err := cli.QP.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cli.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.RCQ.Wait(context.Background(), wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
			t.Fatalf("round %d: %v %+v; %s", i, err, wc[0], peerState())
		}
		want := append([]byte{byte(i) + 1}, cli.Buf[1:64]...)
		if !bytes.Equal(cli.Buf[64:128], want) {
			t.Fatalf("round %d: echo %x, want %x", i, cli.Buf[64:128], want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TakeReceive makes Waits on cq, where nothing is to come, until one has run the receive
// (driven, the transport's count of Waits that ran it, moved): the hand-over may take
// longer than one Wait on a loaded machine (10 s at most). qp, the QP whose receive it
// is, must have counted the same runs (rnic.Counters.WaitsDriven), and so must its
// device.
func TakeReceive(t testing.TB, cq *rnic.CQ, qp *rnic.QP, driven func() uint64) {
	t.Helper()
	before := driven()
	qpBefore, devBefore := qp.Counters().WaitsDriven.Load(), qp.Device().Counters().WaitsDriven.Load()
	for deadline := time.Now().Add(10 * time.Second); driven() == before; {
		if time.Now().After(deadline) {
			t.Fatal("no Wait ran the receive")
		}
		IdleWait(t, cq)
	}
	runs := driven() - before
	if q, d := qp.Counters().WaitsDriven.Load()-qpBefore, qp.Device().Counters().WaitsDriven.Load()-devBefore; q != runs || d != runs {
		t.Fatalf("the transport counted %d runs of the receive by Waits, the QP's WaitsDriven %d, the device's %d", runs, q, d)
	}
}

// IdleWait waits 5 ms on cq, where nothing is to come.
func IdleWait(t testing.TB, cq *rnic.CQ) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if n, err := cq.Wait(ctx, make([]rnic.Completion, 1)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Wait: n=%d err=%v", n, err)
	}
}

// Polled reads a byte that RDMA Writes place while the caller polls it, as a program
// polling registered memory does: a fresh load each call, outside the race detector (the
// placement may run on the transport's goroutine, with no synchronisation it sees).
//
//go:norace
//go:noinline
func Polled(p *byte) byte { return *p }

// PolledEqual compares memory that RDMA Writes place with want, byte by byte as Polled
// reads it.
func PolledEqual(got, want []byte) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if Polled(&got[i]) != want[i] {
			return false
		}
	}
	return true
}
