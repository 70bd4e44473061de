// Package handover passes a transport's receive between the goroutine that owns it and a
// goroutine blocked in rnic.CQ.Wait or rnic.QP.DriveReceive, which then runs the receive
// itself (rnic.Config.WaitDrivesReceive): a message that completes the Wait reaches it
// with no hand-off between goroutines. iwarp uses it for a connection's receive (run as a
// coroutine), rocev2 for an endpoint's (while one connection uses the endpoint).
//
// Who holds the receive: the owner (the connection's or endpoint's goroutine), a Wait
// running it, the waiting goroutine between two Waits (lent), or nobody any more (the
// receive ended). A Wait that finds the owner holding it asks for it and kicks the owner
// out of its socket wait (the transport's kick: a read deadline in the past); the owner's
// receive stops (OwnerStop), it lends the receive (Lend) and the Wait is woken through its
// rnic.Waker to ask again. A timer takes a lent receive back when no Wait started for
// between one and two hold durations, and so does the end of the receive (quitting).
package handover

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// Result is what became of the receive when a Wait's run of it returned.
type Result int

const (
	// Keep: the Wait stopped (what it waited for came); the receive stays lent to it.
	Keep Result = iota
	// Return: the receive goes back to the owner at once (the connection or endpoint is
	// ending, or the link failed: the owner meets the condition and handles it).
	Return
	// Ended: the receive finished under the Wait.
	Ended
)

const (
	own = iota
	wait
	lent
	fin
)

// Holder is the state of one receive's hand-over. Make it with New.
type Holder struct {
	hold     time.Duration
	kick     func()
	quitting func() bool
	quit     <-chan struct{}

	mu      sync.Mutex
	owner   int
	deaf    bool        // the owner sleeps in Await deaf to quit (a Wait runs the receive)
	want    atomic.Bool // a Wait asked for the receive
	wakes   list        // the callers waiting for the receive
	rch     chan struct{}
	gen     uint64 // Waits that took the receive; the reclaim timer compares
	tickGen uint64
	timer   *time.Timer
	timerOn bool

	blocked  atomic.Bool // a Wait running the receive waits for the socket: Kick interrupts it
	ready    func() bool
	ownStop  func() bool // method values, made once
	waitStop func() bool

	Driven   atomic.Uint64 // Waits (and QP.DriveReceive calls) that ran the receive
	Lent     atomic.Uint64 // hand-overs from the owner to a Wait
	Reclaims atomic.Uint64 // receives the owner took back before a Wait returned them
}

// New returns the hand-over of a receive whose owner holds it. hold is
// rnic.Config.WaitDrivesReceive; kick interrupts a socket wait of whoever runs the
// receive (any goroutine may call it); quitting reports that the receive is ending, and
// quit is closed when it starts to.
func New(hold time.Duration, kick func(), quitting func() bool, quit <-chan struct{}) *Holder {
	h := &Holder{hold: hold, kick: kick, quitting: quitting, quit: quit, rch: make(chan struct{}, 1)}
	h.ownStop, h.waitStop = h.ownerStop, h.waitStopFn
	return h
}

// Await blocks the owner until it holds the receive; false when the receive ended under a
// Wait.
func (h *Holder) Await() bool {
	for {
		h.mu.Lock()
		h.deaf = false
		switch h.owner {
		case own:
			h.mu.Unlock()
			return true
		case fin:
			h.mu.Unlock()
			return false
		case lent:
			if h.quitting() {
				h.owner = own
				h.mu.Unlock()
				return true
			}
		}
		quit := h.quit
		if h.owner == wait {
			quit = nil // the Wait returns it
			h.deaf = true
		}
		h.mu.Unlock()
		select {
		case <-h.rch:
		case <-quit:
		}
	}
}

// OwnerStop returns the owner's stop function, asked by its receive where it would wait
// for the socket: true when a Wait asked for the receive (then the owner calls Lend).
func (h *Holder) OwnerStop() func() bool { return h.ownStop }

func (h *Holder) ownerStop() bool { return h.want.Load() }

// waitStopFn is a running Wait's stop function: its ready function. blocked is set first,
// so that a completion queued after ready looked finds it set and kicks.
func (h *Holder) waitStopFn() bool {
	h.blocked.Store(true)
	if h.ready() {
		h.blocked.Store(false)
		return true
	}
	return false
}

// Working records that whoever runs the receive no longer waits for the socket (it has
// data to process): a completion queued meanwhile need not kick it.
func (h *Holder) Working() { h.blocked.Store(false) }

// Lend gives the receive to the Wait that asked for it, on the owner's goroutine once its
// receive stopped.
func (h *Holder) Lend() {
	h.mu.Lock()
	h.owner = lent
	h.Lent.Add(1)
	h.want.Store(false)
	w := h.wakes.take()
	h.tickGen = h.gen
	if !h.timerOn {
		h.timerOn = true
		if h.timer == nil {
			h.timer = time.AfterFunc(h.hold, h.tick)
		} else {
			h.timer.Reset(h.hold)
		}
	}
	h.mu.Unlock()
	w.wake()
}

// tick takes the receive back when no Wait started since the last tick.
func (h *Holder) tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.owner {
	case lent:
		if h.gen == h.tickGen {
			h.reclaimLocked()
			return
		}
	case wait:
	default:
		h.timerOn = false
		return
	}
	h.tickGen = h.gen
	h.timer.Reset(h.hold)
}

// Reclaim takes a lent receive back to the owner at once.
func (h *Holder) Reclaim() {
	h.mu.Lock()
	if h.owner == lent {
		h.reclaimLocked()
	}
	h.mu.Unlock()
}

func (h *Holder) reclaimLocked() {
	h.Reclaims.Add(1)
	h.owner = own
	h.timerOn = false
	h.timer.Stop()
	h.signal()
}

// signal wakes the owner in Await. The caller holds h.mu.
func (h *Holder) signal() {
	select {
	case h.rch <- struct{}{}:
	default:
	}
}

// Finish records that the receive ended, on the owner's goroutine; callers waiting for it
// are woken (to find it gone).
func (h *Holder) Finish() {
	h.mu.Lock()
	h.owner = fin
	if h.timer != nil {
		h.timer.Stop()
	}
	w := h.wakes.take()
	h.mu.Unlock()
	w.wake()
}

// Ended reports whether the receive has ended.
func (h *Holder) Ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner == fin
}

// Drive is rnic.ReceiveDriver.DriveReceive: when the receive is lent, the caller runs it,
// run(ready, stop) with stop the function its receive asks where it would wait for the
// socket (ready, with the Kick bookkeeping), and run says what became of the receive;
// Drive then reports true. Otherwise it reports false and w is woken once the receive is
// handed over (asking the owner for it) or the Wait running it stops.
func (h *Holder) Drive(ready func() bool, w rnic.Waker, run func(ready, stop func() bool) Result) bool {
	h.mu.Lock()
	switch h.owner {
	case lent:
		h.owner = wait
		h.gen++
	case own, wait:
		kept := h.wakes.add(w)
		first := h.owner == own && !h.want.Swap(true)
		h.mu.Unlock()
		if first {
			h.kick()
		}
		if !kept {
			w.Wake()
		}
		return false
	default:
		h.mu.Unlock()
		return false
	}
	h.mu.Unlock()
	h.Driven.Add(1)
	h.ready = ready
	r := run(ready, h.waitStop)
	h.ready = nil
	h.blocked.Store(false)
	h.mu.Lock()
	switch {
	case r == Ended:
		h.owner = fin
		h.signal()
	case r == Return || h.quitting():
		h.owner = own
		h.signal()
	default:
		h.owner = lent
		if h.deaf {
			// The owner went to sleep while this Wait ran the receive, deaf to quit: it
			// looks again, so that the end of the receive (quit) takes the receive back
			// now rather than at the reclaim timer, one to two hold durations later.
			h.signal()
		}
	}
	wl := h.wakes.take() // callers that found it run by this Wait
	h.mu.Unlock()
	wl.wake()
	return true
}

// Kick is rnic.ReceiveDriver.Kick: it interrupts a Wait running the receive that waits for
// the socket, so it asks its ready function again.
func (h *Holder) Kick() {
	if h.blocked.Load() {
		h.kick()
	}
}

// list is the callers waiting for the receive: each distinct rnic.Waker once. A QP has at
// most three (its send CQ's, its receive CQ's and QP.DriveReceive's), and one QP's callers
// wait for a receive at a time, so three places suffice.
type list struct {
	w [3]rnic.Waker
	n int
}

// add records w unless it is there; false when the list is full (a caller beyond the
// three), which the caller then wakes at once to ask again.
func (l *list) add(w rnic.Waker) bool {
	for _, x := range l.w[:l.n] {
		if x == w {
			return true
		}
	}
	if l.n == len(l.w) {
		return false
	}
	l.w[l.n] = w
	l.n++
	return true
}

func (l *list) take() list {
	t := *l
	*l = list{}
	return t
}

func (l *list) wake() {
	for _, w := range l.w[:l.n] {
		w.Wake()
	}
}
