package rnic

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrNoDriver is returned by QP.DriveReceive for a QP whose receive its caller cannot run:
// the device's Config.WaitDrivesReceive is 0, or the QP's transport cannot run it
// (ReceiveDriver.CanDriveReceive: iWARP over a connection that is not a kernel TCP socket;
// RoCEv2 over a link other than a Linux UDPLink, or on an endpoint that other QPs use too).
var ErrNoDriver = errors.New("rnic: the QP's receive cannot be driven by its caller (Config.WaitDrivesReceive)")

// ErrDriveBusy is returned by QP.DriveReceive while another DriveReceive of the QP runs.
var ErrDriveBusy = errors.New("rnic: another DriveReceive of the QP is running")

// qpDrive is the state of a QP's DriveReceive, made at its first call, and its Waker. The
// ready function and the kick's (the transport's Kick) are method values made once (a QP's
// transport does not change once attached), so that a call allocates nothing.
type qpDrive struct {
	busy  atomic.Bool
	until func() bool
	ctx   context.Context
	woken chan struct{} // the connection's goroutine handed the receive over
	ready func() bool
	kick  ctxWatch // the end of the caller's context calls the transport's Kick (under QP.mu; stopped at Destroy)
}

func (s *qpDrive) isReady() bool { return s.until() || s.ctx.Err() != nil }

// Wake implements Waker.
func (s *qpDrive) Wake() {
	select {
	case s.woken <- struct{}{}:
	default:
	}
}

// DriveReceive runs the QP's receive on the calling goroutine until until reports true,
// for a program that waits for what has no completion: an RDMA Write placed in its
// memory (RFC 5040 §4.3, IBTA §9.4.3; a program polls the memory, as perftest's
// ib_write_lat does). With Config.WaitDrivesReceive the goroutine that polls then places
// the Writes itself, with no wake-up of the connection's goroutine on the way (and with
// Config.ReceiveSpin it busy-polls the socket before blocking). until is called on the
// calling goroutine, before anything is read and each time the receive has processed what
// arrived; a condition that something else makes true is seen at the next arrival. Until
// the receive is handed over, the connection's goroutine may be placing data while until
// reads it: read polled memory as any RDMA target is read while it may change (a fresh
// load each time; sync/atomic where the race detector watches). The receive stays with
// the caller between calls, as with CQ.Wait (WaitDrivesReceive's hold time).
//
// It returns nil once until reports true, ctx's error when ctx ends first, ErrQPState
// when the QP's connection has ended (the QP is in Error), ErrNoDriver when the QP's
// receive cannot be driven, and ErrDriveBusy during another DriveReceive of the QP.
// Completions made meanwhile go to the QP's CQs as always. A goroutine locked to its
// thread must not call it (see Config.WaitDrivesReceive).
func (q *QP) DriveReceive(ctx context.Context, until func() bool) error {
	if q.dev.cfg.WaitDrivesReceive <= 0 {
		return ErrNoDriver
	}
	d, ok := q.transport().(ReceiveDriver)
	if !ok || !d.CanDriveReceive() {
		return ErrNoDriver
	}
	q.mu.Lock()
	s := q.drive
	if s == nil {
		s = &qpDrive{woken: make(chan struct{}, 1), kick: ctxWatch{f: d.Kick}}
		s.ready = s.isReady
		q.drive = s
	}
	if !s.busy.CompareAndSwap(false, true) {
		q.mu.Unlock()
		return ErrDriveBusy
	}
	if !q.destroyed {
		s.kick.watch(ctx)
	}
	q.mu.Unlock()
	defer s.busy.Store(false)
	s.until, s.ctx = until, ctx
	defer func() { s.until, s.ctx = nil, nil }()
	for {
		if until() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.CanDriveReceive() {
			return ErrNoDriver
		}
		if d.DriveReceive(s.ready, s) {
			q.countDriven()
			continue
		}
		// The connection's goroutine, or a CQ's Wait, holds the receive: wake comes
		// once it is handed over; or the receive has ended with the connection.
		select {
		case <-s.woken:
		case <-q.doneCh:
			return ErrQPState
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
