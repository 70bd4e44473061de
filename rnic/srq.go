package rnic

import "sync"

// RecvWQE is a receive work request owned by the engine and lent to a transport between
// [QP.TakeRecv] and [QP.CompleteRecv].
type RecvWQE struct {
	WRID uint64
	SGL  []SGE    // the posted SGL (engine-owned copy)
	Segs [][]byte // the SGL resolved to memory by TakeRecv
	Len  uint64   // total capacity of Segs
	srq  *SRQ
	idx  int32
}

// recvQueue is a FIFO of posted receives over preallocated slots.
type recvQueue struct {
	slots  []RecvWQE
	free   []int32
	fifo   []int32
	head   int
	n      int
	maxSGE int
}

func newRecvQueue(depth, maxSGE int) recvQueue {
	q := recvQueue{slots: make([]RecvWQE, depth), free: make([]int32, depth), fifo: make([]int32, depth), maxSGE: maxSGE}
	for i := range q.slots {
		q.slots[i].SGL = make([]SGE, 0, maxSGE)
		q.slots[i].Segs = make([][]byte, 0, maxSGE)
		q.slots[i].idx = int32(i)
		q.free[i] = int32(depth - 1 - i)
	}
	return q
}

func (q *recvQueue) post(wr *RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return ErrTooManySGE
	}
	if len(q.free) == 0 {
		return ErrQueueFull
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	w := &q.slots[i]
	w.WRID = wr.WRID
	w.SGL = append(w.SGL[:0], wr.SGL...)
	w.Segs = w.Segs[:0]
	w.Len = 0
	j := q.head + q.n
	if j >= len(q.fifo) {
		j -= len(q.fifo)
	}
	q.fifo[j] = i
	q.n++
	return nil
}

func (q *recvQueue) take() *RecvWQE {
	if q.n == 0 {
		return nil
	}
	i := q.fifo[q.head]
	q.head++
	if q.head == len(q.fifo) {
		q.head = 0
	}
	q.n--
	return &q.slots[i]
}

func (q *recvQueue) release(w *RecvWQE) {
	w.Segs = w.Segs[:0]
	q.free = append(q.free, w.idx)
}

// SRQAttr configures a shared receive queue.
type SRQAttr struct {
	MaxWR  int // depth
	MaxSGE int // SGEs per receive
	Limit  int // low watermark: EventSRQLimitReached fires once when fewer remain (0 = off)
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	pd    *PD
	mu    sync.Mutex
	q     recvQueue
	limit int
}

// CreateSRQ creates a shared receive queue.
func (d *Device) CreateSRQ(pd *PD, attr SRQAttr) (*SRQ, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if attr.MaxWR <= 0 || attr.MaxWR > d.cfg.MaxQPWR || attr.MaxSGE < 0 || attr.MaxSGE > d.cfg.MaxSGE {
		return nil, ErrInvalidArg
	}
	if attr.MaxSGE == 0 {
		attr.MaxSGE = 1
	}
	pd.n.Add(1)
	return &SRQ{pd: pd, q: newRecvQueue(attr.MaxWR, attr.MaxSGE), limit: attr.Limit}, nil
}

// PostRecv posts a receive buffer.
func (s *SRQ) PostRecv(wr *RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.post(wr)
}

// SetLimit arms the low-watermark event (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) SetLimit(n int) {
	s.mu.Lock()
	s.limit = n
	s.mu.Unlock()
}

// Len returns the number of posted receives not yet consumed.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.n
}

// Destroy releases the SRQ.
func (s *SRQ) Destroy() error {
	s.pd.n.Add(-1)
	return nil
}

func (s *SRQ) take() *RecvWQE {
	s.mu.Lock()
	w := s.q.take()
	fire := false
	if w != nil && s.limit > 0 && s.q.n < s.limit {
		s.limit = 0
		fire = true
	}
	s.mu.Unlock()
	if fire {
		s.pd.dev.postEvent(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	if w != nil {
		w.srq = s
	}
	return w
}

func (s *SRQ) release(w *RecvWQE) {
	s.mu.Lock()
	s.q.release(w)
	s.mu.Unlock()
}
