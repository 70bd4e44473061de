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

// ---- attributes ----------------------------------------------------------

// epAttr converts a DAT_EP_ATTR the way OFA DAPL applies one, which
// unmodified Consumers rely on (dapl_ep_create.c bounds the attributes only
// from above and the verbs QP has one send SGE limit):
//   - a zero limit is the provider's default: dtest leaves max_message_size
//     and the RDMA Read/Write IOV limits 0, and an EP without a request or
//     receive EVD may leave its queue sizes 0;
//   - zero RDMA Read/Write IOV limits take max_request_iov;
//   - max_rdma_size is not enforced on posts: dtest asks for 64 KiB and
//     writes its whole buffer (4 MiB by default), so the EP gets the
//     provider's maximum.
func epAttr(a *C.DAT_EP_ATTR) dat.EPAttr {
	d := dat.DefaultEPAttr()
	o := dat.EPAttr{
		ServiceType: dat.ServiceType(a.service_type), MaxMessageSize: uint64(a.max_message_size),
		MaxRDMASize: uint64(a.max_rdma_size), QoS: dat.QoS(a.qos),
		RecvCompletionFlags:    dat.CompletionFlags(a.recv_completion_flags),
		RequestCompletionFlags: dat.CompletionFlags(a.request_completion_flags),
		MaxRecvDTOs:            int(a.max_recv_dtos), MaxRequestDTOs: int(a.max_request_dtos),
		MaxRecvIOV: int(a.max_recv_iov), MaxRequestIOV: int(a.max_request_iov),
		MaxRDMAReadIn: int(a.max_rdma_read_in), MaxRDMAReadOut: int(a.max_rdma_read_out),
		SRQSoftHW: int(a.srq_soft_hw), MaxRDMAReadIOV: int(a.max_rdma_read_iov),
		MaxRDMAWriteIOV: int(a.max_rdma_write_iov),
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = d.MaxMessageSize
	}
	if o.MaxRecvDTOs == 0 {
		o.MaxRecvDTOs = 1
	}
	if o.MaxRequestDTOs == 0 {
		o.MaxRequestDTOs = 1
	}
	if o.MaxRecvIOV == 0 {
		o.MaxRecvIOV = 1
	}
	if o.MaxRequestIOV == 0 {
		o.MaxRequestIOV = 1
	}
	if o.MaxRDMAReadIOV == 0 {
		o.MaxRDMAReadIOV = o.MaxRequestIOV
	}
	if o.MaxRDMAWriteIOV == 0 {
		o.MaxRDMAWriteIOV = o.MaxRequestIOV
	}
	o.MaxRDMASize = d.MaxRDMASize
	return o
}

func putEPAttr(o *C.DAT_EP_ATTR, a *dat.EPAttr) {
	*o = C.DAT_EP_ATTR{}
	o.service_type = C.DAT_SERVICE_TYPE(a.ServiceType)
	o.max_message_size = segLen(a.MaxMessageSize)
	o.max_rdma_size = segLen(a.MaxRDMASize)
	o.qos = C.DAT_QOS(a.QoS)
	o.recv_completion_flags = C.DAT_COMPLETION_FLAGS(a.RecvCompletionFlags)
	o.request_completion_flags = C.DAT_COMPLETION_FLAGS(a.RequestCompletionFlags)
	o.max_recv_dtos = count(a.MaxRecvDTOs)
	o.max_request_dtos = count(a.MaxRequestDTOs)
	o.max_recv_iov = count(a.MaxRecvIOV)
	o.max_request_iov = count(a.MaxRequestIOV)
	o.max_rdma_read_in = count(a.MaxRDMAReadIn)
	o.max_rdma_read_out = count(a.MaxRDMAReadOut)
	o.srq_soft_hw = C.DAT_COUNT(a.SRQSoftHW)
	o.max_rdma_read_iov = count(a.MaxRDMAReadIOV)
	o.max_rdma_write_iov = count(a.MaxRDMAWriteIOV)
}

// ---- create, query, modify, free (spec §6.6.4–12) ------------------------

func optEVD(h unsafe.Pointer) (*dat.EVD, bool) {
	if h == nil {
		return nil, true
	}
	_, e := evdOf(h)
	return e, e != nil
}

//export srEPCreate
func srEPCreate(h, pzH, recvH, reqH, connH, srqH unsafe.Pointer, attr *C.DAT_EP_ATTR, out *C.DAT_EP_HANDLE) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if out == nil {
		if srqH != nil {
			return badArg(8)
		}
		return badArg(7)
	}
	var pz *dat.PZ
	if pzH != nil {
		if _, pz = pzOf(pzH); pz == nil {
			return badHandle(dat.HandleTypePZ)
		}
	}
	recv, ok1 := optEVD(recvH)
	req, ok2 := optEVD(reqH)
	conn, ok3 := optEVD(connH)
	switch {
	case !ok1:
		return ret(dat.ErrInvalidHandleEVDRecv)
	case !ok2:
		return ret(dat.ErrInvalidHandleEVDRequest)
	case !ok3:
		return ret(dat.ErrInvalidHandleEVDConn)
	}
	var a *dat.EPAttr
	if attr != nil {
		v := epAttr(attr)
		a = &v
	}
	var ep *dat.EP
	var err error
	if srqH != nil {
		_, srq := srqOf(srqH)
		if srq == nil {
			return badHandle(dat.HandleTypeSRQ)
		}
		if a == nil {
			v := dat.DefaultEPAttr()
			a = &v
		}
		ep, err = ia.ia.CreateEPWithSRQ(pz, recv, req, conn, srq, a)
	} else {
		ep, err = ia.ia.CreateEP(pz, recv, req, conn, a)
	}
	if err != nil {
		return ret(err)
	}
	*out = C.DAT_EP_HANDLE(newRec(ia, ep, dat.HandleTypeEP).handle())
	return 0
}

//export srEPQuery
func srEPQuery(h unsafe.Pointer, mask C.DAT_EP_PARAM_MASK, p *C.DAT_EP_PARAM) C.DAT_RETURN {
	r, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	if p == nil {
		return badArg(3)
	}
	q, err := ep.Query(uint64(mask))
	if err != nil {
		return ret(err)
	}
	ia := r.ia
	*p = C.DAT_EP_PARAM{}
	p.ia_handle = C.DAT_IA_HANDLE(ia.handle())
	p.ep_state = C.DAT_EP_STATE(q.State)
	p.comm = C.DAT_COMM{domain: C.AF_INET, _type: C.SOCK_STREAM}
	p.local_ia_address_ptr = (*C.DAT_SOCK_ADDR)(unsafe.Pointer(&ia.c.local))
	if la := putAddr(&r.c.local, q.LocalAddr); la != nil {
		p.local_ia_address_ptr = la
	}
	p.local_port_qual = C.DAT_PORT_QUAL(q.LocalPort)
	p.remote_ia_address_ptr = putAddr(&r.c.remote, q.RemoteAddr)
	p.remote_port_qual = C.DAT_PORT_QUAL(q.RemotePort)
	p.pz_handle = C.DAT_PZ_HANDLE(ia.cHandle(q.PZ))
	p.recv_evd_handle = C.DAT_EVD_HANDLE(ia.cHandle(q.RecvEVD))
	p.request_evd_handle = C.DAT_EVD_HANDLE(ia.cHandle(q.RequestEVD))
	p.connect_evd_handle = C.DAT_EVD_HANDLE(ia.cHandle(q.ConnectEVD))
	p.srq_handle = C.DAT_SRQ_HANDLE(ia.cHandle(q.SRQ))
	putEPAttr(&p.ep_attr, &q.Attr)
	return 0
}

//export srEPModify
func srEPModify(h unsafe.Pointer, mask C.DAT_EP_PARAM_MASK, p *C.DAT_EP_PARAM) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	if p == nil {
		return badArg(3)
	}
	m := uint64(mask)
	cur, err := ep.Query(dat.EPFieldAll)
	if err != nil {
		return ret(err)
	}
	var q dat.EPParam
	if m&dat.EPFieldPZHandle != 0 && p.pz_handle != nil {
		if _, q.PZ = pzOf(unsafe.Pointer(p.pz_handle)); q.PZ == nil {
			return badHandle(dat.HandleTypePZ)
		}
	}
	var ok bool
	if m&dat.EPFieldRecvEVDHandle != 0 {
		if q.RecvEVD, ok = optEVD(unsafe.Pointer(p.recv_evd_handle)); !ok {
			return ret(dat.ErrInvalidHandleEVDRecv)
		}
	}
	if m&dat.EPFieldRequestEVDHandle != 0 {
		if q.RequestEVD, ok = optEVD(unsafe.Pointer(p.request_evd_handle)); !ok {
			return ret(dat.ErrInvalidHandleEVDRequest)
		}
	}
	if m&dat.EPFieldConnectEVDHandle != 0 {
		if q.ConnectEVD, ok = optEVD(unsafe.Pointer(p.connect_evd_handle)); !ok {
			return ret(dat.ErrInvalidHandleEVDConn)
		}
	}
	if m&dat.EPFieldEPAttrAll != 0 {
		// package dat replaces the attributes as a whole: merge the
		// selected DAT_EP_FIELD_EP_ATTR_* fields into the current ones
		a, in := cur.Attr, epAttr(&p.ep_attr)
		fields := []struct {
			bit uint64
			set func()
		}{
			{C.DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, func() { a.ServiceType = in.ServiceType }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, func() { a.MaxMessageSize = in.MaxMessageSize }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE, func() { a.MaxRDMASize = in.MaxRDMASize }},
			{C.DAT_EP_FIELD_EP_ATTR_QOS, func() { a.QoS = in.QoS }},
			{C.DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, func() { a.RecvCompletionFlags = in.RecvCompletionFlags }},
			{C.DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, func() { a.RequestCompletionFlags = in.RequestCompletionFlags }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, func() { a.MaxRecvDTOs = in.MaxRecvDTOs }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, func() { a.MaxRequestDTOs = in.MaxRequestDTOs }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, func() { a.MaxRecvIOV = in.MaxRecvIOV }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, func() { a.MaxRequestIOV = in.MaxRequestIOV }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN, func() { a.MaxRDMAReadIn = in.MaxRDMAReadIn }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT, func() { a.MaxRDMAReadOut = in.MaxRDMAReadOut }},
			{C.DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW, func() { a.SRQSoftHW = in.SRQSoftHW }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV, func() { a.MaxRDMAReadIOV = in.MaxRDMAReadIOV }},
			{C.DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV, func() { a.MaxRDMAWriteIOV = in.MaxRDMAWriteIOV }},
		}
		for _, f := range fields {
			if m&f.bit != 0 {
				f.set()
			}
		}
		q.Attr = a
		m |= dat.EPFieldEPAttrAll // transport/provider-specific attribute lists are not kept
	}
	return ret(ep.Modify(m, q))
}

//export srEPFree
func srEPFree(h unsafe.Pointer) C.DAT_RETURN {
	r, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	if err := ep.Free(); err != nil {
		return ret(err)
	}
	r.free()
	return 0
}

//export srEPGetStatus
func srEPGetStatus(h unsafe.Pointer, state *C.DAT_EP_STATE, recvIdle, reqIdle *C.DAT_BOOLEAN) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	s, ri, qi, err := ep.GetStatus()
	if err != nil {
		return ret(err)
	}
	if state != nil {
		*state = C.DAT_EP_STATE(s)
	}
	if recvIdle != nil {
		*recvIdle = boolean(ri)
	}
	if reqIdle != nil {
		*reqIdle = boolean(qi)
	}
	return 0
}

//export srEPReset
func srEPReset(h unsafe.Pointer) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	return ret(ep.Reset())
}

//export srEPRecvQuery
func srEPRecvQuery(h unsafe.Pointer, nbufs, span *C.DAT_COUNT) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	n, s, err := ep.RecvQuery()
	if err != nil {
		return ret(err)
	}
	if nbufs != nil {
		*nbufs = C.DAT_COUNT(n)
	}
	if span != nil {
		*span = C.DAT_COUNT(s)
	}
	return 0
}

//export srEPSetWatermark
func srEPSetWatermark(h unsafe.Pointer, soft, hard C.DAT_COUNT) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	return ret(ep.SetWatermark(int(soft), int(hard)))
}

// ---- connections (spec §6.6.14–17) ---------------------------------------

//export srEPConnect
func srEPConnect(h unsafe.Pointer, addr *C.DAT_SOCK_ADDR, qual C.DAT_CONN_QUAL, t C.DAT_TIMEOUT, n C.DAT_COUNT,
	pd unsafe.Pointer, qos, flags C.uint32_t, common C.int) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	ra := addrOf(addr)
	if ra == nil {
		return ret(dat.ErrInvalidAddressMalformed)
	}
	if n < 0 || (n > 0 && pd == nil) {
		if common != 0 {
			return badArg(4)
		}
		return badArg(5)
	}
	data := goBytes(pd, n)
	if common != 0 {
		return ret(ep.CommonConnect(ra, timeout(t), data))
	}
	return ret(ep.Connect(ra, dat.ConnQual(qual), timeout(t), data, dat.QoS(qos), dat.ConnectFlags(flags)))
}

//export srEPDupConnect
func srEPDupConnect(h, dupH unsafe.Pointer, t C.DAT_TIMEOUT, n C.DAT_COUNT, pd unsafe.Pointer, qos C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	_, dup := epOf(dupH)
	if dup == nil {
		return ret(dat.Error{Type: dat.TypeInvalidHandle, Subtype: dat.SubInvalidHandle2})
	}
	if n < 0 || (n > 0 && pd == nil) {
		return badArg(4)
	}
	return ret(ep.DupConnect(dup, timeout(t), goBytes(pd, n), dat.QoS(qos)))
}

//export srEPDisconnect
func srEPDisconnect(h unsafe.Pointer, flags C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	return ret(ep.Disconnect(dat.CloseFlags(flags)))
}

// ---- data transfer (spec §6.6.20–25, IB extensions) -----------------------

//export srEPPostSend
func srEPPostSend(h unsafe.Pointer, n C.DAT_COUNT, iov *C.DAT_LMR_TRIPLET, cookie C.uint64_t, flags C.uint32_t,
	inv C.int, rmr C.DAT_RMR_CONTEXT) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	var buf iovBuf
	v, ok := lmrIOV(iov, n, &buf)
	if !ok {
		return badArg(2)
	}
	if inv != 0 {
		return ret(ep.PostSendWithInvalidate(v, uint64(cookie), dat.CompletionFlags(flags), true, uint32(rmr)))
	}
	return ret(ep.PostSend(v, uint64(cookie), dat.CompletionFlags(flags)))
}

//export srEPPostRecv
func srEPPostRecv(h unsafe.Pointer, n C.DAT_COUNT, iov *C.DAT_LMR_TRIPLET, cookie C.uint64_t, flags C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	var buf iovBuf
	v, ok := lmrIOV(iov, n, &buf)
	if !ok {
		return badArg(2)
	}
	return ret(ep.PostRecv(v, uint64(cookie), dat.CompletionFlags(flags)))
}

// srEPPostRDMA posts an RDMA Read (op 0), Write (1) or Write with immediate
// data (2, the IB extension).
//
//export srEPPostRDMA
func srEPPostRDMA(h unsafe.Pointer, op C.int, n C.DAT_COUNT, iov *C.DAT_LMR_TRIPLET, cookie C.uint64_t,
	remote *C.DAT_RMR_TRIPLET, flags C.uint32_t, imm C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	var buf iovBuf
	v, ok := lmrIOV(iov, n, &buf)
	if !ok {
		return badArg(2)
	}
	if remote == nil {
		return badArg(5)
	}
	rt, f := rmrTriplet(remote), dat.CompletionFlags(flags)
	switch op {
	case 0:
		return ret(ep.PostRDMARead(v, uint64(cookie), rt, f))
	case 1:
		return ret(ep.PostRDMAWrite(v, uint64(cookie), rt, f))
	}
	return ret(ep.PostRDMAWriteImmed(v, uint64(cookie), rt, uint32(imm), f))
}

//export srEPPostReadToRMR
func srEPPostReadToRMR(h unsafe.Pointer, local *C.DAT_RMR_TRIPLET, cookie C.uint64_t, remote *C.DAT_RMR_TRIPLET, flags C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	if local == nil {
		return badArg(2)
	}
	if remote == nil {
		return badArg(4)
	}
	return ret(ep.PostRDMAReadToRMR(rmrTriplet(local), uint64(cookie), rmrTriplet(remote), dat.CompletionFlags(flags)))
}

// srEPPostAtomic posts an IB extension fetch-and-add (op 0) or
// compare-and-swap (op 1) on the single local segment lmr.
//
//export srEPPostAtomic
func srEPPostAtomic(h unsafe.Pointer, op C.int, a, b C.uint64_t, lmr *C.DAT_LMR_TRIPLET, cookie C.uint64_t,
	remote *C.DAT_RMR_TRIPLET, flags C.uint32_t) C.DAT_RETURN {
	_, ep := epOf(h)
	if ep == nil {
		return badHandle(dat.HandleTypeEP)
	}
	if lmr == nil || remote == nil {
		return badArg(3)
	}
	var buf iovBuf
	v, _ := lmrIOV(lmr, 1, &buf)
	rt, f := rmrTriplet(remote), dat.CompletionFlags(flags)
	if op == 0 {
		return ret(ep.PostFetchAdd(v[0], uint64(a), rt, uint64(cookie), f))
	}
	return ret(ep.PostCompareSwap(v[0], uint64(a), uint64(b), rt, uint64(cookie), f))
}
