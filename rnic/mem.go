package rnic

import (
	"strconv"
	"sync/atomic"
	"unsafe"
)

// AccessError is the reason a memory access was refused. Transports map it to their wire
// error codes (RFC 5040 §7 / RFC 5041 §7 for iWARP, NAK codes for RoCE).
type AccessError uint8

// Access errors.
const (
	AccessErrInvalidSTag   AccessError = iota + 1 // no such STag, wrong key, or invalidated
	AccessErrNotAssociated                        // STag belongs to another PD or QP (RFC 5040 "STag not associated with RDMAP Stream")
	AccessErrRights                               // the region lacks the requested right
	AccessErrBounds                               // access outside the region (base/bounds violation)
	AccessErrTOWrap                               // tagged offset + length wraps
)

func (e AccessError) Error() string {
	switch e {
	case AccessErrInvalidSTag:
		return "rnic: invalid STag"
	case AccessErrNotAssociated:
		return "rnic: STag not associated with this PD/QP"
	case AccessErrRights:
		return "rnic: access rights violation"
	case AccessErrBounds:
		return "rnic: base or bounds violation"
	case AccessErrTOWrap:
		return "rnic: tagged offset wrap"
	}
	return "rnic: AccessError(" + strconv.Itoa(int(e)) + ")"
}

type memKind uint8

const (
	kindMR   memKind = iota // RegMR
	kindFRMR                // AllocMR, fast-registered by WR
	kindMW1
	kindMW2
)

// memObj is an STag table entry. Guarded by Device.memMu.
type memObj struct {
	kind   memKind
	pd     *PD
	stag   uint32 // current index<<8 | key
	valid  bool
	buf    []byte
	iova   uint64
	access Access
	maxLen int     // FRMR capacity
	parent *memObj // MW: the region it is bound into
	qp     *QP     // type 2 MW: the QP it is bound to
	mws    int     // MR: number of windows bound into it
}

// PD is a protection domain.
type PD struct {
	dev *Device
	num uint32       // its number on the device (PDs)
	n   atomic.Int32 // resources using it
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	pd := &PD{dev: d}
	pd.num = d.pds.add(pd)
	return pd, nil
}

// Device returns the owning device.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc releases the PD; it fails with ErrInUse while resources use it.
func (pd *PD) Dealloc() error {
	if pd.n.Load() != 0 {
		return ErrInUse
	}
	pd.dev.pds.del(pd.num)
	return nil
}

// MR is a memory region over a caller-owned byte slice.
type MR struct {
	pd  *PD
	obj *memObj
}

// MW is a memory window (type 1 or 2).
type MW struct {
	pd  *PD
	obj *memObj
}

func addrOf(b []byte) uint64 {
	if cap(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

func checkAccess(a Access) error {
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return ErrInvalidArg
	}
	return nil
}

func (d *Device) addMem(o *memObj) error {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	var idx uint32
	if n := len(d.memFree); n > 0 {
		idx = d.memFree[n-1]
		d.memFree = d.memFree[:n-1]
	} else {
		if len(d.mem) >= d.cfg.MaxMR {
			return ErrResource
		}
		idx = uint32(len(d.mem))
		d.mem = append(d.mem, nil)
	}
	d.memKey++
	if d.memKey == 0 {
		d.memKey = 1
	}
	o.stag = idx<<8 | uint32(d.memKey)
	d.mem[idx] = o
	o.pd.n.Add(1)
	return nil
}

func (d *Device) delMem(o *memObj) {
	d.memMu.Lock()
	idx := o.stag >> 8
	if int(idx) < len(d.mem) && d.mem[idx] == o {
		d.mem[idx] = nil
		d.memFree = append(d.memFree, idx)
		o.valid = false
		o.pd.n.Add(-1)
	}
	d.memMu.Unlock()
}

// RegMR registers buf with the given rights. Its IOVA is the address of buf[0], as with
// ibv_reg_mr; the region is valid at once. Remote write/atomic require local write.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.RegMRAt(buf, addrOf(buf), access)
}

// RegMRAt registers buf with a chosen IOVA (0 for zero-based tagged offsets).
func (pd *PD) RegMRAt(buf []byte, iova uint64, access Access) (*MR, error) {
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	if iova+uint64(len(buf)) < iova {
		return nil, ErrInvalidArg
	}
	o := &memObj{kind: kindMR, pd: pd, buf: buf, iova: iova, access: access, valid: true}
	if err := pd.dev.addMem(o); err != nil {
		return nil, err
	}
	return &MR{pd: pd, obj: o}, nil
}

// AllocMR allocates a fast-register region of up to maxLen bytes. It is invalid until an
// OpRegMR work request maps memory into it.
func (pd *PD) AllocMR(maxLen int) (*MR, error) {
	if maxLen < 0 {
		return nil, ErrInvalidArg
	}
	o := &memObj{kind: kindFRMR, pd: pd, maxLen: maxLen}
	if err := pd.dev.addMem(o); err != nil {
		return nil, err
	}
	return &MR{pd: pd, obj: o}, nil
}

// AllocMW allocates a memory window of type 1 or 2, initially unbound (invalid).
func (pd *PD) AllocMW(typ int) (*MW, error) {
	k := kindMW1
	switch typ {
	case 1:
	case 2:
		k = kindMW2
	default:
		return nil, ErrInvalidArg
	}
	o := &memObj{kind: k, pd: pd}
	if err := pd.dev.addMem(o); err != nil {
		return nil, err
	}
	return &MW{pd: pd, obj: o}, nil
}

func (pd *PD) rlock()   { pd.dev.memMu.RLock() }
func (pd *PD) runlock() { pd.dev.memMu.RUnlock() }

// STag returns the region's current STag (its lkey and rkey).
func (m *MR) STag() uint32 { m.pd.rlock(); defer m.pd.runlock(); return m.obj.stag }

// LKey is STag, named for verbs users.
func (m *MR) LKey() uint32 { return m.STag() }

// RKey is STag, named for verbs users.
func (m *MR) RKey() uint32 { return m.STag() }

// Addr returns the IOVA (tagged offset) of the region's first byte.
func (m *MR) Addr() uint64 { m.pd.rlock(); defer m.pd.runlock(); return m.obj.iova }

// Buf returns the registered memory.
func (m *MR) Buf() []byte { m.pd.rlock(); defer m.pd.runlock(); return m.obj.buf }

// Len returns the region's length.
func (m *MR) Len() int { m.pd.rlock(); defer m.pd.runlock(); return len(m.obj.buf) }

// Access returns the region's rights.
func (m *MR) Access() Access { m.pd.rlock(); defer m.pd.runlock(); return m.obj.access }

// Valid reports whether the STag is valid (not invalidated, or fast-registered).
func (m *MR) Valid() bool { m.pd.rlock(); defer m.pd.runlock(); return m.obj.valid }

// PD returns the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// SGE returns the scatter/gather element for n bytes at offset off of the region.
func (m *MR) SGE(off, n int) SGE {
	m.pd.rlock()
	defer m.pd.runlock()
	return SGE{Addr: m.obj.iova + uint64(off), Length: uint32(n), LKey: m.obj.stag}
}

// Dereg deregisters the region; it fails with ErrInUse while windows are bound into it.
func (m *MR) Dereg() error {
	m.pd.dev.memMu.RLock()
	n := m.obj.mws
	m.pd.dev.memMu.RUnlock()
	if n > 0 {
		return ErrInUse
	}
	m.pd.dev.delMem(m.obj)
	return nil
}

// STag returns the window's current STag.
func (w *MW) STag() uint32 { w.pd.rlock(); defer w.pd.runlock(); return w.obj.stag }

// RKey is STag, named for verbs users.
func (w *MW) RKey() uint32 { return w.STag() }

// Type returns 1 or 2.
func (w *MW) Type() int {
	if w.obj.kind == kindMW2 {
		return 2
	}
	return 1
}

// Valid reports whether the window is bound and not invalidated.
func (w *MW) Valid() bool { w.pd.rlock(); defer w.pd.runlock(); return w.obj.valid }

// Dealloc releases the window.
func (w *MW) Dealloc() error {
	d := w.pd.dev
	d.memMu.Lock()
	if w.obj.valid && w.obj.parent != nil {
		w.obj.parent.mws--
		w.obj.parent = nil
	}
	w.obj.valid = false
	d.memMu.Unlock()
	d.delMem(w.obj)
	return nil
}

// lookup returns the entry for stag or nil. Caller holds memMu.
func (d *Device) lookup(stag uint32) *memObj {
	idx := stag >> 8
	if idx == 0 || int(idx) >= len(d.mem) {
		return nil
	}
	o := d.mem[idx]
	if o == nil || o.stag != stag {
		return nil
	}
	return o
}

// ResolveRemote validates a remote (tagged) access of n bytes at tagged offset to through
// stag with the given right (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic)
// and returns the target bytes. The checks follow RFC 5040 §6 / RFC 5041 §7: the STag
// exists and is valid, belongs to this PD (and for a type 2 window, to qp; qp may be nil to
// skip that check), grants the right, and [to, to+n) lies inside it. It never allocates.
func (pd *PD) resolveRemote(qp *QP, stag uint32, to, n uint64, right Access) ([]byte, error) {
	d := pd.dev
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	o := d.lookup(stag)
	if o == nil || !o.valid {
		return nil, AccessErrInvalidSTag
	}
	if o.pd != pd || (o.kind == kindMW2 && qp != nil && o.qp != qp) {
		return nil, AccessErrNotAssociated
	}
	if o.access&right != right {
		return nil, AccessErrRights
	}
	if to+n < to {
		return nil, AccessErrTOWrap
	}
	if to < o.iova || to+n > o.iova+uint64(len(o.buf)) {
		return nil, AccessErrBounds
	}
	off := to - o.iova
	return o.buf[off : off+n : off+n], nil
}

// ResolveLocal validates a local SGE (an MR of this PD; AccessLocalWrite when write is
// set) and returns its bytes. It never allocates.
func (pd *PD) resolveLocal(sge SGE, write bool) ([]byte, error) {
	d := pd.dev
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	o := d.lookup(sge.LKey)
	if o == nil || !o.valid || o.kind == kindMW1 || o.kind == kindMW2 {
		return nil, AccessErrInvalidSTag
	}
	if o.pd != pd {
		return nil, AccessErrNotAssociated
	}
	if write && o.access&AccessLocalWrite == 0 {
		return nil, AccessErrRights
	}
	n := uint64(sge.Length)
	if sge.Addr+n < sge.Addr {
		return nil, AccessErrTOWrap
	}
	if sge.Addr < o.iova || sge.Addr+n > o.iova+uint64(len(o.buf)) {
		return nil, AccessErrBounds
	}
	off := sge.Addr - o.iova
	return o.buf[off : off+n : off+n], nil
}

// invalidate invalidates stag on behalf of qp (remote: by a Send with Invalidate).
// Type 1 windows cannot be invalidated.
func (pd *PD) invalidate(qp *QP, stag uint32) error {
	d := pd.dev
	d.memMu.Lock()
	defer d.memMu.Unlock()
	o := d.lookup(stag)
	if o == nil || !o.valid {
		return AccessErrInvalidSTag
	}
	if o.pd != pd || (o.kind == kindMW2 && o.qp != nil && qp != nil && o.qp != qp) {
		return AccessErrNotAssociated
	}
	if o.kind == kindMW1 {
		return AccessErrRights
	}
	if o.kind == kindMR && o.mws > 0 {
		return AccessErrRights
	}
	o.valid = false
	if o.parent != nil {
		o.parent.mws--
		o.parent = nil
	}
	return nil
}

// fastReg performs OpRegMR.
func (pd *PD) fastReg(r *RegInfo) Status {
	if r.MR == nil || r.MR.obj.kind != kindFRMR || r.MR.pd != pd || checkAccess(r.Access) != nil ||
		r.IOVA+uint64(len(r.Buf)) < r.IOVA {
		return StatusLocQPOpErr
	}
	d := pd.dev
	d.memMu.Lock()
	defer d.memMu.Unlock()
	o := r.MR.obj
	if o.valid || len(r.Buf) > o.maxLen || d.mem[o.stag>>8] != o {
		return StatusLocProtErr
	}
	o.stag = o.stag&^0xff | uint32(r.Key)
	o.buf, o.iova, o.access, o.valid = r.Buf, r.IOVA, r.Access, true
	return StatusSuccess
}

// bindMW performs OpBindMW for qp.
func (pd *PD) bindMW(qp *QP, b *BindInfo) Status {
	if b.MW == nil || b.MR == nil || b.MW.pd != pd || b.MR.pd != pd {
		return StatusMWBindErr
	}
	if b.Access&AccessRemoteWrite != 0 || b.Access&AccessRemoteAtomic != 0 {
		if b.MR.Access()&AccessLocalWrite == 0 {
			return StatusMWBindErr
		}
	}
	d := pd.dev
	d.memMu.Lock()
	defer d.memMu.Unlock()
	w, m := b.MW.obj, b.MR.obj
	if !m.valid || m.access&AccessMWBind == 0 || d.mem[w.stag>>8] != w {
		return StatusMWBindErr
	}
	if b.Addr+b.Length < b.Addr || b.Addr < m.iova || b.Addr+b.Length > m.iova+uint64(len(m.buf)) {
		return StatusMWBindErr
	}
	if w.kind == kindMW2 && w.valid {
		return StatusMWBindErr // a type 2 window must be invalidated before rebinding
	}
	if w.valid && w.parent != nil {
		w.parent.mws--
	}
	key := uint32(b.Key)
	if w.kind == kindMW1 {
		key = (w.stag + 1) & 0xff
	}
	w.stag = w.stag&^0xff | key
	off := b.Addr - m.iova
	w.buf = m.buf[off : off+b.Length : off+b.Length]
	w.iova, w.access, w.parent = b.Addr, b.Access, m
	w.valid = b.Length > 0 || w.kind == kindMW2
	if w.kind == kindMW2 {
		w.qp = qp
	}
	if w.valid {
		m.mws++
	} else {
		w.parent = nil
	}
	return StatusSuccess
}
