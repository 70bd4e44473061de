//go:build udapl

package main

/*
#include "provider.h"
*/
import "C"

import (
	"errors"
	"net"
	"unsafe"

	"github.com/softrnic/softrnic/dat"
)

// ---- service points (spec §6.4.4) -----------------------------------------

func crEVD(h unsafe.Pointer) (*dat.EVD, C.DAT_RETURN) {
	_, e := evdOf(h)
	if e == nil {
		return nil, ret(dat.ErrInvalidHandleEVDCR)
	}
	return e, 0
}

// srPSPCreate is dat_psp_create, or dat_psp_create_any when any is set
// (the chosen qualifier is written there).
//
//export srPSPCreate
func srPSPCreate(h unsafe.Pointer, qual C.DAT_CONN_QUAL, any *C.DAT_CONN_QUAL, evdH unsafe.Pointer, flags C.uint32_t,
	out *C.DAT_PSP_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(5)
	}
	evd, rc := crEVD(evdH)
	if rc != 0 {
		return rc
	}
	var p *dat.PSP
	var err error
	if any != nil {
		var q dat.ConnQual
		p, q, err = ia.ia.CreatePSPAny(evd, dat.PSPFlags(flags))
		if err == nil {
			*any = C.DAT_CONN_QUAL(q)
		}
	} else {
		p, err = ia.ia.CreatePSP(dat.ConnQual(qual), evd, dat.PSPFlags(flags))
	}
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_PSP_HANDLE(newRec(ia, p, dat.HandleTypePSP).handle())
	return 0
}

//export srPSPQuery
func srPSPQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_PSP_PARAM) C.DAT_RETURN {
	r := lookup(h, dat.HandleTypePSP)
	if r == nil {
		return badHandle(dat.HandleTypePSP)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := r.obj.(*dat.PSP).Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_PSP_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.conn_qual = C.DAT_CONN_QUAL(q.ConnQual)
	p.evd_handle = C.DAT_EVD_HANDLE(r.ia.cHandle(q.EVD))
	p.psp_flags = C.DAT_PSP_FLAGS(q.Flags)
	return 0
}

//export srRSPCreate
func srRSPCreate(h unsafe.Pointer, qual C.DAT_CONN_QUAL, epH, evdH unsafe.Pointer, out *C.DAT_RSP_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(5)
	}
	_, ep := epOf(epH)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	evd, rc := crEVD(evdH)
	if rc != 0 {
		return rc
	}
	r, err := ia.ia.CreateRSP(dat.ConnQual(qual), ep, evd)
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_RSP_HANDLE(newRec(ia, r, dat.HandleTypeRSP).handle())
	return 0
}

//export srRSPQuery
func srRSPQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_RSP_PARAM) C.DAT_RETURN {
	r := lookup(h, dat.HandleTypeRSP)
	if r == nil {
		return badHandle(dat.HandleTypeRSP)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := r.obj.(*dat.RSP).Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_RSP_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.conn_qual = C.DAT_CONN_QUAL(q.ConnQual)
	p.evd_handle = C.DAT_EVD_HANDLE(r.ia.cHandle(q.EVD))
	p.ep_handle = C.DAT_EP_HANDLE(r.ia.cHandle(q.EP))
	return 0
}

// csComm is the DAT_COMM of every CSP: TCP over IP.
var csComm = C.DAT_COMM{domain: C.AF_INET, _type: C.SOCK_STREAM}

//export srCSPCreate
func srCSPCreate(h unsafe.Pointer, comm *C.DAT_COMM, addr *C.DAT_SOCK_ADDR, evdH unsafe.Pointer, out *C.DAT_CSP_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(5)
	}
	if comm != nil && comm._type != C.SOCK_STREAM {
		return ret(dat.ErrCommNotSupported)
	}
	evd, rc := crEVD(evdH)
	if rc != 0 {
		return rc
	}
	c, err := ia.ia.CreateCSP("tcp", addrOf(addr), evd)
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_CSP_HANDLE(newRec(ia, c, dat.HandleTypeCSP).handle())
	return 0
}

//export srCSPQuery
func srCSPQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_CSP_PARAM) C.DAT_RETURN {
	r := lookup(h, dat.HandleTypeCSP)
	if r == nil {
		return badHandle(dat.HandleTypeCSP)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := r.obj.(*dat.CSP).Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_CSP_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.comm = &csComm
	p.address_ptr = putAddr(&r.c.local, q.Address)
	p.evd_handle = C.DAT_EVD_HANDLE(r.ia.cHandle(q.EVD))
	return 0
}

// srSPFree frees a PSP, RSP or CSP. An RSP consumed by a connection request
// (spec §6.4.4.3: it is destroyed when its request arrives) has no package
// dat object left; freeing its handle succeeds.
//
//export srSPFree
func srSPFree(h unsafe.Pointer, t C.uint32_t) C.DAT_RETURN {
	r := lookup(h, dat.HandleType(t))
	if r == nil {
		return badHandle(dat.HandleType(t))
	}
	var err error
	switch sp := r.obj.(type) {
	case *dat.PSP:
		err = sp.Free()
	case *dat.RSP:
		err = sp.Free()
		if errors.Is(err, dat.ErrInvalidHandle) {
			err = nil
		}
	case *dat.CSP:
		err = sp.Free()
	}
	if err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

// ---- connection requests (spec §6.4.5) ------------------------------------

//export srCRQuery
func srCRQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_CR_PARAM) C.DAT_RETURN {
	r, cr := crOf(h)
	if cr == nil {
		return badHandle(dat.HandleTypeCR)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := cr.Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_CR_PARAM{}
	p.remote_ia_address_ptr = (*C.DAT_SOCK_ADDR)(unsafe.Pointer(&r.c.remote))
	if ta, ok := q.RemoteAddr.(*net.TCPAddr); ok && ta == nil {
		p.remote_ia_address_ptr = nil
	}
	p.remote_port_qual = C.DAT_PORT_QUAL(q.RemotePortQual)
	// the C copy made when the request was first seen (crRec); the
	// Consumer may write to it (dtest does) and pass it to dat_cr_accept
	if r.c.pdata_len > 0 {
		p.private_data_size = r.c.pdata_len
		p.private_data = C.DAT_PVOID(unsafe.Pointer(&r.c.pdata[0]))
	}
	p.local_ep_handle = C.DAT_EP_HANDLE(r.ia.cHandle(q.LocalEP))
	return 0
}

//export srCRAccept
func srCRAccept(h, epH unsafe.Pointer, n C.DAT_COUNT, pd unsafe.Pointer) C.DAT_RETURN {
	r, cr := crOf(h)
	if cr == nil {
		return badHandle(dat.HandleTypeCR)
	}
	var ep *dat.EP
	if epH != nil {
		if _, ep = epOf(epH); ep == nil {
			return badHandle(dat.HandleTypeEP)
		}
	}
	if n < 0 || (n > 0 && pd == nil) {
		return badArg(4)
	}
	q, _ := cr.Query(dat.CRFieldLocalEPHandle)
	if err := cr.Accept(ep, goBytes(pd, n)); err != nil {
		return ret(err)
	}
	if ep == nil && q.LocalEP != nil {
		r.ia.recOf(q.LocalEP) // the provider EP now belongs to the Consumer
	}
	r.free()
	return 0
}

//export srCRReject
func srCRReject(h unsafe.Pointer, n C.DAT_COUNT, pd unsafe.Pointer) C.DAT_RETURN {
	r, cr := crOf(h)
	if cr == nil {
		return badHandle(dat.HandleTypeCR)
	}
	if n < 0 || (n > 0 && pd == nil) {
		return badArg(2)
	}
	// OFA cma convention: a Consumer's reject carries a 4-byte header
	// before its private data (see rejectHeader)
	data := make([]byte, 0, len(rejectHeader)+int(n))
	data = append(data, rejectHeader[:]...)
	data = append(data, goBytes(pd, n)...)
	if err := cr.Reject(data); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

//export srCRHandoff
func srCRHandoff(h unsafe.Pointer, qual C.DAT_CONN_QUAL) C.DAT_RETURN {
	_, cr := crOf(h)
	if cr == nil {
		return badHandle(dat.HandleTypeCR)
	}
	return ret(cr.Handoff(dat.ConnQual(qual)))
}
