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

// ---- EVD (spec §6.3.4) ----------------------------------------------------

//export srEVDCreate
func srEVDCreate(h unsafe.Pointer, qlen C.DAT_COUNT, cnoH unsafe.Pointer, flags C.uint32_t, out *C.DAT_EVD_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(5)
	}
	var cno *dat.CNO
	if cnoH != nil {
		if _, cno = cnoOf(cnoH); cno == nil {
			return badHandle(dat.HandleTypeCNO)
		}
	}
	e, err := ia.ia.CreateEVD(int(qlen), cno, dat.EVDFlags(flags))
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_EVD_HANDLE(newRec(ia, e, dat.HandleTypeEVD).handle())
	return 0
}

//export srEVDQuery
func srEVDQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_EVD_PARAM) C.DAT_RETURN {
	r, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := e.Query(uint32(mask))
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_EVD_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.evd_qlen = C.DAT_COUNT(q.QLen)
	p.evd_state = C.DAT_EVD_STATE(q.State)
	p.cno_handle = C.DAT_CNO_HANDLE(r.ia.cHandle(q.CNO))
	p.evd_flags = C.DAT_EVD_FLAGS(q.Flags)
	return 0
}

//export srEVDModifyCNO
func srEVDModifyCNO(h, cnoH unsafe.Pointer) C.DAT_RETURN {
	_, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	var cno *dat.CNO
	if cnoH != nil {
		if _, cno = cnoOf(cnoH); cno == nil {
			return badHandle(dat.HandleTypeCNO)
		}
	}
	return ret(e.ModifyCNO(cno))
}

//export srEVDEnable
func srEVDEnable(h unsafe.Pointer, on C.int) C.DAT_RETURN {
	_, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if on != 0 {
		return ret(e.Enable())
	}
	return ret(e.Disable())
}

//export srEVDUnwaitable
func srEVDUnwaitable(h unsafe.Pointer, on C.int) C.DAT_RETURN {
	_, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if on != 0 {
		return ret(e.SetUnwaitable())
	}
	return ret(e.ClearUnwaitable())
}

//export srEVDWait
func srEVDWait(h unsafe.Pointer, t C.DAT_TIMEOUT, threshold C.DAT_COUNT, out *C.DAT_EVENT, nmore *C.DAT_COUNT) C.DAT_RETURN {
	r, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if out == nil {
		return badArg(4)
	}
	ev, n, err := e.Wait(nil, timeout(t), int(threshold))
	if nmore != nil {
		*nmore = C.DAT_COUNT(n)
	}
	if err != nil {
		return ret(err)
	}
	r.ia.fillEvent(out, &ev)
	return 0
}

//export srEVDDequeue
func srEVDDequeue(h unsafe.Pointer, out *C.DAT_EVENT) C.DAT_RETURN {
	r, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if out == nil {
		return badArg(2)
	}
	ev, err := e.Dequeue()
	if err != nil {
		return ret(err)
	}
	r.ia.fillEvent(out, &ev)
	return 0
}

//export srEVDResize
func srEVDResize(h unsafe.Pointer, qlen C.DAT_COUNT) C.DAT_RETURN {
	_, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	return ret(e.Resize(int(qlen)))
}

//export srEVDPostSE
func srEVDPostSE(h unsafe.Pointer, ev *C.DAT_EVENT) C.DAT_RETURN {
	_, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if ev == nil || ev.event_number != C.DAT_SOFTWARE_EVENT {
		return badArg(2)
	}
	d := (*C.DAT_SOFTWARE_EVENT_DATA)(unsafe.Pointer(&ev.event_data))
	return ret(e.PostSE(swPointer{unsafe.Pointer(d.pointer)}))
}

//export srEVDFree
func srEVDFree(h unsafe.Pointer) C.DAT_RETURN {
	r, e := evdOf(h)
	if e == nil {
		return badHandle(dat.HandleTypeEVD)
	}
	if err := e.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

// ---- CNO (spec §6.3.2) ----------------------------------------------------

// cnoAgent is a Consumer's DAT_OS_WAIT_PROXY_AGENT.
type cnoAgent struct {
	instance unsafe.Pointer
	fn       unsafe.Pointer // DAT_AGENT_FUNC
}

// waitAgent wraps a C proxy agent as a package dat WaitAgent.
func (ia *iaRec) waitAgent(instance, fn unsafe.Pointer) (dat.WaitAgent, *cnoAgent) {
	if fn == nil {
		return nil, nil
	}
	a := &cnoAgent{instance: instance, fn: fn}
	return func(e *dat.EVD) {
		C.sr_call_agent(C.DAT_AGENT_FUNC(a.fn), C.DAT_PVOID(a.instance), C.DAT_EVD_HANDLE(ia.cHandle(e)))
	}, a
}

//export srCNOCreate
func srCNOCreate(h, instance, fn unsafe.Pointer, out *C.DAT_CNO_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		return badArg(3)
	}
	agent, a := ia.waitAgent(instance, fn)
	c, err := ia.ia.CreateCNO(agent)
	if err != nil {
		return ret(err)
	}
	r := newRec(ia, c, dat.HandleTypeCNO)
	r.cno = a
	*out = C.DAT_CNO_HANDLE(r.handle())
	return 0
}

//export srCNOFDCreate
func srCNOFDCreate(h unsafe.Pointer, fd *C.DAT_FD, out *C.DAT_CNO_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if fd == nil {
		return badArg(2)
	}
	if out == nil {
		return badArg(3)
	}
	c, f, err := ia.ia.CreateCNOFD()
	if err != nil {
		return ret(err)
	}
	r := newRec(ia, c, dat.HandleTypeCNO)
	*fd = C.DAT_FD(f.Fd())
	*out = C.DAT_CNO_HANDLE(r.handle())
	return 0
}

//export srCNOModifyAgent
func srCNOModifyAgent(h, instance, fn unsafe.Pointer) C.DAT_RETURN {
	r, c := cnoOf(h)
	if c == nil {
		return badHandle(dat.HandleTypeCNO)
	}
	agent, a := r.ia.waitAgent(instance, fn)
	if err := c.ModifyAgent(agent); err != nil {
		return ret(err)
	}
	r.cno = a
	return 0
}

//export srCNOQuery
func srCNOQuery(h unsafe.Pointer, mask C.uint32_t, p *C.DAT_CNO_PARAM) C.DAT_RETURN {
	r, c := cnoOf(h)
	if c == nil {
		return badHandle(dat.HandleTypeCNO)
	}
	if p == nil {
		return badArg(3)
	}
	// DAT_CNO_PARAM_MASK of udat.h (IA 0x1, proxy type 0x2, proxy 0x3, all 0x4)
	if mask > C.DAT_CNO_FIELD_ALL {
		return badArg(2)
	}
	q, err := c.Query(dat.CNOFieldAll)
	if err != nil {
		return ret(err)
	}
	*p = C.DAT_CNO_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(r.ia.handle())
	p.proxy_type = C.DAT_PROXY_TYPE_NONE
	switch {
	case q.FD != nil:
		p.proxy_type = C.DAT_PROXY_TYPE_FD
		*(*C.DAT_FD)(unsafe.Pointer(&p.proxy)) = C.DAT_FD(q.FD.Fd())
	case r.cno != nil && q.Agent != nil:
		p.proxy_type = C.DAT_PROXY_TYPE_AGENT
		ag := (*C.DAT_OS_WAIT_PROXY_AGENT)(unsafe.Pointer(&p.proxy))
		ag.instance_data = C.DAT_PVOID(r.cno.instance)
		ag.proxy_agent_func = C.DAT_AGENT_FUNC(r.cno.fn)
	}
	return 0
}

//export srCNOFree
func srCNOFree(h unsafe.Pointer) C.DAT_RETURN {
	r, c := cnoOf(h)
	if c == nil {
		return badHandle(dat.HandleTypeCNO)
	}
	if err := c.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

//export srCNOWait
func srCNOWait(h unsafe.Pointer, t C.DAT_TIMEOUT, out *C.DAT_EVD_HANDLE) C.DAT_RETURN {
	r, c := cnoOf(h)
	if c == nil {
		return badHandle(dat.HandleTypeCNO)
	}
	if out == nil {
		return badArg(3)
	}
	e, err := c.Wait(nil, timeout(t))
	*out = C.DAT_EVD_HANDLE(r.ia.cHandle(e))
	return ret(err)
}

//export srCNOTrigger
func srCNOTrigger(h unsafe.Pointer, out *C.DAT_EVD_HANDLE) C.DAT_RETURN {
	r, c := cnoOf(h)
	if c == nil {
		return badHandle(dat.HandleTypeCNO)
	}
	if out == nil {
		return badArg(2)
	}
	e, err := c.Trigger()
	*out = C.DAT_EVD_HANDLE(r.ia.cHandle(e))
	return ret(err)
}
