package iwarp

// The receive as a coroutine that whichever goroutine holds it runs: the connection's own
// goroutine, or a goroutine blocked in rnic.CQ.Wait (rnic.Config.WaitDrivesReceive). A
// completion made by the receive then needs no wake-up to reach the waiter: the waiter
// read the message itself, as a program reading a plain socket does.
//
// recvLoop runs unchanged inside the coroutine; its socket reads (vecConn) yield to the
// goroutine driving it, which performs them (readv through the socket's RawConn) and
// resumes it. So the goroutine driving can stop whenever the receive waits for the
// network, even in the middle of an FPDU, and another one goes on from there. Who holds
// the coroutine, and how it passes between the connection's goroutine and the Waits, is
// internal/handover's protocol; the kick is a read deadline in the past, and the end of
// the connection takes the receive back.

import (
	"errors"
	"iter"
	"net"
	"os"
	"time"

	"github.com/softrnic/softrnic/internal/handover"
	"github.com/softrnic/softrnic/rnic"
)

// errStopped ends a read whose stop function asked to stop rather than wait.
var errStopped = errors.New("iwarp: receive handed over")

type rxDrive struct {
	c *Conn
	v *vecConn
	h *handover.Holder

	// the coroutine and the read it waits for
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	bufs  [][]byte
	n     int
	err   error

	ready   func() bool // a running Wait's (nil on the connection's goroutine)
	runWait func(ready, stop func() bool) handover.Result
}

func newRxDrive(c *Conn, v *vecConn, hold time.Duration) *rxDrive {
	d := &rxDrive{c: c, v: v}
	d.h = handover.New(hold, d.kick, c.quitting, c.quit)
	d.runWait = d.waitRun
	v.d = d
	return d
}

// kick interrupts the socket wait of whoever runs the receive.
func (d *rxDrive) kick() { _ = d.c.nc.SetReadDeadline(time.Unix(1, 0)) }

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
	defer d.h.Finish()
	if _, ok := d.next(); !ok {
		return
	}
	for d.h.Await() {
		if d.pump(d.h.OwnerStop()) {
			return
		}
		d.h.Lend()
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
		d.h.Working()
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

// waitRun is a Wait's run of the receive (handover.Holder.Drive).
func (d *rxDrive) waitRun(ready, stop func() bool) handover.Result {
	d.ready = ready
	fin := d.pump(stop)
	d.ready = nil
	if fin {
		return handover.Ended
	}
	return handover.Keep
}

// DriveReceive implements rnic.ReceiveDriver.
func (d *rxDrive) DriveReceive(ready func() bool, w rnic.Waker) bool {
	return d.h.Drive(ready, w, d.runWait)
}

// Kick implements rnic.ReceiveDriver.
func (d *rxDrive) Kick() { d.h.Kick() }
