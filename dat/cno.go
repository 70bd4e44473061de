package dat

import (
	"context"
	"os"
	"sync"
	"time"
)

// WaitAgent is a DAT_OS_WAIT_PROXY_AGENT: a function the CNO calls with the
// triggering EVD (spec §6.3.3). It is invoked once, then disassociated.
type WaitAgent func(*EVD)

// CNO is a Consumer Notification Object (spec §6.3.2): many EVDs of one IA
// funnel notification triggers into it; it supports any number of waiters
// and remembers a trigger that arrives with nobody waiting.
type CNO struct {
	object

	mu      sync.Mutex
	agent   WaitAgent
	last    *EVD
	pending bool
	waiters int
	evds    int
	wake    chan *EVD     // one token per trigger for one waiter
	bcast   chan struct{} // closed to release every waiter with a nil EVD
	fd      *os.File      // read end, for CreateCNOFD
	fdw     *os.File
}

// HandleType implements Handle.
func (c *CNO) HandleType() HandleType { return HandleTypeCNO }
func (c *CNO) base() *object {
	if c == nil {
		return nil
	}
	return &c.object
}

// CNOParam is DAT_CNO_PARAM.
type CNOParam struct {
	IA    *IA
	Agent WaitAgent
	FD    *os.File
}

// CNO parameter mask bits.
const (
	CNOFieldIAHandle = 0x01
	CNOFieldAgent    = 0x02
	CNOFieldFD       = 0x04
	CNOFieldAll      = 0x07
)

// CreateCNO is dat_cno_create (spec §6.3.2.1); agent may be nil.
func (ia *IA) CreateCNO(agent WaitAgent) (*CNO, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	c := newCNO(ia)
	c.agent = agent
	if err := ia.register(c); err != nil {
		return nil, err
	}
	return c, nil
}

func newCNO(ia *IA) *CNO {
	c := &CNO{wake: make(chan *EVD, 1), bcast: make(chan struct{})}
	c.ia = ia
	return c
}

// CreateCNOFD is dat_cno_fd_create (spec §6.3.2.2): the returned file
// becomes readable whenever the CNO is triggered; Trigger then names the
// latest EVD. Free closes it.
func (ia *IA) CreateCNOFD() (*CNO, *os.File, error) {
	if !alive(ia) {
		return nil, nil, ErrInvalidHandleIA
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, ErrResourceDevice
	}
	c := newCNO(ia)
	c.fd, c.fdw = r, w
	if err := ia.register(c); err != nil {
		r.Close()
		w.Close()
		return nil, nil, err
	}
	return c, r, nil
}

// Free is dat_cno_free (spec §6.3.2.3): DAT_INVALID_STATE while an EVD
// references the CNO or a thread waits on it.
func (c *CNO) Free() error {
	if !alive(c) {
		return ErrInvalidHandleCNO
	}
	c.mu.Lock()
	if c.evds > 0 || c.waiters > 0 {
		c.mu.Unlock()
		return ErrInvalidStateCNOInUse
	}
	c.mu.Unlock()
	c.ia.unregister(c)
	c.destroy()
	return nil
}

func (c *CNO) destroy() {
	if c.dead.Swap(true) {
		return
	}
	c.mu.Lock()
	c.release()
	fd, fdw := c.fd, c.fdw
	c.fd, c.fdw = nil, nil
	c.mu.Unlock()
	if fdw != nil {
		fdw.Close()
		fd.Close()
	}
}

// release unblocks every waiter with a nil EVD (caller holds mu).
func (c *CNO) release() {
	close(c.bcast)
	c.bcast = make(chan struct{})
}

// Wait is dat_cno_wait (spec §6.3.2.4). It returns the EVD that triggered
// the CNO (a hint), DAT_QUEUE_EMPTY on timeout, DAT_INTERRUPTED_CALL when
// ctx is cancelled, and a nil EVD with no error when the IA is closed or the
// last associated EVD is freed.
func (c *CNO) Wait(ctx context.Context, timeout Timeout) (*EVD, error) {
	if !alive(c) {
		return nil, ErrInvalidHandleCNO
	}
	if timeout < 0 {
		return nil, invalidArg(2)
	}
	c.mu.Lock()
	if c.pending {
		c.pending = false
		evd := c.last
		c.mu.Unlock()
		return evd, nil
	}
	if timeout == 0 {
		c.mu.Unlock()
		return nil, ErrQueueEmpty
	}
	c.waiters++
	bcast := c.bcast
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waiters--
		c.mu.Unlock()
	}()
	var tc <-chan time.Time
	if timeout != TimeoutInfinite {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case evd := <-c.wake:
		return evd, nil
	case <-bcast:
		return nil, nil
	case <-c.ia.closedCh:
		return nil, nil
	case <-tc:
		return nil, ErrQueueEmpty
	case <-done:
		return nil, interrupted(ctx.Err())
	}
}

// Trigger is dat_cno_trigger (spec §6.3.2.5): the latest EVD that triggered
// the CNO, or nil.
func (c *CNO) Trigger() (*EVD, error) {
	if !alive(c) {
		return nil, ErrInvalidHandleCNO
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, nil
}

// ModifyAgent is dat_cno_modify_agent (spec §6.3.2.6); nil removes it.
func (c *CNO) ModifyAgent(agent WaitAgent) error {
	if !alive(c) {
		return ErrInvalidHandleCNO
	}
	c.mu.Lock()
	c.agent = agent
	c.mu.Unlock()
	return nil
}

// Query is dat_cno_query (spec §6.3.2.7).
func (c *CNO) Query(mask uint32) (CNOParam, error) {
	if !alive(c) {
		return CNOParam{}, ErrInvalidHandleCNO
	}
	if mask&^CNOFieldAll != 0 {
		return CNOParam{}, invalidArg(2)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CNOParam{IA: c.ia, Agent: c.agent, FD: c.fd}, nil
}

// trigger is called by an enabled EVD with no direct waiter on arrival of a
// notification event (spec §6.3.1): it unblocks one waiter or records a
// sticky trigger, fires the proxy agent once and makes the FD readable.
func (c *CNO) trigger(evd *EVD) {
	if !alive(c) {
		return
	}
	c.mu.Lock()
	c.last = evd
	delivered := false
	if c.waiters > 0 {
		select {
		case c.wake <- evd:
			delivered = true
		default:
		}
	}
	if !delivered {
		c.pending = true
	}
	agent := c.agent
	c.agent = nil
	fdw := c.fdw
	c.mu.Unlock()
	if fdw != nil {
		notifyFD(fdw)
	}
	if agent != nil {
		agent(evd)
	}
}

func (c *CNO) attach() {
	c.mu.Lock()
	c.evds++
	c.mu.Unlock()
}

func (c *CNO) detach() {
	c.mu.Lock()
	c.evds--
	if c.evds == 0 && c.waiters > 0 && !c.dead.Load() {
		c.release()
	}
	c.mu.Unlock()
}
