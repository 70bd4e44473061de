package dat

import (
	"context"
	"sync"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// EVD is an Event Dispatcher (spec §6.3.4): a queue merging event streams,
// with at most one direct waiter, an optional CNO, enabled/disabled and
// waitable/unwaitable states, and a notification configuration derived from
// the Endpoint streams that feed it.
type EVD struct {
	object
	flags EVDFlags

	mu      sync.Mutex
	q       []Event // ring buffer; len(q) is the queue length
	head, n int
	cno     *CNO
	enabled bool
	unwait  bool

	// direct waiter (spec §6.3.1 "Waited" state)
	waiting   bool
	threshold int
	wake      chan struct{} // capacity 1
	timer     *time.Timer

	// streams counts the EP/SP/SRQ streams feeding the EVD (free is refused
	// while non-zero); nNotify/nSolicited count EP completion streams under
	// Consumer notification control (spec §6.3.1).
	streams       int
	nNotify       int
	nSolicited    int
	overflowed    bool
	isAsync       bool // IA async EVD
	pendingNotify bool

	cq      *rnic.CQ // engine CQ for DTO streams, created on first use
	drainMu sync.Mutex
	drain   cqDrain
}

// HandleType implements Handle.
func (e *EVD) HandleType() HandleType { return HandleTypeEVD }
func (e *EVD) base() *object {
	if e == nil {
		return nil
	}
	return &e.object
}

// EVDParam is DAT_EVD_PARAM.
type EVDParam struct {
	IA    *IA
	QLen  int
	State EVDState
	CNO   *CNO
	Flags EVDFlags
}

// EVD parameter mask bits (DAT_EVD_PARAM_MASK).
const (
	EVDFieldIAHandle = 0x01
	EVDFieldQLen     = 0x02
	EVDFieldState    = 0x04
	EVDFieldCNO      = 0x08
	EVDFieldFlags    = 0x10
	EVDFieldAll      = 0x1F
)

// maxEVDQLen bounds evd_min_qlen (IA attribute max_evd_qlen).
const maxEVDQLen = 1 << 20

// CreateEVD is dat_evd_create (spec §6.3.4.1). cno may be nil. The EVD is
// created enabled and waitable.
func (ia *IA) CreateEVD(minQLen int, cno *CNO, flags EVDFlags) (*EVD, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if minQLen <= 0 || minQLen > maxEVDQLen {
		return nil, invalidArg(2)
	}
	if flags == 0 || flags&^evdAllFlags != 0 {
		return nil, invalidArg(4)
	}
	if cno != nil && (!alive(cno) || cno.ia != ia) {
		return nil, ErrInvalidHandleCNO
	}
	e := newEVD(ia, minQLen, flags)
	if err := ia.register(e); err != nil {
		return nil, err
	}
	if cno != nil {
		e.cno = cno
		cno.attach()
	}
	return e, nil
}

func newEVD(ia *IA, qlen int, flags EVDFlags) *EVD {
	e := &EVD{flags: flags, q: make([]Event, qlen), enabled: true, wake: make(chan struct{}, 1)}
	e.ia = ia
	return e
}

// Free is dat_evd_free (spec §6.3.4.2). It fails with DAT_INVALID_STATE
// while Endpoint or Service Point streams feed the EVD or a thread waits on it.
func (e *EVD) Free() error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	e.mu.Lock()
	if e.streams > 0 || (e.isAsync && alive(e.ia)) {
		e.mu.Unlock()
		return ErrInvalidStateEVDInUse
	}
	if e.waiting {
		e.mu.Unlock()
		return ErrInvalidStateEVDWaiter
	}
	e.mu.Unlock()
	e.ia.unregister(e)
	e.destroy()
	return nil
}

// destroy kills the EVD: waiters are aborted, queued events are lost and the
// CNO association is dropped.
func (e *EVD) destroy() {
	if e.dead.Swap(true) {
		return
	}
	e.mu.Lock()
	cno := e.cno
	e.cno = nil
	e.n, e.head = 0, 0
	clear(e.q)
	if e.cq != nil {
		_ = e.cq.Destroy()
	}
	e.mu.Unlock()
	e.signal()
	if cno != nil {
		cno.detach()
	}
}

func (e *EVD) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Query is dat_evd_query (spec §6.3.4.3).
func (e *EVD) Query(mask uint32) (EVDParam, error) {
	if !alive(e) {
		return EVDParam{}, ErrInvalidHandle
	}
	if mask&^EVDFieldAll != 0 {
		return EVDParam{}, invalidArg(2)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := EVDParam{IA: e.ia, QLen: len(e.q), CNO: e.cno, Flags: e.flags}
	if e.enabled {
		p.State |= EVDStateEnabled
	} else {
		p.State |= EVDStateDisabled
	}
	if e.unwait {
		p.State |= EVDStateUnwaitable
	} else {
		p.State |= EVDStateWaitable
	}
	switch {
	case e.nNotify > 0:
		p.State |= EVDStateConfigNotify
	case e.nSolicited > 0:
		p.State |= EVDStateConfigSolicited
	default:
		p.State |= EVDStateConfigThreshold
	}
	return p, nil
}

// ModifyCNO is dat_evd_modify_cno (spec §6.3.4.4); nil removes the CNO.
func (e *EVD) ModifyCNO(cno *CNO) error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	if cno != nil && (!alive(cno) || cno.ia != e.ia) {
		return ErrInvalidHandleCNO
	}
	e.mu.Lock()
	old := e.cno
	e.cno = cno
	e.mu.Unlock()
	if cno != nil {
		cno.attach()
	}
	if old != nil {
		old.detach()
	}
	return nil
}

// Enable is dat_evd_enable (spec §6.3.4.5).
func (e *EVD) Enable() error { return e.setEnabled(true) }

// Disable is dat_evd_disable (spec §6.3.4.6): events still queue but no
// longer trigger the CNO.
func (e *EVD) Disable() error { return e.setEnabled(false) }

func (e *EVD) setEnabled(v bool) error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	e.mu.Lock()
	e.enabled = v
	e.mu.Unlock()
	return nil
}

// SetUnwaitable is dat_evd_set_unwaitable (spec §6.3.4.7): a blocked waiter
// returns DAT_INVALID_STATE and later waits fail until ClearUnwaitable.
func (e *EVD) SetUnwaitable() error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	e.mu.Lock()
	e.unwait = true
	w := e.waiting
	e.mu.Unlock()
	if w {
		e.signal()
	}
	return nil
}

// ClearUnwaitable is dat_evd_clear_unwaitable (spec §6.3.4.8).
func (e *EVD) ClearUnwaitable() error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	e.mu.Lock()
	e.unwait = false
	e.mu.Unlock()
	return nil
}

// Resize is dat_evd_resize (spec §6.3.4.9). No queued event is lost; a
// length below the number of queued events is DAT_INVALID_STATE.
func (e *EVD) Resize(minQLen int) error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	if minQLen <= 0 || minQLen > maxEVDQLen {
		return invalidArg(2)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n > minQLen {
		return ErrInvalidState
	}
	if e.waiting && e.threshold > minQLen {
		return ErrInvalidState
	}
	nq := make([]Event, minQLen)
	for i := 0; i < e.n; i++ {
		nq[i] = e.q[(e.head+i)%len(e.q)]
	}
	e.q, e.head = nq, 0
	return nil
}

// Dequeue is dat_evd_dequeue (spec §6.3.4.11). It never blocks.
func (e *EVD) Dequeue() (Event, error) {
	var ev Event
	if !alive(e) {
		return ev, ErrInvalidHandle
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.waiting {
		return ev, ErrInvalidStateEVDWaiter
	}
	if e.n == 0 {
		return ev, ErrQueueEmpty
	}
	return e.pop(), nil
}

func (e *EVD) pop() Event {
	ev := e.q[e.head]
	e.q[e.head] = Event{}
	e.head = (e.head + 1) % len(e.q)
	e.n--
	if ev.rkind != 0 {
		ev.rep.reap(&ev)
	}
	return ev
}

// Wait is dat_evd_wait (spec §6.3.4.10). It returns the first event once at
// least threshold events are queued (or a notification event arrives, see
// spec §6.3.1), with nmore the number of events left. timeout 0 polls;
// TimeoutInfinite never expires. On timeout it returns DAT_TIMEOUT_EXPIRED
// with nmore defined; if ctx is cancelled it returns DAT_INTERRUPTED_CALL
// (wrapping ctx.Err()); SetUnwaitable makes it return DAT_INVALID_STATE and
// IA close DAT_ABORT. Only one thread may wait at a time.
func (e *EVD) Wait(ctx context.Context, timeout Timeout, threshold int) (ev Event, nmore int, err error) {
	if !alive(e) {
		return ev, 0, ErrInvalidHandle
	}
	if timeout < 0 {
		return ev, 0, invalidArg(2)
	}
	e.mu.Lock()
	if threshold < 1 || threshold > len(e.q) {
		e.mu.Unlock()
		return ev, 0, invalidArg(3)
	}
	switch {
	case e.unwait:
		e.mu.Unlock()
		return ev, 0, ErrInvalidStateEVDUnwaitable
	case e.waiting:
		e.mu.Unlock()
		return ev, 0, ErrInvalidStateEVDWaiter
	case threshold > 1 && e.nNotify > 0:
		e.mu.Unlock()
		return ev, 0, invalidState(SubInvalidStateEVDConfigNotify)
	case threshold > 1 && e.nSolicited > 0:
		e.mu.Unlock()
		return ev, 0, invalidState(SubInvalidStateEVDConfigSolicited)
	}
	if e.n >= threshold {
		ev = e.pop()
		nmore = e.n
		e.mu.Unlock()
		return ev, nmore, nil
	}
	if timeout == 0 {
		nmore = e.n
		e.mu.Unlock()
		return ev, nmore, ErrTimeoutExpired
	}
	e.waiting = true
	e.threshold = threshold
	e.pendingNotify = false
	// drain a stale wake token
	select {
	case <-e.wake:
	default:
	}
	var tc <-chan time.Time
	if timeout != TimeoutInfinite {
		if e.timer == nil {
			e.timer = time.NewTimer(timeout)
		} else {
			e.timer.Reset(timeout)
		}
		tc = e.timer.C
	}
	e.mu.Unlock()

	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	for {
		var why error
		select {
		case <-e.wake:
		case <-tc:
			why = ErrTimeoutExpired
		case <-done:
			why = interrupted(ctx.Err())
		case <-e.ia.closedCh:
			why = ErrAbort
		}
		e.mu.Lock()
		switch {
		case e.dead.Load() || !alive(e.ia):
			why = ErrAbort
		case e.unwait:
			why = ErrInvalidStateEVDUnwaitable
		case e.n >= e.threshold || (why == nil && e.n > 0 && e.notified()):
			why = nil
			ev = e.pop()
		case why == nil:
			e.mu.Unlock()
			continue
		}
		// threshold reached at timeout/interrupt still succeeds (spec §6.3.1)
		if why != nil && why != ErrAbort && why != ErrInvalidStateEVDUnwaitable && e.n >= e.threshold {
			why = nil
			ev = e.pop()
		}
		e.waiting = false
		nmore = e.n
		e.mu.Unlock()
		if tc != nil {
			e.timer.Stop()
		}
		return ev, nmore, why
	}
}

// pendingNotify is set by post when a notification event arrives for a
// waiter below threshold; notified consumes it.
func (e *EVD) notified() bool {
	v := e.pendingNotify
	e.pendingNotify = false
	return v
}

// PostSE is dat_evd_post_se (spec §6.3.4.12): it queues a Software event
// carrying data. A full queue is DAT_QUEUE_FULL and raises no overflow.
func (e *EVD) PostSE(data any) error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	if e.flags&EVDSoftware == 0 {
		return invalidArg(1)
	}
	return e.post(Event{Number: SoftwareEvent, Software: data}, true)
}

// post queues ev (provider side). notify marks a notification event (spec
// §6.3.1): it wakes a waiter below threshold and triggers the CNO. It
// returns DAT_QUEUE_FULL if the event could not be queued; for DTO and RMR
// bind streams this overflows the EVD and raises DAT_ASYNC_ERROR_EVD_OVERFLOW
// on the IA's async EVD.
func (e *EVD) post(ev Event, notify bool) error {
	if !alive(e) {
		return ErrInvalidHandle
	}
	st := ev.Number.stream()
	ev.EVD = e
	e.mu.Lock()
	completion := st == EVDDTO || st == EVDRMRBind || st == EVDExtension
	if e.overflowed && completion {
		e.mu.Unlock()
		return ErrQueueFull
	}
	if e.n == len(e.q) {
		overflow := completion && !e.isAsync
		if overflow {
			e.overflowed = true
		}
		e.mu.Unlock()
		if overflow {
			e.ia.asyncEvent(AsyncErrorEVDOverflow, e, EVDOverflowError)
		}
		return ErrQueueFull
	}
	e.q[(e.head+e.n)%len(e.q)] = ev
	e.n++
	if !completion {
		notify = true // every non-completion stream is a notification stream
	}
	var cno *CNO
	if e.waiting {
		// CONFIG_THRESHOLD: every event counts toward the threshold and
		// non-completion (always notification) events wake at once;
		// CONFIG_NOTIFY/SOLICITED: only notification events wake.
		var wake bool
		if e.nNotify == 0 && e.nSolicited == 0 {
			wake = e.n >= e.threshold || !completion
		} else {
			wake = notify
		}
		if wake {
			e.pendingNotify = notify
			e.signal()
		}
	} else if notify && e.enabled && e.cno != nil {
		cno = e.cno
	}
	e.mu.Unlock()
	if cno != nil {
		cno.trigger(e)
	}
	return nil
}

// count returns the number of queued events (tests and SRQ logic).
func (e *EVD) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// addStream/removeStream account an event stream feeding the EVD; flags
// are the EP completion flags for DTO streams (0 otherwise).
func (e *EVD) addStream(flags CompletionFlags) {
	e.mu.Lock()
	e.streams++
	if flags&CompletionUnsignalled != 0 {
		e.nNotify++
	}
	if flags&CompletionSolicitedWait != 0 {
		e.nSolicited++
	}
	e.mu.Unlock()
}

func (e *EVD) removeStream(flags CompletionFlags) {
	e.mu.Lock()
	e.streams--
	if flags&CompletionUnsignalled != 0 {
		e.nNotify--
	}
	if flags&CompletionSolicitedWait != 0 {
		e.nSolicited--
	}
	e.mu.Unlock()
}
