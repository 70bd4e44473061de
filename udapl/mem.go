//go:build udapl

package main

/*
#include "provider.h"
*/
import "C"

import (
	"unsafe"

	"github.com/softrnic/softrnic/dat"
)

// ---- PZ (spec §6.7.1) -------------------------------------------------------

//export srPZCreate
func srPZCreate(h unsafe.Pointer, out *C.DAT_PZ_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(2)
	}
	pz, err := ia.ia.CreatePZ()
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_PZ_HANDLE(newRec(ia, pz, dat.HandleTypePZ).handle())
	return 0
}

//export srPZQuery
func srPZQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_PZ_PARAM) C.DAT_RETURN {
	r, pz := pzOf(h)
	if pz == nil {
		return badHandle(dat.HandleTypePZ)
	}
	if p == nil {
		return badArg(3)
	}
	if _, err := pz.Query(uint32(mask)); err != nil {
		return ret(err)
	}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	return 0
}

//export srPZFree
func srPZFree(h unsafe.Pointer) C.DAT_RETURN {
	r, pz := pzOf(h)
	if pz == nil {
		return badHandle(dat.HandleTypePZ)
	}
	if err := pz.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

// ---- LMR (spec §6.7.2) ------------------------------------------------------

// srLMRCreate registers Consumer memory. A DAT_MEM_TYPE_VIRTUAL region is
// the Consumer's own (malloc'd, mmap'd) memory: package dat registers it
// as a Go slice over that memory, and the engine reads and writes it in
// place. Local read access is implied, as in verbs (OFA DAPL maps
// privileges to IBV_ACCESS_* flags, which have no local-read bit): dtest
// sends from a buffer it registered with DAT_MEM_PRIV_LOCAL_WRITE_FLAG only.
//
//export srLMRCreate
func srLMRCreate(h unsafe.Pointer, mtype C.uint32_t, region unsafe.Pointer, length C.DAT_VLEN, pzH unsafe.Pointer,
	priv, va C.uint32_t, out *C.DAT_LMR_HANDLE, lctx *C.DAT_LMR_CONTEXT, rctx *C.DAT_RMR_CONTEXT,
	rlen *C.DAT_VLEN, raddr *C.DAT_VADDR) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(8)
	}
	_, pz := pzOf(pzH)
	if pz == nil {
		return badHandle(dat.HandleTypePZ)
	}
	p := dat.MemPriv(priv) | dat.MemPrivLocalRead
	var l *dat.LMR
	var err error
	switch dat.MemType(mtype) {
	case dat.MemTypeVirtual:
		if region == nil || length == 0 || uint64(length) > 1<<40 {
			return badArg(3)
		}
		mem := unsafe.Slice((*byte)(region), int(length))
		l, err = ia.ia.CreateLMR(mem, pz, p, dat.VAType(va))
	case dat.MemTypeLMR:
		_, src := lmrOf(region)
		if src == nil {
			return badHandle(dat.HandleTypeLMR)
		}
		l, err = ia.ia.CreateLMRFromLMR(src, pz, p, dat.VAType(va))
	default:
		return ret(dat.ErrModelNotSupported)
	}
	if err != nil {
		return ret(err)
	}
	r := newRec(ia, l, dat.HandleTypeLMR)
	r.priv = dat.MemPriv(priv)
	*out = C.DAT_LMR_HANDLE(r.handle())
	if lctx != nil {
		*lctx = C.DAT_LMR_CONTEXT(l.LMRContext())
	}
	if rctx != nil {
		*rctx = C.DAT_RMR_CONTEXT(l.RMRContext())
	}
	if rlen != nil {
		*rlen = C.DAT_VLEN(l.RegisteredSize())
	}
	if raddr != nil {
		*raddr = C.DAT_VADDR(l.RegisteredAddress())
	}
	return 0
}

//export srLMRQuery
func srLMRQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_LMR_PARAM) C.DAT_RETURN {
	r, l := lmrOf(h)
	if l == nil {
		return badHandle(dat.HandleTypeLMR)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := l.Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_LMR_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.mem_type = C.DAT_MEM_TYPE(q.MemType)
	if len(q.Region) > 0 {
		*(*unsafe.Pointer)(unsafe.Pointer(&p.region_desc)) = unsafe.Pointer(unsafe.SliceData(q.Region))
	}
	p.length = C.DAT_VLEN(q.Length)
	p.pz_handle = C.DAT_PZ_HANDLE(r.ia.cHandle(q.PZ))
	p.mem_priv = C.DAT_MEM_PRIV_FLAGS(r.priv)
	p.va_type = C.DAT_VA_TYPE(q.VAType)
	p.lmr_context = C.DAT_LMR_CONTEXT(q.LMRContext)
	p.rmr_context = C.DAT_RMR_CONTEXT(q.RMRContext)
	p.registered_size = C.DAT_VLEN(q.RegisteredSize)
	p.registered_address = C.DAT_VADDR(q.RegisteredAddress)
	return 0
}

//export srLMRFree
func srLMRFree(h unsafe.Pointer) C.DAT_RETURN {
	r, l := lmrOf(h)
	if l == nil {
		return badHandle(dat.HandleTypeLMR)
	}
	if err := l.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

//export srLMRSync
func srLMRSync(h unsafe.Pointer, iov *C.DAT_LMR_TRIPLET, n C.DAT_VLEN) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if n > 1<<20 {
		return badArg(3)
	}
	var buf iovBuf
	v, ok := lmrIOV(iov, C.DAT_COUNT(n), &buf)
	if !ok {
		return badArg(2)
	}
	return ret(ia.ia.SyncRDMAWrite(v))
}

// ---- RMR (spec §6.7.3) ------------------------------------------------------

// srRMRCreate is dat_rmr_create; dat_rmr_create_for_ep (forEP) names no
// EP in the C API, while package dat ties an EP-scoped RMR to its EP at
// creation: it is DAT_MODEL_NOT_SUPPORTED here.
//
//export srRMRCreate
func srRMRCreate(h unsafe.Pointer, out *C.DAT_RMR_HANDLE, forEP C.int) C.DAT_RETURN {
	r, pz := pzOf(h)
	if pz == nil {
		return badHandle(dat.HandleTypePZ)
	}
	if out == nil {
		return badArg(2)
	}
	if forEP != 0 {
		return ret(dat.ErrModelNotSupported)
	}
	m, err := pz.CreateRMR()
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_RMR_HANDLE(newRec(r.ia, m, dat.HandleTypeRMR).handle())
	return 0
}

//export srRMRQuery
func srRMRQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_RMR_PARAM) C.DAT_RETURN {
	r, m := rmrOf(h)
	if m == nil {
		return badHandle(dat.HandleTypeRMR)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := m.Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_RMR_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.pz_handle = C.DAT_PZ_HANDLE(r.ia.cHandle(q.PZ))
	putLMRTriplet(&p.lmr_triplet, q.LMRTriplet)
	p.mem_priv = C.DAT_MEM_PRIV_FLAGS(q.MemPriv)
	p.rmr_context = C.DAT_RMR_CONTEXT(q.RMRContext)
	p.rmr_scope = C.DAT_RMR_SCOPE(q.Scope)
	p.va_type = C.DAT_VA_TYPE(q.VAType)
	return 0
}

//export srRMRBind
func srRMRBind(h, lmrH unsafe.Pointer, t *C.DAT_LMR_TRIPLET, priv, va C.uint32_t, epH unsafe.Pointer, cookie C.uint64_t,
	flags C.uint32_t, ctx *C.DAT_RMR_CONTEXT) C.DAT_RETURN {
	_, m := rmrOf(h)
	if m == nil {
		return badHandle(dat.HandleTypeRMR)
	}
	if t == nil {
		return badArg(3)
	}
	var buf iovBuf
	v, _ := lmrIOV(t, 1, &buf)
	var lmr *dat.LMR
	if lmrH != nil {
		if _, lmr = lmrOf(lmrH); lmr == nil {
			return badHandle(dat.HandleTypeLMR)
		}
	}
	_, ep := epOf(epH)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	c, err := m.Bind(lmr, v[0], dat.MemPriv(priv), dat.VAType(va), ep, uint64(cookie), dat.CompletionFlags(flags))
	if err != nil {
		return ret(err)
	}
	if ctx != nil {
		*ctx = C.DAT_RMR_CONTEXT(c)
	}
	return 0
}

//export srRMRFree
func srRMRFree(h unsafe.Pointer) C.DAT_RETURN {
	r, m := rmrOf(h)
	if m == nil {
		return badHandle(dat.HandleTypeRMR)
	}
	if err := m.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

// ---- SRQ (spec §6.5) --------------------------------------------------------

//export srSRQCreate
func srSRQCreate(h, pzH unsafe.Pointer, a *C.DAT_SRQ_ATTR, out *C.DAT_SRQ_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	_, pz := pzOf(pzH)
	if pz == nil {
		return badHandle(dat.HandleTypePZ)
	}
	if a == nil {
		return badArg(3)
	}
	if out == nil {
		return badArg(4)
	}
	s, err := ia.ia.CreateSRQ(pz, dat.SRQAttr{MaxRecvDTOs: int(a.max_recv_dtos), MaxRecvIOV: int(a.max_recv_iov),
		LowWatermark: int(a.low_watermark)})
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_SRQ_HANDLE(newRec(ia, s, dat.HandleTypeSRQ).handle())
	return 0
}

//export srSRQFree
func srSRQFree(h unsafe.Pointer) C.DAT_RETURN {
	r, s := srqOf(h)
	if s == nil {
		return badHandle(dat.HandleTypeSRQ)
	}
	if err := s.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

//export srSRQPostRecv
func srSRQPostRecv(h unsafe.Pointer, n C.DAT_COUNT, iov *C.DAT_LMR_TRIPLET, cookie C.uint64_t) C.DAT_RETURN {
	_, s := srqOf(h)
	if s == nil {
		return badHandle(dat.HandleTypeSRQ)
	}
	var buf iovBuf
	v, ok := lmrIOV(iov, n, &buf)
	if !ok {
		return badArg(2)
	}
	return ret(s.PostRecv(v, uint64(cookie)))
}

//export srSRQQuery
func srSRQQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_SRQ_PARAM) C.DAT_RETURN {
	r, s := srqOf(h)
	if s == nil {
		return badHandle(dat.HandleTypeSRQ)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := s.Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_SRQ_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.srq_state = srqState(q.State)
	p.pz_handle = C.DAT_PZ_HANDLE(r.ia.cHandle(q.PZ))
	p.max_recv_dtos = C.DAT_COUNT(q.MaxRecvDTOs)
	p.max_recv_iov = C.DAT_COUNT(q.MaxRecvIOV)
	p.low_watermark = C.DAT_COUNT(q.LowWatermark)
	p.available_dto_count = C.DAT_COUNT(q.AvailableDTOCount)
	p.outstanding_dto_count = C.DAT_COUNT(q.OutstandingDTOCount)
	return 0
}

//export srSRQResize
func srSRQResize(h unsafe.Pointer, n C.DAT_COUNT) C.DAT_RETURN {
	_, s := srqOf(h)
	if s == nil {
		return badHandle(dat.HandleTypeSRQ)
	}
	return ret(s.Resize(int(n)))
}

//export srSRQSetLW
func srSRQSetLW(h unsafe.Pointer, lw C.DAT_COUNT) C.DAT_RETURN {
	_, s := srqOf(h)
	if s == nil {
		return badHandle(dat.HandleTypeSRQ)
	}
	return ret(s.SetLW(int(lw)))
}
