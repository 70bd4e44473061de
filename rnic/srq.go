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

// recvQueue is a FIFO of posted receives over slots. A slot is occupied from post until
// release (so also while lent to a transport); at most limit slots are occupied. Slots are
// allocated when a post finds none free, one at a time and individually (pointers lent
// to transports stay valid), and are kept for reuse until the queue goes: the memory of
// a queue follows the most receives ever posted to it, not its depth, so an idle QP with
// a deep receive queue costs nothing for it. Resize only changes limit.
type recvQueue struct {
	slots  []*RecvWQE
	free   []int32
	fifo   []int32 // ring of posted slots, grown (doubling, up to limit) when full
	head   int
	n      int
	limit  int
	maxSGE int
}

func newRecvQueue(depth, maxSGE int) recvQueue {
	return recvQueue{limit: depth, maxSGE: maxSGE}
}

// resize sets the number of slots that may be occupied; it fails with ErrInvalidArg when
// more are occupied (posted, or taken and not yet completed) than depth.
func (q *recvQueue) resize(depth int) error {
	if depth < len(q.slots)-len(q.free) {
		return ErrInvalidArg
	}
	q.limit = depth
	return nil
}

// slot returns a free slot, allocating one when none is free.
func (q *recvQueue) slot() int32 {
	if k := len(q.free); k > 0 {
		i := q.free[k-1]
		q.free = q.free[:k-1]
		return i
	}
	i := int32(len(q.slots))
	q.slots = append(q.slots, &RecvWQE{SGL: make([]SGE, 0, q.maxSGE), Segs: make([][]byte, 0, q.maxSGE), idx: i})
	return i
}

func (q *recvQueue) post(wr *RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return ErrTooManySGE
	}
	if len(q.slots)-len(q.free) >= q.limit {
		return ErrQueueFull
	}
	if q.n == len(q.fifo) { // the ring is full: grow it, keeping the FIFO order
		fifo := make([]int32, min(max(2*len(q.fifo), 4), max(q.limit, q.n+1)))
		for i := 0; i < q.n; i++ {
			fifo[i] = q.fifo[(q.head+i)%len(q.fifo)]
		}
		q.fifo, q.head = fifo, 0
	}
	i := q.slot()
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
	clear(w.Segs) // keep no reference to the memory it was resolved to
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
// to transports and the armed limit are kept. Memory follows the receives posted (see
// recvQueue), so neither growing nor shrinking allocates.
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
