package dat

import (
	"net"
	"sync/atomic"
)

// Handle is any DAT object handle (DAT_HANDLE): *IA, *EP, *EVD, *CR, *PSP,
// *RSP, *CSP, *PZ, *LMR, *RMR, *CNO or *SRQ. A nil pointer of any of these
// types is DAT_HANDLE_NULL.
type Handle interface {
	// HandleType reports the object's DAT_HANDLE_TYPE (spec §6.2.2.3).
	HandleType() HandleType
	base() *object
}

// object is the part shared by every DAT object: its IA, consumer context
// (spec §6.2.2) and liveness. A freed object keeps failing with
// DAT_INVALID_HANDLE (spec §6.3.2.3.3: use of a deleted handle).
type object struct {
	ia   *IA
	ctx  atomic.Pointer[any]
	dead atomic.Bool
}

// alive reports whether h is a live (non-nil, not freed) object.
func alive(h Handle) bool {
	o := h.base()
	return o != nil && !o.dead.Load()
}

func isNil(h Handle) bool {
	if h == nil {
		return true
	}
	return h.base() == nil
}

// SetConsumerContext is dat_set_consumer_context: it stores a Consumer value
// with the object (spec §6.2.2.1).
func SetConsumerContext(h Handle, c any) error {
	if isNil(h) || !alive(h) {
		return invalidHandleFor(h)
	}
	h.base().ctx.Store(&c)
	return nil
}

// ConsumerContext is dat_get_consumer_context (spec §6.2.2.2). An object
// whose context was never set returns nil.
func ConsumerContext(h Handle) (any, error) {
	if isNil(h) || !alive(h) {
		return nil, invalidHandleFor(h)
	}
	if p := h.base().ctx.Load(); p != nil {
		return *p, nil
	}
	return nil, nil
}

// GetHandleType is dat_get_handle_type (spec §6.2.2.3).
func GetHandleType(h Handle) (HandleType, error) {
	if isNil(h) || !alive(h) {
		return 0, ErrInvalidHandle
	}
	return h.HandleType(), nil
}

func invalidHandleFor(h Handle) error {
	if h == nil {
		return ErrInvalidHandle
	}
	if s := h.HandleType().invalidSub(); s != SubNone {
		return invalidHandle(s)
	}
	return ErrInvalidHandle
}

// ConnQual is DAT_CONN_QUAL: a connection qualifier. Over iWARP it is the
// TCP port (as OFA DAPL's cma provider maps it); it must fit 16 bits there.
type ConnQual uint64

// LMRTriplet is DAT_LMR_TRIPLET: a local I/O vector segment. VirtualAddress
// is in the LMR's address space (its Go memory starts at the LMR's
// RegisteredAddress, or 0 for zero-based LMRs).
type LMRTriplet struct {
	LMRContext     uint32
	VirtualAddress uint64
	SegmentLength  uint64
}

// RMRTriplet is DAT_RMR_TRIPLET: a remote buffer (RMR or LMR context as an
// iWARP STag, target offset, length).
type RMRTriplet struct {
	RMRContext    uint32
	TargetAddress uint64
	SegmentLength uint64
}

// Event is DAT_EVENT. Number selects which of the data fields is meaningful.
type Event struct {
	Number EventNumber
	EVD    *EVD

	DTO      DTOCompletion     // DTOCompletionEvent, IWExtensionDTOEvent
	RMRBind  RMRBindCompletion // RMRBindCompletionEvent
	CR       CRArrival         // ConnectionRequestEvent
	Conn     ConnectionData    // ConnectionEvent*
	Async    AsyncError        // AsyncError*, HA events
	Software any               // SoftwareEvent: DAT_SOFTWARE_EVENT_DATA pointer

	// reaping: a DTO/RMR completion frees its EP or SRQ queue entry only
	// when the Consumer dequeues it (spec §6.8.1)
	rkind uint8 // reapReq, reapRecv, reapSRQ
	rgen  uint32
	rseq  uint64
	rep   *EP
}

const (
	reapReq = iota + 1
	reapRecv
	reapSRQ
)

// DTOCompletion is DAT_DTO_COMPLETION_EVENT_DATA. Length, RMRContext (and
// Immediate, for the extension) are defined only on DTOSuccess.
type DTOCompletion struct {
	EP         *EP
	Cookie     uint64
	Status     DTOStatus
	Length     uint64
	Op         DTOOp
	RMRContext uint32 // invalidated STag of a Receive with invalidate
	Immediate  uint32 // extension: immediate data of a write/recv with immediate
	Result     uint64 // extension: original remote value of an atomic
}

// RMRBindCompletion is DAT_RMR_BIND_COMPLETION_EVENT_DATA.
type RMRBindCompletion struct {
	RMR    *RMR
	Cookie uint64
	Status DTOStatus
}

// CRArrival is DAT_CR_ARRIVAL_EVENT_DATA.
type CRArrival struct {
	SP        Handle // *PSP, *CSP, or nil for an RSP (which is consumed)
	LocalAddr net.Addr
	ConnQual  ConnQual
	CR        *CR
	Truncated bool
}

// ConnectionData is DAT_CONNECTION_EVENT_DATA.
type ConnectionData struct {
	EP          *EP
	PrivateData []byte
}

// AsyncError is DAT_ASYNC_ERROR_EVENT_DATA: the affected object and an
// object-specific reason.
type AsyncError struct {
	Handle Handle
	Reason int
}
