package dat

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softrnic/softrnic/rnic"
)

// PZ is a Protection Zone (spec §6.7.1), an engine protection domain.
type PZ struct {
	object
	pd   *rnic.PD
	refs atomic.Int32 // LMRs, RMRs, EPs and SRQs using it
}

// HandleType implements Handle.
func (pz *PZ) HandleType() HandleType { return HandleTypePZ }
func (pz *PZ) base() *object {
	if pz == nil {
		return nil
	}
	return &pz.object
}

// PZParam is DAT_PZ_PARAM.
type PZParam struct{ IA *IA }

// PZFieldAll is DAT_PZ_FIELD_ALL.
const PZFieldAll = 0x01

// CreatePZ is dat_pz_create (spec §6.7.1.1).
func (ia *IA) CreatePZ() (*PZ, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	pd, err := ia.dev.AllocPD()
	if err != nil {
		return nil, ErrResourceProtectionDomain
	}
	pz := &PZ{pd: pd}
	pz.ia = ia
	if err := ia.register(pz); err != nil {
		return nil, err
	}
	return pz, nil
}

// Free is dat_pz_free (spec §6.7.1.2): DAT_INVALID_STATE while LMRs, RMRs,
// EPs or SRQs use the PZ.
func (pz *PZ) Free() error {
	if !alive(pz) {
		return ErrInvalidHandlePZ
	}
	if pz.refs.Load() != 0 {
		return ErrInvalidStatePZInUse
	}
	pz.ia.unregister(pz)
	pz.destroy()
	return nil
}

func (pz *PZ) destroy() {
	if !pz.dead.Swap(true) {
		_ = pz.pd.Dealloc()
	}
}

// Query is dat_pz_query (spec §6.7.1.3).
func (pz *PZ) Query(mask uint32) (PZParam, error) {
	if !alive(pz) {
		return PZParam{}, ErrInvalidHandlePZ
	}
	if mask&^PZFieldAll != 0 {
		return PZParam{}, invalidArg(2)
	}
	return PZParam{IA: pz.ia}, nil
}

// LMR is a Local Memory Region over Go memory (spec §6.7.2). Its
// lmr_context and rmr_context are the engine STag of the region.
type LMR struct {
	object
	pz    *PZ
	mr    *rnic.MR
	mem   []byte
	priv  MemPriv
	va    VAType
	mtype MemType
	addr  uint64 // registered_address: the VA of mem[0] (0 when zero based)
	rmrs  atomic.Int32
	ctx   uint32
}

// HandleType implements Handle.
func (l *LMR) HandleType() HandleType { return HandleTypeLMR }
func (l *LMR) base() *object {
	if l == nil {
		return nil
	}
	return &l.object
}

// LMRParam is DAT_LMR_PARAM.
type LMRParam struct {
	IA                *IA
	MemType           MemType
	Region            []byte
	Length            uint64
	PZ                *PZ
	MemPriv           MemPriv
	VAType            VAType
	LMRContext        uint32
	RMRContext        uint32
	RegisteredSize    uint64
	RegisteredAddress uint64
}

// LMR parameter mask bits (DAT_LMR_PARAM_MASK).
const (
	LMRFieldIAHandle          = 0x001
	LMRFieldMemType           = 0x002
	LMRFieldRegionDesc        = 0x004
	LMRFieldLength            = 0x008
	LMRFieldPZHandle          = 0x010
	LMRFieldMemPriv           = 0x020
	LMRFieldVAType            = 0x040
	LMRFieldLMRContext        = 0x080
	LMRFieldRMRContext        = 0x100
	LMRFieldRegisteredSize    = 0x200
	LMRFieldRegisteredAddress = 0x400
	LMRFieldAll               = 0x7FF
)

func memAccess(p MemPriv) rnic.Access {
	a := rnic.AccessMWBind
	if p&MemPrivLocalWrite != 0 {
		a |= rnic.AccessLocalWrite
	}
	if p&MemPrivRemoteWrite != 0 {
		a |= rnic.AccessRemoteWrite | rnic.AccessLocalWrite
	}
	if p&MemPrivRemoteRead != 0 {
		a |= rnic.AccessRemoteRead
	}
	if p&MemPrivRemoteAtomic != 0 {
		a |= rnic.AccessRemoteAtomic | rnic.AccessLocalWrite
	}
	return a
}

// CreateLMR is dat_lmr_create for DAT_MEM_TYPE_VIRTUAL (spec §6.7.2.1):
// it registers mem, which must stay reachable and unmoved (it is Go memory
// referenced by the LMR) until Free. With VATypeVA the registered address
// is the address of mem[0]; with VATypeZB it is 0.
func (ia *IA) CreateLMR(mem []byte, pz *PZ, priv MemPriv, va VAType) (*LMR, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if len(mem) == 0 {
		return nil, invalidArg(3)
	}
	return ia.createLMR(MemTypeVirtual, mem, pz, priv, va)
}

// CreateLMRFromLMR is dat_lmr_create for DAT_MEM_TYPE_LMR: a new LMR over
// the memory of src, possibly with another PZ and privileges.
func (ia *IA) CreateLMRFromLMR(src *LMR, pz *PZ, priv MemPriv, va VAType) (*LMR, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if !alive(src) || src.ia != ia {
		return nil, ErrInvalidHandleLMR
	}
	return ia.createLMR(MemTypeLMR, src.mem, pz, priv, va)
}

func (ia *IA) createLMR(mt MemType, mem []byte, pz *PZ, priv MemPriv, va VAType) (*LMR, error) {
	if !alive(pz) || pz.ia != ia {
		return nil, ErrInvalidHandlePZ
	}
	if priv&^memPrivValid != 0 {
		return nil, invalidArg(6)
	}
	if va != VATypeVA && va != VATypeZB {
		return nil, invalidArg(7)
	}
	iova := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	if va == VATypeZB {
		iova = 0
	}
	mr, err := pz.pd.RegMRAt(mem, iova, memAccess(priv))
	if err != nil {
		return nil, ErrResourceMemoryRegion
	}
	l := &LMR{pz: pz, mr: mr, mem: mem, priv: priv, va: va, mtype: mt, addr: iova, ctx: mr.STag()}
	l.ia = ia
	if err := ia.register(l); err != nil {
		_ = mr.Dereg()
		return nil, err
	}
	pz.refs.Add(1)
	ia.lmrMu.Lock()
	ia.lmrs[l.ctx] = l
	ia.lmrMu.Unlock()
	return l, nil
}

// LMRContext is the lmr_context of the LMR (local I/O vectors name it).
func (l *LMR) LMRContext() uint32 { return l.ctx }

// RMRContext is the rmr_context of the LMR (a remote peer may use it for
// RDMA when the LMR has remote privileges).
func (l *LMR) RMRContext() uint32 { return l.ctx }

// RegisteredAddress is the virtual address of the first registered byte.
func (l *LMR) RegisteredAddress() uint64 { return l.addr }

// RegisteredSize is the registered length.
func (l *LMR) RegisteredSize() uint64 { return uint64(len(l.mem)) }

// Triplet returns the LMR triplet for n bytes at offset off of the region.
func (l *LMR) Triplet(off, n int) LMRTriplet {
	return LMRTriplet{LMRContext: l.ctx, VirtualAddress: l.addr + uint64(off), SegmentLength: uint64(n)}
}

// RMRTriplet returns the triplet a peer uses for n bytes at off through the
// LMR's rmr_context.
func (l *LMR) RMRTriplet(off, n int) RMRTriplet {
	return RMRTriplet{RMRContext: l.ctx, TargetAddress: l.addr + uint64(off), SegmentLength: uint64(n)}
}

// Free is dat_lmr_free (spec §6.7.2.2): DAT_INVALID_STATE while RMRs are
// bound into the LMR.
func (l *LMR) Free() error {
	if !alive(l) {
		return ErrInvalidHandleLMR
	}
	if l.rmrs.Load() > 0 {
		return ErrInvalidStateLMRInUse
	}
	l.ia.unregister(l)
	l.destroy()
	return nil
}

func (l *LMR) destroy() {
	if l.dead.Swap(true) {
		return
	}
	l.ia.lmrMu.Lock()
	delete(l.ia.lmrs, l.ctx)
	l.ia.lmrMu.Unlock()
	_ = l.mr.Dereg()
	l.pz.refs.Add(-1)
}

// Query is dat_lmr_query (spec §6.7.2.3).
func (l *LMR) Query(mask uint32) (LMRParam, error) {
	if !alive(l) {
		return LMRParam{}, ErrInvalidHandleLMR
	}
	if mask&^LMRFieldAll != 0 {
		return LMRParam{}, invalidArg(2)
	}
	return LMRParam{IA: l.ia, MemType: l.mtype, Region: l.mem, Length: uint64(len(l.mem)), PZ: l.pz,
		MemPriv: l.priv, VAType: l.va, LMRContext: l.ctx, RMRContext: l.ctx,
		RegisteredSize: uint64(len(l.mem)), RegisteredAddress: l.addr}, nil
}

// lookupLMR finds a live LMR of the IA by lmr_context.
func (ia *IA) lookupLMR(ctx uint32) *LMR {
	ia.lmrMu.RLock()
	l := ia.lmrs[ctx]
	ia.lmrMu.RUnlock()
	return l
}

// checkIOV validates a local I/O vector against its LMRs (spec §6.6.20
// returns): unknown LMR is DAT_PRIVILEGES_VIOLATION, another PZ is
// DAT_PROTECTION_VIOLATION, a missing local privilege is
// DAT_PRIVILEGES_VIOLATION and a segment outside the LMR is
// DAT_INVALID_PARAMETER. It converts iov into engine SGEs appended to sge.
func (ia *IA) checkIOV(iov []LMRTriplet, pz *PZ, write bool, sge []rnic.SGE) ([]rnic.SGE, uint64, error) {
	var total uint64
	for i := range iov {
		t := &iov[i]
		l := ia.lookupLMR(t.LMRContext)
		if l == nil || l.dead.Load() {
			if write {
				return sge, 0, ErrPrivilegesWrite
			}
			return sge, 0, ErrPrivilegesRead
		}
		if pz != nil && l.pz != pz {
			if write {
				return sge, 0, ErrProtectionWrite
			}
			return sge, 0, ErrProtectionRead
		}
		if write && l.priv&MemPrivLocalWrite == 0 {
			return sge, 0, ErrPrivilegesWrite
		}
		if !write && l.priv&MemPrivLocalRead == 0 {
			return sge, 0, ErrPrivilegesRead
		}
		end := t.VirtualAddress + t.SegmentLength
		if end < t.VirtualAddress || t.VirtualAddress < l.addr || end > l.addr+uint64(len(l.mem)) || t.SegmentLength > 1<<32-1 {
			return sge, 0, invalidArg(3)
		}
		total += t.SegmentLength
		sge = append(sge, rnic.SGE{Addr: t.VirtualAddress, Length: uint32(t.SegmentLength), LKey: l.ctx})
	}
	return sge, total, nil
}

// SyncRDMARead is dat_lmr_sync_rdma_read (spec §6.7.4.1). softrnic memory is
// coherent, so it only validates the I/O vector.
func (ia *IA) SyncRDMARead(iov []LMRTriplet) error { return ia.syncIOV(iov) }

// SyncRDMAWrite is dat_lmr_sync_rdma_write (spec §6.7.4.2); see SyncRDMARead.
func (ia *IA) SyncRDMAWrite(iov []LMRTriplet) error { return ia.syncIOV(iov) }

func (ia *IA) syncIOV(iov []LMRTriplet) error {
	if !alive(ia) {
		return ErrInvalidHandleIA
	}
	if len(iov) == 0 {
		return invalidArg(2)
	}
	for _, t := range iov {
		l := ia.lookupLMR(t.LMRContext)
		end := t.VirtualAddress + t.SegmentLength
		if l == nil || end < t.VirtualAddress || t.VirtualAddress < l.addr || end > l.addr+uint64(len(l.mem)) {
			return invalidArg(2)
		}
	}
	return nil
}

// RMR is a Remote Memory Region (spec §6.7.3): an engine memory window that
// RMR.Bind binds into an LMR, producing a fresh rmr_context each time.
type RMR struct {
	object
	pz    *PZ
	mw    *rnic.MW
	ep    *EP // create-for-EP scope
	scope RMRScope

	mu     sync.Mutex
	lmr    *LMR
	trip   LMRTriplet
	priv   MemPriv
	va     VAType
	ctx    uint32
	target uint64
}

// HandleType implements Handle.
func (r *RMR) HandleType() HandleType { return HandleTypeRMR }
func (r *RMR) base() *object {
	if r == nil {
		return nil
	}
	return &r.object
}

// RMRParam is DAT_RMR_PARAM.
type RMRParam struct {
	IA         *IA
	PZ         *PZ
	LMRTriplet LMRTriplet
	MemPriv    MemPriv
	RMRContext uint32
	Scope      RMRScope
	VAType     VAType
}

// RMR parameter mask bits (DAT_RMR_PARAM_MASK).
const (
	RMRFieldIAHandle   = 0x01
	RMRFieldPZHandle   = 0x02
	RMRFieldLMRTriplet = 0x04
	RMRFieldMemPriv    = 0x08
	RMRFieldRMRContext = 0x10
	RMRFieldScope      = 0x20
	RMRFieldVAType     = 0x40
	RMRFieldAll        = 0x7F
)

// CreateRMR is dat_rmr_create (spec §6.7.3.1): an unbound RMR of PZ scope.
func (pz *PZ) CreateRMR() (*RMR, error) { return pz.createRMR(nil) }

// CreateRMRForEP is dat_rmr_create_for_ep (spec §6.7.3.2): an RMR scoped to
// the EP it is later bound through.
func (pz *PZ) CreateRMRForEP(ep *EP) (*RMR, error) {
	if !alive(ep) {
		return nil, ErrInvalidHandleEP
	}
	return pz.createRMR(ep)
}

func (pz *PZ) createRMR(ep *EP) (*RMR, error) {
	if !alive(pz) {
		return nil, ErrInvalidHandlePZ
	}
	if ep != nil && (ep.ia != pz.ia || ep.pz != pz) {
		return nil, invalidArg(2)
	}
	// PZ scope: a type 1 window (usable over any connection of the PZ);
	// EP scope: a type 2 window, tied to the EP's QP at bind time and
	// invalidatable by the peer's Send with Invalidate.
	typ, scope := 1, RMRScopePZ
	if ep != nil {
		typ, scope = 2, RMRScopeEP
	}
	mw, err := pz.pd.AllocMW(typ)
	if err != nil {
		return nil, ErrResourceMemoryRegion
	}
	r := &RMR{pz: pz, mw: mw, ep: ep, scope: scope}
	r.ia = pz.ia
	if err := pz.ia.register(r); err != nil {
		_ = mw.Dealloc()
		return nil, err
	}
	pz.refs.Add(1)
	return r, nil
}

// Free is dat_rmr_free (spec §6.7.3.3); the rmr_context becomes invalid.
func (r *RMR) Free() error {
	if !alive(r) {
		return ErrInvalidHandleRMR
	}
	r.ia.unregister(r)
	r.destroy()
	return nil
}

func (r *RMR) destroy() {
	if r.dead.Swap(true) {
		return
	}
	r.mu.Lock()
	if r.lmr != nil {
		r.lmr.rmrs.Add(-1)
		r.lmr = nil
	}
	r.mu.Unlock()
	_ = r.mw.Dealloc()
	r.pz.refs.Add(-1)
}

// Query is dat_rmr_query (spec §6.7.3.4).
func (r *RMR) Query(mask uint32) (RMRParam, error) {
	if !alive(r) {
		return RMRParam{}, ErrInvalidHandleRMR
	}
	if mask&^RMRFieldAll != 0 {
		return RMRParam{}, invalidArg(2)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return RMRParam{IA: r.ia, PZ: r.pz, LMRTriplet: r.trip, MemPriv: r.priv, RMRContext: r.ctx,
		Scope: r.scope, VAType: r.va}, nil
}

// Context returns the current rmr_context (0 while unbound).
func (r *RMR) Context() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}

// Triplet returns the remote triplet for n bytes at off of the bound range.
func (r *RMR) Triplet(off, n int) RMRTriplet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RMRTriplet{RMRContext: r.ctx, TargetAddress: r.trip.VirtualAddress + uint64(off), SegmentLength: uint64(n)}
}
