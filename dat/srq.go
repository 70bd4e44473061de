package dat

import (
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/rnic"
)

// SRQ is a Shared Receive Queue (spec §6.5, man page dat_srq_create).
type SRQ struct {
	object
	pz     *PZ
	srq    *rnic.SRQ
	maxIOV int
	eps    atomic.Int32

	mu     sync.Mutex
	maxDTO int // queue length, also the engine SRQ depth
	lw     int
	state  SRQState
	slots  []srqSlot // by WRID index (never shrinks); free list in free
	free   []uint32
	posted int // outstanding: posted and not yet reaped
	sgl    [16]rnic.SGE
}

type srqSlot struct {
	gen    uint32
	used   bool
	cookie uint64
}

// HandleType implements Handle.
func (s *SRQ) HandleType() HandleType { return HandleTypeSRQ }
func (s *SRQ) base() *object {
	if s == nil {
		return nil
	}
	return &s.object
}

// SRQAttr is DAT_SRQ_ATTR.
type SRQAttr struct {
	MaxRecvDTOs  int
	MaxRecvIOV   int
	LowWatermark int
}

// SRQParam is DAT_SRQ_PARAM.
type SRQParam struct {
	IA                  *IA
	State               SRQState
	PZ                  *PZ
	MaxRecvDTOs         int
	MaxRecvIOV          int
	LowWatermark        int
	AvailableDTOCount   int
	OutstandingDTOCount int
}

// SRQ parameter mask bits (DAT_SRQ_PARAM_MASK).
const (
	SRQFieldIAHandle            = 0x001
	SRQFieldSRQState            = 0x002
	SRQFieldPZHandle            = 0x004
	SRQFieldMaxRecvDTO          = 0x008
	SRQFieldMaxRecvIOV          = 0x010
	SRQFieldLowWatermark        = 0x020
	SRQFieldAvailableDTOCount   = 0x040
	SRQFieldOutstandingDTOCount = 0x080
	SRQFieldAll                 = 0x0FF
)

// SRQLowWatermarkEvent is the asynchronous event for an SRQ falling below its
// low watermark (Async.Reason SRQLowWatermarkReason, Async.Handle the *SRQ).
// dat.h 2.0 assigns no event number to SRQ events; softrnic uses the next
// number of the asynchronous block.
const SRQLowWatermarkEvent EventNumber = 0x08006

// CreateSRQ is dat_srq_create (spec §6.5.1). The low watermark must be
// SRQLWDefault at creation (man page); set it with SetLW.
func (ia *IA) CreateSRQ(pz *PZ, attr SRQAttr) (*SRQ, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if !alive(pz) || pz.ia != ia {
		return nil, ErrInvalidHandlePZ
	}
	c := ia.dev.Config()
	if attr.MaxRecvDTOs <= 0 || attr.MaxRecvDTOs > c.MaxQPWR || attr.MaxRecvIOV <= 0 ||
		attr.MaxRecvIOV > min(c.MaxSGE, 16) || attr.LowWatermark != SRQLWDefault {
		return nil, invalidArg(3)
	}
	es, err := ia.dev.CreateSRQ(pz.pd, rnic.SRQAttr{MaxWR: attr.MaxRecvDTOs, MaxSGE: attr.MaxRecvIOV})
	if err != nil {
		return nil, ErrResourceSRQ
	}
	s := &SRQ{pz: pz, srq: es, maxIOV: attr.MaxRecvIOV, maxDTO: attr.MaxRecvDTOs}
	s.growSlots(attr.MaxRecvDTOs)
	s.ia = ia
	if err := ia.register(s); err != nil {
		_ = es.Destroy()
		return nil, err
	}
	pz.refs.Add(1)
	ia.mu.Lock()
	ia.srqs[es] = s
	ia.mu.Unlock()
	return s, nil
}

// Free is dat_srq_free (spec §6.5.5): DAT_INVALID_STATE while EPs use it.
func (s *SRQ) Free() error {
	if !alive(s) {
		return ErrInvalidHandleSRQ
	}
	if s.eps.Load() > 0 {
		return ErrInvalidStateSRQInUse
	}
	s.ia.unregister(s)
	s.destroy()
	return nil
}

func (s *SRQ) destroy() {
	if s.dead.Swap(true) {
		return
	}
	s.ia.mu.Lock()
	delete(s.ia.srqs, s.srq)
	s.ia.mu.Unlock()
	_ = s.srq.Destroy()
	s.pz.refs.Add(-1)
}

// Query is dat_srq_query (spec §6.5.6).
func (s *SRQ) Query(mask uint32) (SRQParam, error) {
	if !alive(s) {
		return SRQParam{}, ErrInvalidHandleSRQ
	}
	if mask&^SRQFieldAll != 0 {
		return SRQParam{}, invalidArg(2)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return SRQParam{IA: s.ia, State: s.state, PZ: s.pz, MaxRecvDTOs: s.maxDTO, MaxRecvIOV: s.maxIOV,
		LowWatermark: s.lw, AvailableDTOCount: s.srq.Len(), OutstandingDTOCount: s.posted}, nil
}

// growSlots extends the cookie table to n slots (s.mu held or s unpublished).
func (s *SRQ) growSlots(n int) {
	old := len(s.slots)
	if n <= old {
		return
	}
	s.slots = append(s.slots, make([]srqSlot, n-old)...)
	free := make([]uint32, len(s.free), len(s.free)+n-old)
	copy(free, s.free)
	for i := n - 1; i >= old; i-- {
		free = append(free, uint32(i))
	}
	s.free = free
}

// Resize is dat_srq_resize (spec §6.5.7): it grows or shrinks the SRQ (the
// engine SRQ with it, rnic SRQ.Resize) to exactly maxRecvDTOs. It returns
// DAT_INVALID_PARAMETER for a length ≤ 0, DAT_INVALID_STATE (changing
// nothing) if more buffers are outstanding — on the SRQ, at its EPs, or
// completed and not yet reaped — than the new length or the length is
// below the low watermark, and DAT_INSUFFICIENT_RESOURCES beyond the
// device's queue depth (rnic Config.MaxQPWR). No buffer is lost; the low
// watermark stays armed.
func (s *SRQ) Resize(maxRecvDTOs int) error {
	if !alive(s) {
		return ErrInvalidHandleSRQ
	}
	if maxRecvDTOs <= 0 {
		return invalidArg(2)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == SRQStateError {
		return ErrInvalidStateSRQError
	}
	if maxRecvDTOs < s.posted || maxRecvDTOs < s.lw {
		return ErrInvalidState
	}
	if maxRecvDTOs > s.ia.dev.Config().MaxQPWR {
		return ErrResourceSRQ
	}
	// the engine holds at most s.posted of its slots, so only a resource
	// failure is possible here
	if err := s.srq.Resize(maxRecvDTOs); err != nil {
		return ErrResourceSRQ
	}
	s.growSlots(maxRecvDTOs)
	s.maxDTO = maxRecvDTOs
	return nil
}

// SetLW is dat_srq_set_lw (spec §6.5.4): arms one asynchronous
// SRQLowWatermarkEvent for when fewer than lw buffers remain on the SRQ
// (at once if that is already the case).
func (s *SRQ) SetLW(lw int) error {
	if !alive(s) {
		return ErrInvalidHandleSRQ
	}
	s.mu.Lock()
	if s.state == SRQStateError {
		s.mu.Unlock()
		return ErrInvalidStateSRQError
	}
	if lw < 0 || lw > s.maxDTO {
		s.mu.Unlock()
		return invalidArg(2)
	}
	s.lw = lw
	now := lw > 0 && s.srq.Len() < lw
	if now {
		s.srq.SetLimit(0)
	} else {
		s.srq.SetLimit(lw)
	}
	s.mu.Unlock()
	if now {
		s.ia.asyncEvent(SRQLowWatermarkEvent, s, SRQLowWatermarkReason)
	}
	return nil
}

// PostRecv is dat_srq_post_recv (spec §6.5.8): every receive posted to an
// SRQ completes signalled on the recv EVD of the EP that consumed it.
func (s *SRQ) PostRecv(iov []LMRTriplet, cookie uint64) error {
	if !alive(s) {
		return ErrInvalidHandleSRQ
	}
	if len(iov) > s.maxIOV {
		return invalidArg(2)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.posted >= s.maxDTO || len(s.free) == 0 {
		return ErrResourceSRQ
	}
	sgl, _, err := s.ia.checkIOV(iov, s.pz, true, s.sgl[:0])
	if err != nil {
		return err
	}
	i := s.free[len(s.free)-1]
	sl := &s.slots[i]
	sl.gen++
	sl.used, sl.cookie = true, cookie
	wr := rnic.RecvWR{WRID: uint64(sl.gen)<<32 | uint64(i), SGL: sgl}
	if err := s.srq.PostRecv(&wr); err != nil {
		sl.used = false
		return mapPostErr(err)
	}
	s.free = s.free[:len(s.free)-1]
	s.posted++
	return nil
}

// complete releases the slot of a completed SRQ receive and returns its
// cookie.
func (s *SRQ) complete(wrid uint64) (uint64, bool) {
	i, gen := uint32(wrid), uint32(wrid>>32)
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(i) >= len(s.slots) || !s.slots[i].used || s.slots[i].gen != gen {
		return 0, false
	}
	sl := &s.slots[i]
	sl.used = false
	s.free = append(s.free, i)
	return sl.cookie, true
}

// reap ends the outstanding life of a dequeued SRQ receive (spec §6.5.3:
// a buffer occupies its SRQ entry until its completion is reaped).
func (s *SRQ) reap() {
	s.mu.Lock()
	if s.posted > 0 {
		s.posted--
	}
	s.mu.Unlock()
}
