package rnic

import (
	"context"
	"sync"
	"time"

	"github.com/softrnic/softrnic/internal/pollwake"
)

// CQ is a completion queue: a fixed ring that Poll drains into a caller slice.
//
// Overflow is never silent and follows verbs semantics (IBV_EVENT_CQ_ERR, then QP
// fatal): if a completion arrives while the ring is full, the CQ enters an error state,
// an EventCQErr async event is posted, and Poll returns ErrCQOverflow (after the
// completions still held) from then on. A CQ in error accepts no completion: each QP
// that then has one to write to it (the one that overflowed it included) is moved to
// Error with EventQPFatal.
type CQ struct {
	dev      *Device
	num      uint32 // its number on the device (CQs)
	mu       sync.Mutex
	ring     []Completion
	head, n  int
	overflow bool
	armed    uint8 // 0 none, 1 next completion, 2 solicited or error completion
	ch       chan struct{}
	handler  func(*CQ)
	destroy  bool

	// Wait's poller wake-up (see package pollwake): the first Wait that blocks makes pw; one Wait
	// at a time blocks on it (pwBusy), others on ch. The end of the context of the last
	// Wait that blocked on pw signals pw (pwCtx).
	pw      *pollwake.Waker
	pwTried bool
	pwBusy  bool
	pwCtx   ctxWatch

	// The receive a Wait drives (drive.go): the one QP using the CQ (soleQP, unless mixed),
	// its transport once known (drvT), and while a Wait drives it the driver and that
	// Wait's context. drvHanded: a connection handed its receive over since a Wait last
	// looked.
	qpRefs    int
	soleQP    *QP
	mixed     bool
	drvT      ReceiveDriver
	drv       ReceiveDriver
	drvCtx    context.Context
	drvHanded bool
	readyFn   func() bool
}

const (
	armNone = iota
	armNext
	armSolicited
)

// CreateCQ creates a completion queue holding depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if depth <= 0 || depth > d.cfg.MaxCQE {
		return nil, ErrInvalidArg
	}
	cq := &CQ{dev: d, ring: make([]Completion, depth), ch: make(chan struct{}, 1)}
	cq.pwCtx.f = cq.ctxDone // made once: a Wait allocates nothing
	if d.cfg.WaitDrivesReceive > 0 {
		cq.readyFn = cq.drvReady // made once: DriveReceive's argument
	}
	cq.num = d.cqs.add(cq)
	return cq, nil
}

// Depth returns the ring size.
func (cq *CQ) Depth() int { return len(cq.ring) }

// Poll moves up to len(wc) completions into wc and returns how many. It never allocates.
// After an overflow it returns the held completions and ErrCQOverflow.
func (cq *CQ) Poll(wc []Completion) (int, error) {
	k, _, err := cq.poll(wc)
	return k, err
}

// poll is Poll also reporting that completions remain (more).
func (cq *CQ) poll(wc []Completion) (k int, more bool, err error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.pollLocked(wc)
}

// pollLocked is Poll with cq.mu held; more reports that completions remain.
func (cq *CQ) pollLocked(wc []Completion) (k int, more bool, err error) {
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		k++
	}
	if cq.overflow {
		err = ErrCQOverflow
	}
	return k, cq.n > 0, err
}

// Len returns the number of completions waiting.
func (cq *CQ) Len() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// Arm requests one notification (ibv_req_notify_cq): for the next completion, or with
// solicitedOnly for the next solicited or error completion. The notification is a token on
// [CQ.C] and a call of the handler set with [CQ.SetHandler]. If completions are already
// waiting, callers should Poll again after arming to avoid a lost wake-up.
func (cq *CQ) Arm(solicitedOnly bool) {
	cq.mu.Lock()
	if solicitedOnly {
		if cq.armed != armNext {
			cq.armed = armSolicited
		}
	} else {
		cq.armed = armNext
	}
	cq.mu.Unlock()
}

// C returns the notification channel (capacity 1) signalled when an armed CQ fires.
func (cq *CQ) C() <-chan struct{} { return cq.ch }

// SetHandler sets a function called (on a transport goroutine, or one that posted work,
// without engine locks held) each time the armed CQ fires. It must not block or destroy
// QPs; it may Poll, Arm and post work.
func (cq *CQ) SetHandler(h func(*CQ)) {
	cq.mu.Lock()
	cq.handler = h
	cq.mu.Unlock()
}

// Wait polls into wc, blocking until at least one completion is available or ctx ends.
// Several goroutines may wait on one CQ (a waiter that leaves completions behind passes
// the wake-up on).
//
// On Linux one waiter at a time blocks in the runtime's network poller (on an eventfd the
// CQ opens at its first blocking Wait and closes at Destroy) rather than on a channel: the
// transport goroutine that completes work then hands the processor to the waiter without
// the runtime also waking an idle thread, which on a small machine costs more than the
// rest of a round trip (see package pollwake). Such a Wait leaves the CQ's arming (Arm, C, the
// handler) alone; one that blocks on the channel (the other waiters, other systems) arms
// the CQ for the next completion.
//
// With Config.WaitDrivesReceive, a Wait on a CQ that one QP uses runs that QP's receive
// itself where the transport can (ReceiveDriver): it reads the socket and returns once
// what it read completed work, with no wake-up in between.
func (cq *CQ) Wait(ctx context.Context, wc []Completion) (int, error) {
	n, more, err := cq.poll(wc)
	for {
		if n > 0 && more {
			cq.passOn()
		}
		if n > 0 || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if d, q := cq.takeDriver(ctx); d != nil {
			ran := d.DriveReceive(cq.readyFn, (*cqWaker)(cq))
			n, more, err = cq.dropDriver(wc)
			if ran {
				q.countDriven()
			}
			if ran || n > 0 || err != nil {
				continue
			}
		}
		pw, again := cq.takeWaker(ctx)
		if again {
			n, more, err = cq.poll(wc)
			continue
		}
		if pw != nil {
			werr := pw.Wait(time.Time{})
			cq.mu.Lock()
			cq.pwBusy = false
			n, more, err = cq.pollLocked(wc)
			cq.mu.Unlock()
			if werr != nil && n == 0 && err == nil {
				return 0, ErrClosed
			}
			continue
		}
		cq.Arm(false)
		if n, more, err = cq.poll(wc); n > 0 || err != nil {
			continue
		}
		select {
		case <-cq.ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		n, more, err = cq.poll(wc)
	}
}

// passOn wakes another waiter for the completions a waiter left behind.
func (cq *CQ) passOn() {
	cq.signalPoller()
	select {
	case cq.ch <- struct{}{}:
	default:
	}
}

// signalPoller wakes the Wait blocked on the poller, if one is.
func (cq *CQ) signalPoller() {
	cq.mu.Lock()
	pw := cq.pw
	if !cq.pwBusy {
		pw = nil
	}
	cq.mu.Unlock()
	if pw != nil {
		pw.Signal()
	}
}

// takeWaker returns the poller wake-up a Wait may block on, or nil when it
// must block on the channel (no eventfd, or another Wait blocks on it); again reports that
// completions arrived meanwhile (poll again).
func (cq *CQ) takeWaker(ctx context.Context) (pw *pollwake.Waker, again bool) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if !cq.pwTried && !cq.destroy {
		cq.pwTried = true
		cq.pw = pollwake.New()
	}
	if cq.pw == nil || cq.pwBusy || cq.destroy {
		return nil, false
	}
	if cq.n > 0 || cq.overflow || cq.drvHanded {
		cq.drvHanded = false
		return nil, true
	}
	cq.pwCtx.watch(ctx) // its end calls ctxDone
	if ctx.Err() != nil {
		return nil, false // the channel path returns it
	}
	cq.pwBusy = true
	cq.pw.Arm()
	return cq.pw, false
}

// ctxDone wakes the Wait blocked on the poller, or driving a receive, when its context
// ends.
func (cq *CQ) ctxDone() {
	cq.mu.Lock()
	pw, d := cq.pw, cq.drv
	cq.mu.Unlock()
	if pw != nil {
		pw.Signal()
	}
	if d != nil {
		d.Kick()
	}
}

// Destroy releases the CQ. QPs using it must be destroyed first.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	cq.destroy = true
	cq.pwCtx.stop()
	pw := cq.pw
	if cq.pwBusy {
		pw = nil // the blocked Wait still reads it; the garbage collector closes it
	}
	cq.pw = nil
	cq.mu.Unlock()
	if pw != nil {
		pw.Close()
	}
	cq.dev.cqs.del(cq.num)
	return nil
}

// push adds a completion; it reports whether a notification must be fired (by fire,
// after the caller dropped its locks), and lost when the CQ is in error (it overflowed
// now or before) and the completion was dropped: the caller's QP must go to Error.
func (cq *CQ) push(c *Completion) (fire, lost bool) {
	cq.mu.Lock()
	if cq.overflow || cq.n == len(cq.ring) {
		first := !cq.overflow
		cq.overflow = true
		cq.mu.Unlock()
		if first {
			cq.dev.postEvent(AsyncEvent{Type: EventCQErr, CQ: cq, Err: ErrCQOverflow})
		}
		return false, true
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *c
	cq.n++
	switch cq.armed {
	case armNext:
		fire = true
	case armSolicited:
		fire = c.Flags&WCSolicited != 0 || c.Status != StatusSuccess
	}
	if fire {
		cq.armed = armNone
		select {
		case cq.ch <- struct{}{}:
		default:
		}
	}
	fire = fire && cq.handler != nil
	var pw *pollwake.Waker
	if cq.pwBusy {
		pw = cq.pw
	}
	d := cq.drv
	cq.mu.Unlock()
	if pw != nil {
		pw.Signal()
	}
	if d != nil {
		d.Kick()
	}
	return fire, false
}

func (cq *CQ) fire() {
	cq.mu.Lock()
	h := cq.handler
	cq.mu.Unlock()
	if h != nil {
		h(cq)
	}
}
