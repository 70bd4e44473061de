package iwarp

// The receive as a coroutine that whichever goroutine holds it runs: the connection's own
// goroutine, or a goroutine blocked in rnic.CQ.Wait (rnic.Config.WaitDrivesReceive). A
// completion made by the receive then needs no wake-up to reach the waiter: the waiter
// read the message itself, as a program reading a plain socket does.
//
// recvLoop runs unchanged inside the coroutine; its socket reads (vecConn) yield to the
// goroutine driving it, which performs them (readv through the socket's RawConn) and
// resumes it. So the goroutine driving can stop whenever the receive waits for the
// network, even in the middle of an FPDU, and another one goes on from there.
//
// Who holds the receive: the connection's goroutine (drvOwn), a Wait running it
// (drvWait), the waiting goroutine between two Waits (drvLent), or nobody any more
// (drvFin: recvLoop returned). A Wait that finds the connection's goroutine holding it
// asks for it (want) and kicks that goroutine out of its socket wait with a read deadline
// in the past; that goroutine lends the receive and calls the Wait's wake function. A
// timer takes it back when no Wait started for between one and two hold durations, and so
// does the end of the connection.

import (
	"errors"
	"iter"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/wakers"
	"github.com/softrnic/softrnic/rnic"
)

// errStopped ends a read whose stop function asked to stop rather than wait.
var errStopped = errors.New("iwarp: receive handed over")

const (
	drvOwn = iota
	drvWait
	drvLent
	drvFin
)

type rxDrive struct {
	c    *Conn
	v    *vecConn
	hold time.Duration

	// the coroutine and the read it waits for
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	bufs  [][]byte
	n     int
	err   error

	mu      sync.Mutex
	owner   int
	want    atomic.Bool // a Wait asked for the receive
	wakes   wakers.List // the callers waiting for the receive
	rch     chan struct{}
	gen     uint64 // DriveReceive calls; the reclaim timer compares
	tickGen uint64
	timer   *time.Timer
	timerOn bool

	driven   atomic.Uint64 // DriveReceive calls that ran the receive
	lent     atomic.Uint64 // hand-overs from the connection's goroutine to a Wait
	reclaims atomic.Uint64 // receives taken back by the timer

	blocked atomic.Bool // a Wait driving waits for the socket: Kick must interrupt it
	ready   func() bool
	ownStop func() bool // method values, made once
	waitStp func() bool
}

func newRxDrive(c *Conn, v *vecConn, hold time.Duration) *rxDrive {
	d := &rxDrive{c: c, v: v, hold: hold, rch: make(chan struct{}, 1)}
	d.ownStop, d.waitStp = d.ownerStop, d.waitStop
	v.d = d
	return d
}

// seq is the coroutine: the receiver.
func (d *rxDrive) seq(yield func(struct{}) bool) {
	d.yield = yield
	d.c.recvLoop()
}

// read is vecConn's read inside the coroutine: hand bufs to the goroutine driving and
// return what its read gave.
func (d *rxDrive) read(bufs [][]byte) (int, error) {
	d.bufs = bufs
	ok := d.yield(struct{}{})
	d.bufs = nil
	if !ok {
		return 0, net.ErrClosed
	}
	return d.n, d.err
}

// run is the connection's receive goroutine.
func (d *rxDrive) run() {
	d.next, d.stop = iter.Pull(d.seq)
	defer d.stop()
	if _, ok := d.next(); !ok {
		d.finish()
		return
	}
	for d.await() {
		if d.pump(d.ownStop) {
			d.finish()
			return
		}
		d.lend()
	}
}

// await blocks until the connection's goroutine holds the receive; false when it ended
// under a Wait.
func (d *rxDrive) await() bool {
	for {
		d.mu.Lock()
		switch d.owner {
		case drvOwn:
			d.mu.Unlock()
			return true
		case drvFin:
			d.mu.Unlock()
			return false
		case drvLent:
			if d.c.quitting() {
				d.owner = drvOwn
				d.mu.Unlock()
				return true
			}
		}
		quit := d.c.quit
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

// pump performs the coroutine's reads and resumes it until stop (asked instead of waiting
// for the socket) says to stop, or the coroutine returns (fin).
func (d *rxDrive) pump(stop func() bool) (fin bool) {
	rv := &d.v.rv
	rv.stop = stop
	defer func() { rv.stop = nil }()
	for {
		n, err := rv.readv(d.v.rc, d.bufs)
		d.blocked.Store(false)
		if err == errStopped {
			return false
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !d.c.quitting() {
			// a kick (Kick, or a Wait asking for the receive): the next read asks stop
			_ = d.c.nc.SetReadDeadline(time.Time{})
			continue
		}
		d.n, d.err = n, err
		if _, ok := d.next(); !ok {
			return true
		}
		if d.ready != nil && d.ready() {
			return false // a driving Wait has what it waited for: no read to find the socket empty
		}
	}
}

// ownerStop is the connection goroutine's stop: a Wait asked for the receive.
func (d *rxDrive) ownerStop() bool { return d.want.Load() }

// waitStop is a driving Wait's stop: its ready function. blocked is set first, so a
// completion queued after ready looked finds it set and kicks.
func (d *rxDrive) waitStop() bool {
	d.blocked.Store(true)
	if d.ready() {
		d.blocked.Store(false)
		return true
	}
	return false
}

// lend gives the receive to the Wait that asked for it.
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
			d.reclaims.Add(1)
			d.owner = drvOwn
			d.timerOn = false
			d.signal()
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

// signal wakes the connection's goroutine in await. The caller holds d.mu.
func (d *rxDrive) signal() {
	select {
	case d.rch <- struct{}{}:
	default:
	}
}

// finish records that the receive ended (on the connection's goroutine).
func (d *rxDrive) finish() {
	d.mu.Lock()
	d.owner = drvFin
	d.mu.Unlock()
}

// DriveReceive implements rnic.ReceiveDriver.
func (d *rxDrive) DriveReceive(ready func() bool, w rnic.Waker) bool {
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
			_ = d.c.nc.SetReadDeadline(time.Unix(1, 0))
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
	fin := d.pump(d.waitStp)
	d.ready = nil
	d.mu.Lock()
	switch {
	case fin:
		d.owner = drvFin
		d.signal()
	case d.c.quitting():
		d.owner = drvOwn
		d.signal()
	default:
		d.owner = drvLent
	}
	wl := d.wakes.Take() // callers that found it driven (drvWait above)
	d.mu.Unlock()
	wl.Wake()
	return true
}

// Kick implements rnic.ReceiveDriver.
func (d *rxDrive) Kick() {
	if d.blocked.Load() {
		_ = d.c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}
