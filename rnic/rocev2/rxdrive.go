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
// Wait when it has what it waited for.
//
// Who holds the receive: the endpoint's goroutine (drvOwn), a Wait running it (drvWait),
// the waiting goroutine between two Waits (drvLent), or nobody any more (drvFin: the
// endpoint's goroutine ended). A Wait that finds the endpoint's goroutine holding it asks
// for it (want) and kicks that goroutine out of its socket wait with a read deadline in
// the past; that goroutine lends the receive and wakes the Wait. A timer takes it back
// when no Wait started for between one and two hold durations, and so does a change of
// the endpoint's connections (a second one, or the end of the one).

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/wakers"
	"github.com/softrnic/softrnic/rnic"
)

const (
	drvOwn = iota
	drvWait
	drvLent
	drvFin
)

// rxDrive is an endpoint's receive as its goroutine and the Waits share it.
type rxDrive struct {
	e    *Endpoint
	hold time.Duration
	recv func(stop func() bool) error // the receive loop's body (recvEach with its batch)
	l    eachLink                     // the endpoint's link

	mu      sync.Mutex
	owner   int
	want    atomic.Bool   // a Wait asked for the receive
	wakes   wakers.List   // the callers waiting for the receive
	rch     chan struct{} // wakes the endpoint's goroutine in await
	gen     uint64        // driving Waits; the reclaim timer compares
	tickGen uint64
	timer   *time.Timer
	timerOn bool

	blocked atomic.Bool // a driving Wait waits for the socket: Kick must interrupt it
	ready   func() bool
	ownStop func() bool // method values, made once
	waitStp func() bool

	// Counters (Endpoint.DriveStats).
	driven   atomic.Uint64 // Waits that ran the receive
	lent     atomic.Uint64 // hand-overs from the endpoint's goroutine to a Wait
	reclaims atomic.Uint64 // receives taken back by the timer or a change of connections
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
	return DriveStats{Driven: d.driven.Load(), Lent: d.lent.Load(), Reclaims: d.reclaims.Load()}
}

func newRxDrive(e *Endpoint, hold time.Duration, l eachLink) *rxDrive {
	d := &rxDrive{e: e, hold: hold, l: l, rch: make(chan struct{}, 1)}
	d.ownStop, d.waitStp = d.ownerStop, d.waitStop
	return d
}

// start gives the drive the receive loop's body, on the endpoint's goroutine before it
// first runs it. A Wait runs it only once that goroutine lent it (drvLent), so after.
func (d *rxDrive) start(recv func(stop func() bool) error) {
	d.mu.Lock()
	d.recv = recv
	d.mu.Unlock()
}

// await blocks the endpoint's goroutine until it holds the receive; false when the
// receive has ended (the endpoint closed while a Wait held it).
func (d *rxDrive) await() bool {
	for {
		d.mu.Lock()
		switch d.owner {
		case drvOwn:
			d.mu.Unlock()
			return true
		case drvLent:
			if d.e.closed.Load() {
				d.owner = drvOwn
				d.mu.Unlock()
				return true
			}
		}
		quit := d.e.quit
		if d.owner == drvWait {
			quit = nil // the Wait returns it
		}
		d.mu.Unlock()
		select {
		case <-d.rch:
		case <-quit:
		}
	}
}

// pump runs the receive until stop says to stop (errRecvStopped) or the link fails or
// closes. A kick (a read deadline in the past) is taken back and the receive goes on: the
// next time the socket is found drained, stop is asked.
func (d *rxDrive) pump(stop func() bool) error {
	for {
		err := d.recv(stop)
		d.blocked.Store(false)
		if errors.Is(err, os.ErrDeadlineExceeded) && !d.e.closed.Load() {
			d.l.setRecvDeadline(time.Time{})
			continue
		}
		return err
	}
}

// ownerStop is the endpoint goroutine's stop: a Wait asked for the receive.
func (d *rxDrive) ownerStop() bool { return d.want.Load() }

// waitStop is a driving Wait's stop: its ready function. blocked is set first, so that a
// completion queued after ready looked finds it set and kicks.
func (d *rxDrive) waitStop() bool {
	d.blocked.Store(true)
	if d.ready() {
		d.blocked.Store(false)
		return true
	}
	return false
}

// lend gives the receive to the Wait that asked for it (on the endpoint's goroutine).
func (d *rxDrive) lend() {
	d.mu.Lock()
	d.owner = drvLent
	d.lent.Add(1)
	d.want.Store(false)
	w := d.wakes.Take()
	d.tickGen = d.gen
	if !d.timerOn {
		d.timerOn = true
		if d.timer == nil {
			d.timer = time.AfterFunc(d.hold, d.tick)
		} else {
			d.timer.Reset(d.hold)
		}
	}
	d.mu.Unlock()
	w.Wake()
}

// tick takes the receive back when no Wait started since the last tick.
func (d *rxDrive) tick() {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.owner {
	case drvLent:
		if d.gen == d.tickGen {
			d.reclaimLocked()
			return
		}
	case drvWait:
	default:
		d.timerOn = false
		return
	}
	d.tickGen = d.gen
	d.timer.Reset(d.hold)
}

// reclaimLocked gives the lent receive back to the endpoint's goroutine. The caller
// holds d.mu.
func (d *rxDrive) reclaimLocked() {
	d.reclaims.Add(1)
	d.owner = drvOwn
	d.timerOn = false
	if d.timer != nil {
		d.timer.Stop()
	}
	d.signal()
}

// connsChanged takes a lent receive back at once when the endpoint's connections change
// (Connect, the end of a connection): a second connection's packets must not wait for
// the first one's Waits, nor anything wait for the Waits of a connection that ended.
func (d *rxDrive) connsChanged() {
	d.mu.Lock()
	if d.owner == drvLent {
		d.reclaimLocked()
	}
	d.mu.Unlock()
}

// connsChanged tells the drive, if any, that the endpoint's connections or UD QPs changed.
func (e *Endpoint) connsChanged() {
	if e.drv != nil {
		e.drv.connsChanged()
	}
}

// signal wakes the endpoint's goroutine in await. The caller holds d.mu.
func (d *rxDrive) signal() {
	select {
	case d.rch <- struct{}{}:
	default:
	}
}

// finish records that the receive ended (on the endpoint's goroutine).
func (d *rxDrive) finish() {
	d.mu.Lock()
	d.owner = drvFin
	if d.timer != nil {
		d.timer.Stop()
	}
	w := d.wakes.Take()
	d.mu.Unlock()
	w.Wake()
}

// sole reports whether c is the endpoint's only connection (and no UD QP shares it).
func (d *rxDrive) sole(c *Conn) bool {
	e := d.e
	e.mu.RLock()
	ok := len(e.conns) == 1 && len(e.ud) == 0 && e.conns[c.qp.QP().Num()] == c
	e.mu.RUnlock()
	return ok
}

// canDrive implements Conn.CanDriveReceive.
func (d *rxDrive) canDrive(c *Conn) bool {
	d.mu.Lock()
	ok := d.owner != drvFin
	d.mu.Unlock()
	return ok && d.sole(c) && !d.e.closed.Load()
}

// drive implements Conn.DriveReceive.
func (d *rxDrive) drive(c *Conn, ready func() bool, w rnic.Waker) bool {
	if !d.canDrive(c) {
		w.Wake() // the caller asks CanDriveReceive again, and waits as without the mode
		return false
	}
	d.mu.Lock()
	switch d.owner {
	case drvLent:
		d.owner = drvWait
		d.gen++
	case drvOwn, drvWait: // w is woken once the receive is handed over, or its driver stops
		kept := d.wakes.Add(w)
		first := d.owner == drvOwn && !d.want.Swap(true)
		d.mu.Unlock()
		if first {
			d.l.setRecvDeadline(time.Unix(1, 0))
		}
		if !kept {
			w.Wake()
		}
		return false
	default:
		d.mu.Unlock()
		return false
	}
	d.mu.Unlock()
	d.driven.Add(1)
	d.ready = ready
	err := d.pump(d.waitStp)
	d.ready = nil
	d.mu.Lock()
	if err == errRecvStopped && !d.e.closed.Load() {
		d.owner = drvLent
	} else {
		// The link failed or closed: the endpoint's goroutine meets it again and handles
		// it (back-off, failLink, or its end).
		d.owner = drvOwn
		d.signal()
	}
	wl := d.wakes.Take() // callers that found it driven
	d.mu.Unlock()
	wl.Wake()
	return true
}

// kick implements Conn.Kick.
func (d *rxDrive) kick() {
	if d.blocked.Load() {
		d.l.setRecvDeadline(time.Unix(1, 0))
	}
}
