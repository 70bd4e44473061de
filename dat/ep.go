package dat

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// EPAttr is DAT_EP_ATTR (spec §6.6.6).
type EPAttr struct {
	ServiceType            ServiceType
	MaxMessageSize         uint64
	MaxRDMASize            uint64
	QoS                    QoS
	RecvCompletionFlags    CompletionFlags
	RequestCompletionFlags CompletionFlags
	MaxRecvDTOs            int
	MaxRequestDTOs         int
	MaxRecvIOV             int
	MaxRequestIOV          int
	MaxRDMAReadIn          int
	MaxRDMAReadOut         int
	SRQSoftHW              int
	MaxRDMAReadIOV         int
	MaxRDMAWriteIOV        int
}

// DefaultEPAttr returns the attributes an EP gets when created with nil.
func DefaultEPAttr() EPAttr {
	return EPAttr{ServiceType: ServiceTypeRC, MaxMessageSize: 1 << 31, MaxRDMASize: 1 << 31,
		MaxRecvDTOs: 128, MaxRequestDTOs: 128, MaxRecvIOV: 4, MaxRequestIOV: 4,
		MaxRDMAReadIn: 16, MaxRDMAReadOut: 16, SRQSoftHW: HWDefault, MaxRDMAReadIOV: 4, MaxRDMAWriteIOV: 4}
}

// EPParam is DAT_EP_PARAM (spec §6.6.10).
type EPParam struct {
	IA         *IA
	State      EPState
	LocalAddr  net.Addr
	LocalPort  ConnQual
	RemoteAddr net.Addr
	RemotePort ConnQual
	PZ         *PZ
	RecvEVD    *EVD
	RequestEVD *EVD
	ConnectEVD *EVD
	SRQ        *SRQ
	Attr       EPAttr
}

// EP parameter mask bits (DAT_EP_PARAM_MASK).
const (
	EPFieldIAHandle         uint64 = 0x00000001
	EPFieldEPState          uint64 = 0x00000002
	EPFieldComm             uint64 = 0x00000004
	EPFieldLocalIAAddress   uint64 = 0x00000008
	EPFieldLocalPortQual    uint64 = 0x00000010
	EPFieldRemoteIAAddress  uint64 = 0x00000020
	EPFieldRemotePortQual   uint64 = 0x00000040
	EPFieldPZHandle         uint64 = 0x00000080
	EPFieldRecvEVDHandle    uint64 = 0x00000100
	EPFieldRequestEVDHandle uint64 = 0x00000200
	EPFieldConnectEVDHandle uint64 = 0x00000400
	EPFieldSRQHandle        uint64 = 0x00000800
	EPFieldEPAttrAll        uint64 = 0x7FFFF000
	EPFieldAll              uint64 = 0x7FFFFFFF
)

// reqSlot remembers a posted request (send queue) work request; it is
// indexed by WRID modulo the ring size, which is twice the engine's send
// queue depth, so a live WQE's slot is never reused (suppressed successful
// requests never complete, so slots are not freed by completions).
type reqSlot struct {
	seq    uint64
	cookie uint64
	length uint64
	op     DTOOp
	flags  CompletionFlags
	rmr    *RMR
	ext    bool
}

type recvSlot struct {
	seq    uint64
	cookie uint64
	flags  CompletionFlags
}

// EP is an Endpoint (spec §6.6): an engine RC queue pair plus the DAT
// connection state machine of spec §6.6.7.
type EP struct {
	object

	mu         sync.Mutex
	state      EPState
	pz         *PZ
	recvEVD    *EVD
	reqEVD     *EVD
	connEVD    *EVD
	srq        *SRQ
	attr       EPAttr
	qp         *rnic.QP
	conn       *cm.Conn
	cancel     context.CancelFunc
	localAddr  net.Addr
	localPort  ConnQual
	remoteAddr net.Addr
	remotePort ConnQual
	peerPData  []byte
	cr         *CR  // pending request bound to this EP (RSP / provider EP)
	rsp        *RSP // RSP holding this EP
	provider   bool // created by a PSP with PSPProvider
	streams    bool // EVD stream references taken

	// While a connection is being established, DTO completions are held
	// back so that ESTABLISHED precedes them (spec §6.3.1 ordering).
	hold atomic.Bool
	held []heldEvent

	slotMu sync.Mutex // guards req, rcv, rPosted, rDone (taken by completions)
	sendMu sync.Mutex
	req    []reqSlot
	reqSeq uint64
	sgl    [16]rnic.SGE
	wr     rnic.SendWR

	recvMu  sync.Mutex
	rcv     []recvSlot
	rcvSeq  uint64
	rsgl    [16]rnic.SGE
	rwr     rnic.RecvWR
	rPosted uint64 // receives posted to the EP's own queue
	rDone   uint64 // …and completed
	rReaped uint64 // …and dequeued by the Consumer
	reaped  uint64 // highest request WRID whose completion was dequeued
	gen     uint32 // engine QP generation (Reset/Modify make a new QP)
}

// HandleType implements Handle.
func (ep *EP) HandleType() HandleType { return HandleTypeEP }
func (ep *EP) base() *object {
	if ep == nil {
		return nil
	}
	return &ep.object
}

func checkEPAttr(ia *IA, a *EPAttr, srq bool) error {
	c := ia.dev.Config()
	reqOK := a.RequestCompletionFlags&^(CompletionUnsignalled|CompletionEVDThreshold) == 0
	recvOK := a.RecvCompletionFlags&^(CompletionUnsignalled|CompletionSolicitedWait|CompletionEVDThreshold) == 0
	if a.ServiceType != ServiceTypeRC || !reqOK || !recvOK || a.MaxRequestDTOs <= 0 || a.MaxRequestDTOs > c.MaxQPWR ||
		a.MaxRequestIOV <= 0 || a.MaxRequestIOV > min(c.MaxSGE, 16) || a.MaxRDMAReadIn < 0 || a.MaxRDMAReadIn > c.MaxIRD ||
		a.MaxRDMAReadOut < 0 || a.MaxRDMAReadOut > c.MaxORD || a.MaxMessageSize == 0 || a.MaxMessageSize > 1<<31 ||
		a.MaxRDMASize > 1<<31 || a.MaxRDMAReadIOV < 0 || a.MaxRDMAReadIOV > min(c.MaxSGE, 16) ||
		a.MaxRDMAWriteIOV < 0 || a.MaxRDMAWriteIOV > min(c.MaxSGE, 16) || a.QoS&^QoSBestEffort != 0 {
		return ErrInvalidParameter
	}
	if !srq && (a.MaxRecvDTOs <= 0 || a.MaxRecvDTOs > c.MaxQPWR || a.MaxRecvIOV <= 0 || a.MaxRecvIOV > min(c.MaxSGE, 16)) {
		return ErrInvalidParameter
	}
	return nil
}

func checkEVDRole(ia *IA, e *EVD, need EVDFlags, bad Error) error {
	if e == nil {
		return nil
	}
	if !alive(e) || e.flags&need == 0 || (e.ia != ia && !(need == EVDConnection && sameProvider(e.ia, ia))) {
		return bad
	}
	return nil
}

// sameProvider reports whether a and b are open instances of the same
// provider. Connection events are posted by the EP, not by a device, so an
// EP may report them on a connection EVD of another instance of its IA (as
// OFA DAPL allows; dapltest's limit tests share one connection EVD among
// the EPs of several opens of the same IA). Completion EVDs stay per
// instance: they are fed by the instance's engine device.
func sameProvider(a, b *IA) bool {
	return a != nil && b != nil && a.prov == b.prov && alive(a)
}

// CreateEP is dat_ep_create (spec §6.6.4). Any EVD may be nil (the Consumer
// is not interested in that stream); attr nil takes DefaultEPAttr. pz may be
// nil, creating an EP that must be configured with Modify before use.
func (ia *IA) CreateEP(pz *PZ, recvEVD, reqEVD, connEVD *EVD, attr *EPAttr) (*EP, error) {
	return ia.createEP(pz, recvEVD, reqEVD, connEVD, nil, attr)
}

// CreateEPWithSRQ is dat_ep_create_with_srq (spec §6.6.5, man page
// dat_ep_create_with_srq): receives come from srq; MaxRecvDTOs/MaxRecvIOV of
// attr are ignored. The EP and SRQ PZ must match (the provider does not
// support srq_ep_pz_difference).
func (ia *IA) CreateEPWithSRQ(pz *PZ, recvEVD, reqEVD, connEVD *EVD, srq *SRQ, attr *EPAttr) (*EP, error) {
	if !alive(srq) || srq.ia != ia {
		if alive(ia) {
			return nil, ErrInvalidHandleSRQ
		}
	}
	if attr == nil {
		return nil, invalidArg(7)
	}
	return ia.createEP(pz, recvEVD, reqEVD, connEVD, srq, attr)
}

func (ia *IA) createEP(pz *PZ, recvEVD, reqEVD, connEVD *EVD, srq *SRQ, attr *EPAttr) (*EP, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if pz != nil && (!alive(pz) || pz.ia != ia) {
		return nil, ErrInvalidHandlePZ
	}
	if err := checkEVDRole(ia, recvEVD, EVDDTO, ErrInvalidHandleEVDRecv); err != nil {
		return nil, err
	}
	if err := checkEVDRole(ia, reqEVD, EVDDTO|EVDRMRBind, ErrInvalidHandleEVDRequest); err != nil {
		return nil, err
	}
	if err := checkEVDRole(ia, connEVD, EVDConnection, ErrInvalidHandleEVDConn); err != nil {
		return nil, err
	}
	a := DefaultEPAttr()
	if attr != nil {
		a = *attr
	}
	if err := checkEPAttr(ia, &a, srq != nil); err != nil {
		return nil, err
	}
	if srq != nil {
		if pz != nil && srq.pz != pz {
			return nil, invalidArg(2) // PZ of EP and SRQ must match (man page)
		}
		a.MaxRecvIOV = srq.maxIOV
		a.MaxRecvDTOs = srq.maxDTO
	}
	ep := &EP{state: EPStateUnconnected, pz: pz, recvEVD: recvEVD, reqEVD: reqEVD, connEVD: connEVD, srq: srq, attr: a}
	ep.ia = ia
	if pz == nil {
		ep.state = EPStateUnconfiguredUnconnected
	}
	if pz != nil {
		if err := ep.makeQP(); err != nil {
			return nil, err
		}
	}
	if err := ia.register(ep); err != nil {
		ep.dropQP()
		return nil, err
	}
	ep.takeRefs()
	return ep, nil
}

func (ep *EP) takeRefs() {
	if ep.pz != nil {
		ep.pz.refs.Add(1)
	}
	if ep.srq != nil {
		ep.srq.eps.Add(1)
	}
	if ep.recvEVD != nil {
		ep.recvEVD.addStream(ep.attr.RecvCompletionFlags)
	}
	if ep.reqEVD != nil {
		ep.reqEVD.addStream(ep.attr.RequestCompletionFlags)
	}
	if ep.connEVD != nil {
		ep.connEVD.addStream(0)
	}
}

func (ep *EP) dropRefs() {
	if ep.pz != nil {
		ep.pz.refs.Add(-1)
	}
	if ep.srq != nil {
		ep.srq.eps.Add(-1)
	}
	if ep.recvEVD != nil {
		ep.recvEVD.removeStream(ep.attr.RecvCompletionFlags)
	}
	if ep.reqEVD != nil {
		ep.reqEVD.removeStream(ep.attr.RequestCompletionFlags)
	}
	if ep.connEVD != nil {
		ep.connEVD.removeStream(0)
	}
}

// makeQP creates the engine QP for the EP's current configuration.
func (ep *EP) makeQP() error {
	ia := ep.ia
	scq, err := ia.cqFor(ep.reqEVD)
	if err != nil {
		return err
	}
	rcq, err := ia.cqFor(ep.recvEVD)
	if err != nil {
		return err
	}
	qa := rnic.QPAttr{SendCQ: scq, RecvCQ: rcq, Context: ep, Cap: rnic.QPCap{
		MaxSendWR: ep.attr.MaxRequestDTOs, MaxRecvWR: ep.attr.MaxRecvDTOs,
		MaxSendSGE: max(ep.attr.MaxRequestIOV, ep.attr.MaxRDMAReadIOV, ep.attr.MaxRDMAWriteIOV, 1),
		MaxRecvSGE: max(ep.attr.MaxRecvIOV, 1)}}
	if ep.srq != nil {
		qa.SRQ = ep.srq.srq
		qa.Cap.MaxRecvWR = 0
	}
	qp, err := ia.dev.CreateQP(ep.pz.pd, qa)
	if err != nil {
		return ErrResourceTEP
	}
	ep.qp = qp
	// twice the queue depth: a post that the engine refuses (queue full)
	// must not overwrite the slot of a still outstanding work request
	ep.slotMu.Lock()
	if len(ep.req) < 2*ep.attr.MaxRequestDTOs {
		ep.req = make([]reqSlot, 2*ep.attr.MaxRequestDTOs)
	}
	if ep.srq == nil && len(ep.rcv) < 2*ep.attr.MaxRecvDTOs {
		ep.rcv = make([]recvSlot, 2*ep.attr.MaxRecvDTOs)
	}
	ep.rPosted, ep.rDone, ep.rReaped = 0, 0, 0
	ep.reaped = ep.reqSeq
	ep.gen++
	ep.slotMu.Unlock()
	ia.mu.Lock()
	ia.eps[qp.Num()] = ep
	ia.mu.Unlock()
	return nil
}

// reap frees the queue entry of a dequeued completion (spec §6.8.1: a
// request or receive stays outstanding until its completion is reaped; a
// suppressed request is freed with the next reaped request after it).
func (ep *EP) reap(ev *Event) {
	if ev.rkind == reapSRQ {
		if ep.srq != nil {
			ep.srq.reap()
		}
		return
	}
	ep.slotMu.Lock()
	if ev.rgen == ep.gen {
		if ev.rkind == reapReq && ev.rseq > ep.reaped {
			ep.reaped = ev.rseq
		} else if ev.rkind == reapRecv {
			ep.rReaped++
		}
	}
	ep.slotMu.Unlock()
}

// dropQP destroys the engine QP (flushing its work) and forgets it.
func (ep *EP) dropQP() {
	qp := ep.qp
	if qp == nil {
		return
	}
	_ = qp.Destroy()
	ep.ia.mu.Lock()
	if ep.ia.eps[qp.Num()] == ep {
		delete(ep.ia.eps, qp.Num())
	}
	ep.ia.mu.Unlock()
}

func (ia *IA) epByQPN(n uint32) *EP {
	ia.mu.Lock()
	ep := ia.eps[n]
	ia.mu.Unlock()
	return ep
}

// Free is dat_ep_free (spec §6.6.8): valid in any state; a connection is
// torn down abruptly and outstanding DTOs are flushed.
func (ep *EP) Free() error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	ep.mu.Lock()
	if ep.rsp != nil && alive(ep.rsp) {
		ep.mu.Unlock()
		return ErrInvalidStateEPReserved
	}
	ep.mu.Unlock()
	ep.ia.unregister(ep)
	ep.destroy()
	return nil
}

// ErrInvalidStateEPReserved is DAT_INVALID_STATE for an EP held by an RSP.
var ErrInvalidStateEPReserved = invalidState(SubInvalidStateEPReserved)

func (ep *EP) destroy() {
	if ep.dead.Swap(true) {
		return
	}
	ep.mu.Lock()
	if ep.cancel != nil {
		ep.cancel()
	}
	conn := ep.conn
	ep.conn = nil
	ep.state = EPStateDisconnected
	ep.mu.Unlock()
	if conn != nil {
		conn.Abort()
	}
	ep.dropQP()
	ep.dropRefs()
}

// Query is dat_ep_query (spec §6.6.10).
func (ep *EP) Query(mask uint64) (EPParam, error) {
	if !alive(ep) {
		return EPParam{}, ErrInvalidHandleEP
	}
	if mask&^EPFieldAll != 0 {
		return EPParam{}, invalidArg(2)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return EPParam{IA: ep.ia, State: ep.state, LocalAddr: ep.localAddr, LocalPort: ep.localPort,
		RemoteAddr: ep.remoteAddr, RemotePort: ep.remotePort, PZ: ep.pz, RecvEVD: ep.recvEVD,
		RequestEVD: ep.reqEVD, ConnectEVD: ep.connEVD, SRQ: ep.srq, Attr: ep.attr}, nil
}

// State returns the EP state (dat_ep_query with DAT_EP_FIELD_EP_STATE).
func (ep *EP) State() EPState {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.state
}

// GetStatus is dat_ep_get_status (spec §6.6.9): the state and whether
// request and receive completions are pending on the EP's EVDs.
func (ep *EP) GetStatus() (state EPState, recvIdle, reqIdle bool, err error) {
	if !alive(ep) {
		return 0, false, false, ErrInvalidHandleEP
	}
	ep.mu.Lock()
	state = ep.state
	ep.mu.Unlock()
	recvIdle = ep.recvEVD == nil || ep.recvEVD.count() == 0
	reqIdle = ep.reqEVD == nil || ep.reqEVD.count() == 0
	return state, recvIdle, reqIdle, nil
}

// Modify is dat_ep_modify (spec §6.6.12). It may change the PZ, EVDs and
// attributes of an EP that is not connected or connecting (a provider EP in
// a tentative state included); with posted receives outstanding only the
// connection EVD may change. The mask selects the fields of p to apply.
func (ep *EP) Modify(mask uint64, p EPParam) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	const allowed = EPFieldPZHandle | EPFieldRecvEVDHandle | EPFieldRequestEVDHandle | EPFieldConnectEVDHandle | EPFieldEPAttrAll
	if mask&^EPFieldAll != 0 || mask == 0 {
		return invalidArg(2)
	}
	if mask&^allowed != 0 {
		return invalidArg(2) // read-only fields (state, addresses, SRQ)
	}
	ia := ep.ia
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch ep.state {
	case EPStateUnconnected, EPStateUnconfiguredUnconnected, EPStateTentativeConnectionPending,
		EPStateUnconfiguredTentative, EPStateReserved, EPStateUnconfiguredReserved,
		EPStatePassiveConnectionPending, EPStateUnconfiguredPassive:
	default:
		return invalidState(ep.state.invalidStateSub())
	}
	npz, nrecv, nreq, nconn, nattr := ep.pz, ep.recvEVD, ep.reqEVD, ep.connEVD, ep.attr
	if mask&EPFieldPZHandle != 0 {
		if p.PZ != nil && (!alive(p.PZ) || p.PZ.ia != ia) {
			return ErrInvalidHandlePZ
		}
		npz = p.PZ
	}
	if mask&EPFieldRecvEVDHandle != 0 {
		if err := checkEVDRole(ia, p.RecvEVD, EVDDTO, ErrInvalidHandleEVDRecv); err != nil {
			return err
		}
		nrecv = p.RecvEVD
	}
	if mask&EPFieldRequestEVDHandle != 0 {
		if err := checkEVDRole(ia, p.RequestEVD, EVDDTO|EVDRMRBind, ErrInvalidHandleEVDRequest); err != nil {
			return err
		}
		nreq = p.RequestEVD
	}
	if mask&EPFieldConnectEVDHandle != 0 {
		if err := checkEVDRole(ia, p.ConnectEVD, EVDConnection, ErrInvalidHandleEVDConn); err != nil {
			return err
		}
		nconn = p.ConnectEVD
	}
	if mask&EPFieldEPAttrAll != 0 {
		nattr = p.Attr
		if ep.srq != nil {
			nattr.MaxRecvIOV, nattr.MaxRecvDTOs = ep.attr.MaxRecvIOV, ep.attr.MaxRecvDTOs
		}
		if err := checkEPAttr(ia, &nattr, ep.srq != nil); err != nil {
			return err
		}
	}
	if ep.srq != nil && npz != nil && ep.srq.pz != npz {
		return invalidArg(2)
	}
	rebuild := npz != ep.pz || nrecv != ep.recvEVD || nreq != ep.reqEVD || nattr != ep.attr || ep.qp == nil
	if rebuild && ep.qp != nil && ep.rPosted != ep.rDone {
		return ErrInvalidState // receives are posted on the current queue pair
	}
	ep.dropRefs()
	old := ep.qp
	ep.pz, ep.recvEVD, ep.reqEVD, ep.connEVD, ep.attr = npz, nrecv, nreq, nconn, nattr
	if rebuild && ep.pz != nil {
		ep.qp = nil
		if err := ep.makeQP(); err != nil {
			ep.qp = old
			ep.takeRefs()
			return err
		}
		if old != nil {
			qp := ep.qp
			ep.qp = old
			ep.dropQP()
			ep.qp = qp
		}
	}
	if rebuild && ep.pz == nil && old != nil {
		ep.dropQP() // unconfigured again: no engine QP without a PZ
		ep.qp = nil
	}
	ep.takeRefs()
	ep.state = configuredState(ep.state, ep.pz != nil && ep.qp != nil)
	return nil
}

// configuredState maps between the configured and unconfigured variants of
// a state (spec §6.6.2, deferred configuration EP).
func configuredState(s EPState, configured bool) EPState {
	pairs := [][2]EPState{
		{EPStateUnconnected, EPStateUnconfiguredUnconnected},
		{EPStateReserved, EPStateUnconfiguredReserved},
		{EPStatePassiveConnectionPending, EPStateUnconfiguredPassive},
		{EPStateTentativeConnectionPending, EPStateUnconfiguredTentative},
	}
	for _, p := range pairs {
		if s == p[0] || s == p[1] {
			if configured {
				return p[0]
			}
			return p[1]
		}
	}
	return s
}

// SetWatermark is dat_ep_set_watermark (spec §6.6.13). The provider
// supports no EP high watermarks: DAT_WATERMARK_INFINITE is accepted, any
// finite value is DAT_MODEL_NOT_SUPPORTED.
func (ep *EP) SetWatermark(softHigh, hardHigh int) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if (softHigh < 0 && softHigh != WatermarkInfinite) || (hardHigh < 0 && hardHigh != WatermarkInfinite) {
		return invalidArg(2)
	}
	if softHigh != WatermarkInfinite || hardHigh != WatermarkInfinite {
		return ErrModelNotSupported
	}
	return nil
}

// RecvQuery is dat_ep_recv_query (spec §6.6.11, man page dat_ep_recv_query):
// nbufsAllocated is the number of receive buffers at the EP whose
// completions have not been generated, bufsAllocSpan the number of further
// completions the EP can generate. For an EP with its own receive queue a
// buffer is allocated when posted. For an EP on an SRQ a buffer is
// allocated when the EP's transport takes it from the SRQ for an arriving
// message, and the engine counts those per QP (rnic QP.RecvOutstanding), so
// the count is exact however many EPs share the SRQ.
//
// The span equals the count: both transports take a buffer only for the
// next untagged message in order — iWARP over TCP delivers DDP untagged
// segments of queue 0 in MSN order (RFC 5041 §5.1) and RoCE RC accepts
// Sends only in PSN order (IBTA 9.7) — so no MSN gaps exist (the man page's
// out-of-order case does not arise).
func (ep *EP) RecvQuery() (nbufsAllocated, bufsAllocSpan int, err error) {
	if !alive(ep) {
		return 0, 0, ErrInvalidHandleEP
	}
	if ep.srq != nil {
		ep.mu.Lock()
		qp := ep.qp
		ep.mu.Unlock()
		n := 0
		if qp != nil {
			n = qp.RecvOutstanding()
		}
		return n, n, nil
	}
	ep.slotMu.Lock()
	n := int(ep.rPosted - ep.rDone)
	ep.slotMu.Unlock()
	return n, n, nil
}

// Reset is dat_ep_reset (spec §6.6.18): Disconnected → Unconnected with a
// fresh engine QP (completions not yet dequeued may be lost); a no-op when
// Unconnected.
func (ep *EP) Reset() error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch ep.state {
	case EPStateUnconnected, EPStateUnconfiguredUnconnected:
		return nil
	case EPStateDisconnected:
	default:
		return invalidState(ep.state.invalidStateSub())
	}
	if ep.conn != nil {
		ep.conn.Abort()
		ep.conn = nil
	}
	ep.dropQP()
	ep.qp = nil
	ep.peerPData, ep.remoteAddr, ep.remotePort, ep.localAddr, ep.localPort = nil, nil, 0, nil, 0
	ep.state = EPStateUnconfiguredUnconnected
	if ep.pz != nil {
		if err := ep.makeQP(); err != nil {
			return err
		}
		ep.state = EPStateUnconnected
	}
	return nil
}

type heldEvent struct {
	e      *EVD
	ev     Event
	notify bool
}

// holdOrPost posts a completion event unless the EP is establishing its
// connection, in which case it is queued until releaseHold.
func (ep *EP) holdOrPost(e *EVD, ev Event, notify bool) error {
	if ep.hold.Load() {
		ep.mu.Lock()
		if ep.hold.Load() {
			ep.held = append(ep.held, heldEvent{e, ev, notify})
			ep.mu.Unlock()
			return nil
		}
		ep.mu.Unlock()
	}
	return e.post(ev, notify)
}

// releaseHold posts the held completions after the connection event that
// ends establishment (caller holds ep.mu).
func (ep *EP) releaseHold() {
	ep.hold.Store(false)
	held := ep.held
	ep.held = nil
	for _, h := range held {
		if err := h.e.post(h.ev, h.notify); err != nil {
			ep.broken()
		}
	}
}
