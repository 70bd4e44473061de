package rnic

import "context"

// ReceiveDriver is implemented by a QP transport whose receive the goroutine waiting on a
// CQ can run itself (Config.WaitDrivesReceive). Without it a completion made by the
// receive reaches the waiter through a wake-up: the connection's goroutine reads the
// message, queues the completion and signals; the runtime then switches to the waiter.
// A waiter that reads the socket itself pays what a plain socket read pays and nothing
// more.
type ReceiveDriver interface {
	// CanDriveReceive reports whether DriveReceive can run the receive at all now (iWARP:
	// the connection is a kernel TCP socket; RoCEv2: the QP's connection is the only user
	// of its endpoint). A caller that finds it false waits as without the mode.
	CanDriveReceive() bool
	// DriveReceive runs the connection's receive on the calling goroutine until ready
	// reports true (asked each time the receive has processed what arrived and would
	// wait for the network, and after Kick), and reports whether it ran it. While the
	// connection's own goroutine holds the receive it does not: it asks that goroutine
	// to hand the receive over, returns false, and w is woken once the hand-over is
	// done (the next DriveReceive then runs it); likewise, while another caller drives
	// it, w is woken when that caller stops. A transport keeps each distinct Waker once
	// (a QP has at most three: its send CQ's, its receive CQ's and QP.DriveReceive's).
	DriveReceive(ready func() bool, w Waker) bool
	// Kick makes a DriveReceive that waits for the network ask ready again; a no-op
	// otherwise. Any goroutine may call it.
	Kick()
}

// Waker is what a caller of ReceiveDriver.DriveReceive is woken through. Wakers are
// compared (==): each caller passes the same pointer every time.
type Waker interface{ Wake() }

// cqWaker is a CQ as the Waker of its driving Waits.
type cqWaker CQ

// Wake implements Waker.
func (w *cqWaker) Wake() { (*CQ)(w).drvWake() }

// bindQP records that q uses cq (CreateQP; once per role, so a QP whose send and receive
// CQ are the same binds twice).
func (cq *CQ) bindQP(q *QP) {
	cq.mu.Lock()
	if cq.qpRefs == 0 {
		cq.soleQP, cq.mixed = q, false
	} else if cq.soleQP != q {
		cq.mixed = true
	}
	cq.qpRefs++
	cq.mu.Unlock()
}

// unbindQP undoes bindQP for q (QP.Destroy). A CQ that more than one QP used stays mixed
// until none does, but lets go of the destroyed QP and its transport.
func (cq *CQ) unbindQP(q *QP) {
	cq.mu.Lock()
	if cq.qpRefs--; cq.qpRefs == 0 {
		cq.soleQP, cq.mixed, cq.drvT = nil, false, nil
	} else if q == cq.soleQP && cq.mixed {
		cq.soleQP, cq.drvT = nil, nil
	}
	cq.mu.Unlock()
}

// takeDriver returns the transport a Wait may drive and its QP, or nil: the mode is on,
// one QP uses the CQ, its transport is a ReceiveDriver, and no other Wait drives or
// blocks.
func (cq *CQ) takeDriver(ctx context.Context) (ReceiveDriver, *QP) {
	if cq.dev.cfg.WaitDrivesReceive <= 0 {
		return nil, nil
	}
	cq.mu.Lock()
	q, t := cq.soleQP, cq.drvT
	if cq.mixed {
		q = nil
	}
	cq.mu.Unlock()
	if q == nil {
		return nil, nil
	}
	if t == nil { // the QP's lock is never taken under the CQ's (completions go the other way)
		d, ok := q.transport().(ReceiveDriver)
		if !ok {
			return nil, nil
		}
		t = d
	}
	if !t.CanDriveReceive() {
		return nil, nil
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.soleQP != q || cq.mixed || cq.drv != nil || cq.pwBusy || cq.destroy || cq.n > 0 || cq.overflow {
		return nil, nil
	}
	cq.drvT = t
	cq.pwCtx.watch(ctx) // its end calls ctxDone
	if ctx.Err() != nil {
		return nil, nil
	}
	cq.drv, cq.drvCtx, cq.drvHanded = t, ctx, false
	return t, q
}

// dropDriver ends what takeDriver began and polls into wc under the same lock (Wait's
// next step).
func (cq *CQ) dropDriver(wc []Completion) (int, bool, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	cq.drv, cq.drvCtx = nil, nil
	return cq.pollLocked(wc)
}

// drvReady is the ready function of a driving Wait: a completion, an error, or the end of
// its context.
func (cq *CQ) drvReady() bool {
	cq.mu.Lock()
	r := cq.n > 0 || cq.overflow || cq.destroy || (cq.drvCtx != nil && cq.drvCtx.Err() != nil)
	cq.mu.Unlock()
	return r
}

// drvWake is the wake function: the connection's goroutine handed the receive over, so
// the Wait blocked meanwhile (or the next one) drives it. Only a Wait blocked on the
// poller is woken: the channel is also the CQ's notification (C), which a hand-over must
// not fire; a Wait that blocked on it is woken by the completions of the one driving.
func (cq *CQ) drvWake() {
	cq.mu.Lock()
	cq.drvHanded = true
	cq.mu.Unlock()
	cq.signalPoller()
}

// transport returns the attached transport, nil before attach.
func (q *QP) transport() QPTransport {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.t
}

// countDriven counts a run of q's receive by a waiting goroutine (Counters.WaitsDriven).
func (q *QP) countDriven() {
	q.counters.WaitsDriven.Add(1)
	q.dev.counters.WaitsDriven.Add(1)
}
