package rocev2

// The endpoint's receive run by a goroutine blocked in rnic.CQ.Wait
// (rnic.Config.WaitDrivesReceive), while one RC connection uses the endpoint. Without it
// a message that completes a Wait reaches the waiter through a wake-up: the endpoint's
// receive goroutine reads it, queues the completion and signals the waiter's eventfd; the
// runtime then switches to the waiter, and when the peer's ACK is made ready by the same
// poll, wakes an idle thread besides. A waiter that reads the socket itself pays what a
// program reading a plain UDP socket pays, plus the ACK it sends.
//
// A datagram receive keeps no state between two recvmmsg calls that a goroutine switch
// would have to carry (iwarp's stream receive needs a coroutine for that), so whoever
// holds the receive runs the endpoint's own loop body (UDPLink.recvEach) until its stop
// function says to stop: the endpoint's goroutine when a Wait asks for the receive, a
// Wait when it has what it waited for. How the receive passes between them is
// internal/handover's protocol; the kick is a read deadline in the past. A change of the
// endpoint's connections (a second one, or the end of the one) takes a lent receive back
// at once, and so does the endpoint's Close.

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/handover"
)

// rxDrive is an endpoint's receive as its goroutine and the Waits share it.
type rxDrive struct {
	e       *Endpoint
	l       eachLink                     // the endpoint's link
	h       *handover.Holder             // who holds the receive
	recv    func(stop func() bool) error // the receive loop's body (recvEach with its batch)
	runWait func(ready, stop func() bool) handover.Result
	sole    atomic.Pointer[Conn] // the endpoint's only connection, with no UD QP beside it; else nil (connsChanged)

	// Used only by the goroutine running the receive (the hand-over orders them).
	r       *rxCtx      // the receive loop's batch context
	waiting bool        // a Wait runs the receive
	owed    *Conn       // the connection whose ACK a batch deferred (deferAck)
	stop    func() bool // the current run's stop function
	flush   func() bool // stopFlush, made once
}

// DriveStats counts what rnic.Config.WaitDrivesReceive did on an endpoint.
type DriveStats struct {
	Driven   uint64 // CQ Waits (and QP.DriveReceive calls) that ran the endpoint's receive
	Lent     uint64 // hand-overs of the receive from the endpoint's goroutine to a Wait
	Reclaims uint64 // receives the endpoint's goroutine took back: no Wait came for the hold time, or the endpoint's connections changed
}

// DriveStats returns the endpoint's WaitDrivesReceive counters (zero without the mode).
func (e *Endpoint) DriveStats() DriveStats {
	d := e.drv
	if d == nil {
		return DriveStats{}
	}
	return DriveStats{Driven: d.h.Driven.Load(), Lent: d.h.Lent.Load(), Reclaims: d.h.Reclaims.Load()}
}

func newRxDrive(e *Endpoint, hold time.Duration, l eachLink) *rxDrive {
	d := &rxDrive{e: e, l: l}
	d.h = handover.New(hold, d.kick, e.closed.Load, e.quit)
	d.runWait = d.waitRun
	d.flush = d.stopFlush
	return d
}

// kick interrupts the socket wait of whoever runs the receive.
func (d *rxDrive) kick() { d.l.setRecvDeadline(time.Unix(1, 0)) }

// start gives the drive the receive loop's batch context and body, on the endpoint's
// goroutine before it first runs it. A Wait runs it only once that goroutine lent it, so
// after.
func (d *rxDrive) start(r *rxCtx, recv func(stop func() bool) error) { d.r, d.recv = r, recv }

// pump runs the receive until stop says to stop (errRecvStopped) or the link fails or
// closes. A kick (a read deadline in the past) is taken back and the receive goes on: the
// next time the socket is found drained, stop is asked.
func (d *rxDrive) pump(stop func() bool) error {
	d.stop = stop
	defer func() { d.stop = nil }()
	for {
		err := d.recv(d.flush)
		d.h.Working()
		if errors.Is(err, os.ErrDeadlineExceeded) && !d.e.closed.Load() {
			d.l.setRecvDeadline(time.Time{})
			continue
		}
		return err
	}
}

// deferAck reports whether the receive batch ending (Endpoint.endBatch) leaves c's
// coalesced ACK owed instead of sending it: when a Wait runs the receive, c is the
// endpoint's only connection, no READ response is queued ahead of the ACK (it would then
// follow the response, and acknowledges nothing the response does not), and no ACK is
// owed from the batch before. The ACK then leaves last in the next batch of packets c
// sends (Conn.owedAck), which in a request/response exchange is the answer the Waiting
// program posts on seeing its message: one system call and, through UDP GSO, one datagram
// for the peer to receive, instead of two each. When the receive is next run and finds
// the socket empty without what it waits for, it sends the ACK itself before it blocks
// (stopFlush); the end of the connection sends it (Conn.step); and an ACK left owed
// longer than ackDeferMax (an eighth of the ACK timeout) is sent by a timer
// (Conn.ackTick). An ACK is deferred across one batch at most: a batch that ends while the
// last one's ACK is still owed sends it, so that a stream whose every message completes a
// Wait still acknowledges every other batch, rather than only when the receive finds the
// socket empty once the sender's window ran out. d may be nil (no drive). The caller
// holds c.mu.
func (d *rxDrive) deferAck(c *Conn) bool {
	if d == nil || !d.waiting || !c.ackPending || c.ackOwed || c.rdLen > 0 || c.dead || d.sole.Load() != c {
		return false
	}
	d.owed = c
	c.deferred()
	return true
}

// stopFlush is the stop function the receive asks (after each batch, and before it would
// block for the socket): the run's own; when that says go on, a deferred ACK still owed
// (deferAck) is sent before the receive goes on or blocks. d.owed is only a hint that
// spares the lock when no batch deferred: the connection's state says whether it is
// still owed (flushAck sends nothing once owedAck took it).
func (d *rxDrive) stopFlush() bool {
	if d.stop() {
		return true
	}
	if c := d.owed; c != nil {
		d.owed = nil
		c.mu.Lock()
		if !c.inBatch {
			c.flushAck(d.r)
		}
		c.mu.Unlock()
		d.e.flushCtl(d.r)
	}
	return false
}

// waitRun is a Wait's run of the receive (handover.Holder.Drive). An error other than the
// stop goes back to the endpoint's goroutine, which meets it again and handles it
// (back-off, failLink, or its end).
func (d *rxDrive) waitRun(_, stop func() bool) handover.Result {
	d.waiting = true
	defer func() { d.waiting = false }()
	if err := d.pump(stop); err != errRecvStopped {
		return handover.Return
	}
	return handover.Keep
}

// connsChanged tells the drive, if any, that the endpoint's connections or UD QPs changed
// (called after each change): it notes whether one connection alone uses the endpoint,
// and a lent receive goes back to the endpoint's goroutine, since a second connection's
// packets must not wait for the first one's Waits, nor anything wait for the Waits of a
// connection that ended.
func (e *Endpoint) connsChanged() {
	d := e.drv
	if d == nil {
		return
	}
	e.mu.RLock()
	var sole *Conn
	if len(e.conns) == 1 && len(e.ud) == 0 {
		for _, c := range e.conns {
			sole = c
		}
	}
	d.sole.Store(sole) // under the lock: the stores follow the changes' order
	e.mu.RUnlock()
	d.h.Reclaim()
}

// canDrive implements Conn.CanDriveReceive.
func (d *rxDrive) canDrive(c *Conn) bool {
	return d.sole.Load() == c && !d.e.closed.Load() && !d.h.Ended()
}
