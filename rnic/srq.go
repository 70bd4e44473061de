package rnic

import "sync"

// RecvWQE is a receive work request owned by the engine and lent to a transport between
// [TransportQP.TakeRecv] and [TransportQP.CompleteRecv].
type RecvWQE struct {
	WRID uint64
	SGL  []SGE  // the posted SGL (engine-owned copy)
	Segs Segs   // the SGL resolved to memory by TakeRecv
	Len  uint64 // total capacity of Segs
	srq  *SRQ
	idx  int32
}

// recvQueue is a FIFO of posted receives over preallocated slots. A slot is occupied from
// post until release (so also while lent to a transport); at most limit slots are occupied.
// Slots are allocated individually stable (pointers lent to transports stay valid) and
// are never freed before the queue: resize grows the slot table or lowers limit.
type recvQueue struct {
	slots  []*RecvWQE
	free   []int32
	fifo   []int32
	head   int
	n      int
	limit  int
	maxSGE int
}

func newRecvQueue(depth, maxSGE int) recvQueue {
	q := recvQueue{free: make([]int32, 0, depth), fifo: make([]int32, depth), limit: depth, maxSGE: maxSGE}
	q.addSlots(depth)
	return q
}

// addSlots appends n free slots to the slot table (free must have room for them).
func (q *recvQueue) addSlots(n int) {
	base := len(q.slots)
	ws := make([]RecvWQE, n)
	for i := range ws {
		ws[i].SGL = make([]SGE, 0, q.maxSGE)
		ws[i].Segs = make([][]byte, 0, q.maxSGE)
		ws[i].idx = int32(base + i)
		q.slots = append(q.slots, &ws[i])
	}
	for i := base + n - 1; i >= base; i-- {
		q.free = append(q.free, int32(i))
	}
}

// resize sets the number of slots that may be occupied; it fails with ErrInvalidArg when
// more are occupied (posted, or taken and not yet completed) than depth.
func (q *recvQueue) resize(depth int) error {
	if depth < len(q.slots)-len(q.free) {
		return ErrInvalidArg
	}
	if grow := depth - len(q.slots); grow > 0 {
		free := make([]int32, len(q.free), depth)
		copy(free, q.free)
		q.free = free
		q.addSlots(grow)
		fifo := make([]int32, depth)
		for i := 0; i < q.n; i++ {
			fifo[i] = q.fifo[(q.head+i)%len(q.fifo)]
		}
		q.fifo, q.head = fifo, 0
	}
	q.limit = depth
	return nil
}

func (q *recvQueue) post(wr *RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return ErrTooManySGE
	}
	if len(q.free) == 0 || len(q.slots)-len(q.free) >= q.limit {
		return ErrQueueFull
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	w := q.slots[i]
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
	return q.slots[i]
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

// Resize changes the SRQ depth (ibv_modify_srq with IBV_SRQ_MAX_WR): it may grow or
// shrink, but not below the number of receives posted and not yet completed (those still
// on the SRQ and those QPs have taken), which fails with ErrInvalidArg and changes nothing;
// also ErrInvalidArg for a depth outside 1..Config.MaxQPWR. Posted receives, receives lent
// to transports and the armed limit are kept. Growing allocates; shrinking keeps the
// memory of the slots for a later grow.
func (s *SRQ) Resize(maxWR int) error {
	if maxWR <= 0 || maxWR > s.pd.dev.cfg.MaxQPWR {
		return ErrInvalidArg
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.resize(maxWR)
}

// MaxWR returns the SRQ depth (as created or last resized).
func (s *SRQ) MaxWR() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.limit
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
