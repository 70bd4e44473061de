//go:build udapl

package main

/*
#include "provider.h"
#include <sys/socket.h>
*/
import "C"

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"unsafe"

	"github.com/softrnic/softrnic/dat"
)

// ---- return codes -----------------------------------------------------

// ret is the DAT_RETURN of err (package dat errors carry it exactly; any
// other error is DAT_INTERNAL_ERROR).
func ret(err error) C.DAT_RETURN {
	if debug && err != nil {
		warn("softrnic: %v", err)
	}
	return C.DAT_RETURN(dat.CodeOf(err))
}

var debug = os.Getenv("SOFTRNIC_UDAPL_DEBUG") != ""

// badHandle is DAT_INVALID_HANDLE with the subtype naming type t.
func badHandle(t dat.HandleType) C.DAT_RETURN {
	switch t {
	case dat.HandleTypeIA:
		return ret(dat.ErrInvalidHandleIA)
	case dat.HandleTypeEP:
		return ret(dat.ErrInvalidHandleEP)
	case dat.HandleTypeLMR:
		return ret(dat.ErrInvalidHandleLMR)
	case dat.HandleTypeRMR:
		return ret(dat.ErrInvalidHandleRMR)
	case dat.HandleTypePZ:
		return ret(dat.ErrInvalidHandlePZ)
	case dat.HandleTypePSP:
		return ret(dat.ErrInvalidHandlePSP)
	case dat.HandleTypeRSP:
		return ret(dat.ErrInvalidHandleRSP)
	case dat.HandleTypeCR:
		return ret(dat.ErrInvalidHandleCR)
	case dat.HandleTypeCNO:
		return ret(dat.ErrInvalidHandleCNO)
	case dat.HandleTypeSRQ:
		return ret(dat.ErrInvalidHandleSRQ)
	case dat.HandleTypeCSP:
		return ret(dat.ErrInvalidHandleCSP)
	}
	return ret(dat.ErrInvalidHandle)
}

// badArg is DAT_INVALID_PARAMETER with subtype DAT_INVALID_ARGn.
func badArg(n int) C.DAT_RETURN {
	return ret(dat.Error{Type: dat.TypeInvalidParameter, Subtype: dat.SubInvalidArg1 + dat.Subtype(n-1)})
}

// ---- scalars ------------------------------------------------------------

// timeout converts a DAT_TIMEOUT (microseconds, ~0 infinite).
func timeout(t C.DAT_TIMEOUT) dat.Timeout {
	if uint32(t) == ^uint32(0) {
		return dat.TimeoutInfinite
	}
	return dat.Timeout(t) * 1000
}

func boolean(b bool) C.DAT_BOOLEAN {
	if b {
		return C.DAT_TRUE
	}
	return C.DAT_FALSE
}

// goBytes copies n bytes at p (nil for none).
func goBytes(p unsafe.Pointer, n C.DAT_COUNT) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return C.GoBytes(p, C.int(n))
}

// ---- socket addresses ---------------------------------------------------

// addrOf reads a DAT_IA_ADDRESS_PTR (struct sockaddr, AF_INET or AF_INET6).
func addrOf(p *C.DAT_SOCK_ADDR) *net.TCPAddr {
	if p == nil {
		return nil
	}
	switch p.sa_family {
	case C.AF_INET:
		b := unsafe.Slice((*byte)(unsafe.Pointer(p)), C.sizeof_struct_sockaddr_in)
		return &net.TCPAddr{IP: net.IPv4(b[4], b[5], b[6], b[7]), Port: int(binary.BigEndian.Uint16(b[2:4]))}
	case C.AF_INET6:
		b := unsafe.Slice((*byte)(unsafe.Pointer(p)), C.sizeof_struct_sockaddr_in6)
		ip := make(net.IP, 16)
		copy(ip, b[8:24])
		return &net.TCPAddr{IP: ip, Port: int(binary.BigEndian.Uint16(b[2:4]))}
	}
	return nil
}

// putAddr writes a into the sockaddr storage dst and returns it as a
// DAT_IA_ADDRESS_PTR (NULL when a has no IP).
func putAddr(dst *C.DAT_SOCK_ADDR6, a net.Addr) *C.DAT_SOCK_ADDR {
	var ip net.IP
	var port int
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, port = v.IP, v.Port
	case *net.UDPAddr:
		ip, port = v.IP, v.Port
	case *net.IPAddr:
		ip = v.IP
	case interface{ AddrPort() netip.AddrPort }: // rocev2.Addr: IP and service port
		ap := v.AddrPort()
		ip, port = ap.Addr().AsSlice(), int(ap.Port())
	}
	if ip == nil {
		return nil
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(dst)), C.sizeof_DAT_SOCK_ADDR6)
	clear(b)
	sa := (*C.DAT_SOCK_ADDR)(unsafe.Pointer(dst))
	if ip4 := ip.To4(); ip4 != nil {
		sa.sa_family = C.AF_INET
		binary.BigEndian.PutUint16(b[2:4], uint16(port))
		copy(b[4:8], ip4)
	} else {
		sa.sa_family = C.AF_INET6
		binary.BigEndian.PutUint16(b[2:4], uint16(port))
		copy(b[8:24], ip.To16())
	}
	return sa
}

// ---- I/O vectors -------------------------------------------------------

// iovBuf holds a short I/O vector without allocating.
type iovBuf [16]dat.LMRTriplet

// lmrIOV converts n DAT_LMR_TRIPLETs at p into buf (or a new slice when
// longer than buf).
func lmrIOV(p *C.DAT_LMR_TRIPLET, n C.DAT_COUNT, buf *iovBuf) ([]dat.LMRTriplet, bool) {
	if n < 0 || (n > 0 && p == nil) {
		return nil, false
	}
	var out []dat.LMRTriplet
	if int(n) <= len(buf) {
		out = buf[:n]
	} else {
		out = make([]dat.LMRTriplet, n)
	}
	src := unsafe.Slice(p, int(n))
	for i := range src {
		out[i] = dat.LMRTriplet{LMRContext: uint32(src[i].lmr_context),
			VirtualAddress: uint64(src[i].virtual_address), SegmentLength: uint64(src[i].segment_length)}
	}
	return out, true
}

func rmrTriplet(p *C.DAT_RMR_TRIPLET) dat.RMRTriplet {
	return dat.RMRTriplet{RMRContext: uint32(p.rmr_context), TargetAddress: uint64(p.virtual_address),
		SegmentLength: uint64(p.segment_length)}
}

func putLMRTriplet(dst *C.DAT_LMR_TRIPLET, t dat.LMRTriplet) {
	dst.virtual_address = C.DAT_VADDR(t.VirtualAddress)
	dst.segment_length = C.DAT_SEG_LENGTH(t.SegmentLength)
	dst.lmr_context = C.DAT_LMR_CONTEXT(t.LMRContext)
}

// ---- constants that differ between package dat and dat.h ----------------

// dtoOp maps a package dat DTO operation to DAT_DTOS (dat.h counts
// DAT_DTO_BIND_MW, package dat does not; the IB extension operations are
// dat_ib_extensions.h's DAT_IB_DTOS).
func dtoOp(op dat.DTOOp) C.DAT_DTOS {
	switch op {
	case dat.DTOSend:
		return C.DAT_DTO_SEND
	case dat.DTORDMAWrite:
		return C.DAT_DTO_RDMA_WRITE
	case dat.DTORDMARead:
		return C.DAT_DTO_RDMA_READ
	case dat.DTOReceive:
		return C.DAT_DTO_RECEIVE
	case dat.DTOReceiveWithInvalidate:
		return C.DAT_DTO_RECEIVE_WITH_INVALIDATE
	case dat.DTOLMRFMR:
		return C.DAT_DTO_LMR_FMR
	case dat.DTOLMRInvalidate:
		return C.DAT_DTO_LMR_INVALIDATE
	case dat.DTOExtRDMAWriteImmed:
		return C.DAT_IB_DTO_RDMA_WRITE_IMMED
	case dat.DTOExtRecvImmed:
		return C.DAT_IB_DTO_RECV_IMMED
	case dat.DTOExtFetchAdd:
		return C.DAT_IB_DTO_FETCH_ADD
	case dat.DTOExtCompareSwap:
		return C.DAT_IB_DTO_CMP_SWAP
	}
	return C.DAT_DTOS(op)
}

// ibExtType is the DAT_IB_EXT_TYPE of an extension completion. A receive
// with immediate data is reported as the target of an RDMA Write with
// immediate (DAT_IB_RDMA_WRITE_IMMED_DATA): the IB extension API has no
// Send with immediate, so a DAPL peer cannot produce anything else.
func ibExtType(op dat.DTOOp) C.DAT_IB_EXT_TYPE {
	switch op {
	case dat.DTOExtRDMAWriteImmed:
		return C.DAT_IB_RDMA_WRITE_IMMED
	case dat.DTOExtRecvImmed:
		return C.DAT_IB_RDMA_WRITE_IMMED_DATA
	case dat.DTOExtFetchAdd:
		return C.DAT_IB_FETCH_AND_ADD
	case dat.DTOExtCompareSwap:
		return C.DAT_IB_CMP_AND_SWAP
	}
	return C.DAT_IB_RDMA_WRITE_IMMED
}

func srqState(s dat.SRQState) C.DAT_SRQ_STATE {
	if s == dat.SRQStateError {
		return C.DAT_SRQ_STATE_ERROR
	}
	return C.DAT_SRQ_STATE_OPERATIONAL
}

// ---- events -------------------------------------------------------------

// rejectHeader is the 4-byte header OFA DAPL's cma provider puts before the
// Consumer's private data of a reject (dapl/openib_cma/cm.c struct
// dapl_pdata_hdr: be32 DAT major<<24 | DAT minor<<16 | provider major<<8 |
// provider minor, DAT 2.0 and provider 2.0), so an active side can tell a
// Consumer's reject from an abnormal one.
var rejectHeader = [4]byte{2, 0, 2, 0}

// putPData copies pd into h's private data buffer and returns its C view.
func putPData(h *C.struct_sr_handle, pd []byte) (C.DAT_PVOID, C.DAT_COUNT) {
	if len(pd) == 0 {
		h.pdata_len = 0
		return nil, 0
	}
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&h.pdata[0])), C.SR_PDATA_MAX), pd)
	h.pdata_len = C.DAT_COUNT(n)
	return C.DAT_PVOID(unsafe.Pointer(&h.pdata[0])), C.DAT_COUNT(n)
}

// fillEvent writes the package dat event ev of ia into the DAT_EVENT out.
func (ia *iaRec) fillEvent(out *C.DAT_EVENT, ev *dat.Event) {
	if debug {
		warn("softrnic: event %v dto=%+v conn=%+v async=%+v dev=%+v", ev.Number, ev.DTO, ev.Conn, ev.Async, ia.ia.Device().Counters().Snapshot())
	}
	*out = C.DAT_EVENT{}
	out.event_number = C.DAT_EVENT_NUMBER(ev.Number)
	out.evd_handle = C.DAT_EVD_HANDLE(ia.cHandle(ev.EVD))
	data := unsafe.Pointer(&out.event_data)
	switch ev.Number {
	case dat.DTOCompletionEvent, dat.IWExtensionDTOEvent:
		d := (*C.DAT_DTO_COMPLETION_EVENT_DATA)(data)
		d.ep_handle = C.DAT_EP_HANDLE(ia.cHandle(ev.DTO.EP))
		*(*uint64)(unsafe.Pointer(&d.user_cookie)) = ev.DTO.Cookie
		d.status = C.DAT_DTO_COMPLETION_STATUS(ev.DTO.Status)
		d.transfered_length = C.DAT_SEG_LENGTH(ev.DTO.Length)
		d.operation = dtoOp(ev.DTO.Op)
		d.rmr_context = C.DAT_RMR_CONTEXT(ev.DTO.RMRContext)
		if ev.Number == dat.IWExtensionDTOEvent {
			out.event_number = C.DAT_IB_DTO_EVENT
			x := (*C.DAT_IB_EXTENSION_EVENT_DATA)(unsafe.Pointer(&out.event_extension_data[0]))
			x._type = ibExtType(ev.DTO.Op)
			x.status = C.DAT_OP_SUCCESS
			if ev.DTO.Status != dat.DTOSuccess {
				x.status = C.DAT_IB_OP_ERR
			}
			*(*C.DAT_UINT32)(unsafe.Pointer(&x.val)) = C.DAT_UINT32(ev.DTO.Immediate)
		}
	case dat.RMRBindCompletionEvent:
		d := (*C.DAT_RMR_BIND_COMPLETION_EVENT_DATA)(data)
		d.rmr_handle = C.DAT_RMR_HANDLE(ia.cHandle(ev.RMRBind.RMR))
		*(*uint64)(unsafe.Pointer(&d.user_cookie)) = ev.RMRBind.Cookie
		d.status = C.DAT_DTO_COMPLETION_STATUS(ev.RMRBind.Status)
	case dat.ConnectionRequestEvent:
		d := (*C.DAT_CR_ARRIVAL_EVENT_DATA)(data)
		*(*unsafe.Pointer)(unsafe.Pointer(&d.sp_handle)) = ia.cHandle(ev.CR.SP)
		d.local_ia_address_ptr = (*C.DAT_SOCK_ADDR)(unsafe.Pointer(&ia.c.local))
		d.conn_qual = C.DAT_CONN_QUAL(ev.CR.ConnQual)
		d.cr_handle = C.DAT_CR_HANDLE(ia.crRec(ev.CR.CR).handle())
		d.truncate_flag = boolean(ev.CR.Truncated)
	case dat.ConnectionEventEstablished, dat.ConnectionEventPeerRejected, dat.ConnectionEventNonPeerRejected,
		dat.ConnectionEventAcceptCompletionError, dat.ConnectionEventDisconnected, dat.ConnectionEventBroken,
		dat.ConnectionEventTimedOut, dat.ConnectionEventUnreachable:
		d := (*C.DAT_CONNECTION_EVENT_DATA)(data)
		r := ia.recOf(ev.Conn.EP)
		d.ep_handle = C.DAT_EP_HANDLE(r.handle())
		pd := ev.Conn.PrivateData
		if ev.Number == dat.ConnectionEventPeerRejected {
			// OFA cma convention: a Consumer's reject carries the header
			if len(pd) < len(rejectHeader) {
				out.event_number = C.DAT_CONNECTION_EVENT_NON_PEER_REJECTED
				pd = nil
			} else {
				pd = pd[len(rejectHeader):]
			}
		}
		if r != nil && len(pd) > 0 {
			d.private_data, d.private_data_size = putPData(r.c, pd)
		}
	case dat.SoftwareEvent:
		d := (*C.DAT_SOFTWARE_EVENT_DATA)(data)
		if p, ok := ev.Software.(swPointer); ok {
			d.pointer = C.DAT_PVOID(p.p)
		}
	default:
		if ev.Number&0x08000 != 0 { // asynchronous events (DAT_ASYNC_ERROR_*, HA, SRQ)
			d := (*C.DAT_ASYNCH_ERROR_EVENT_DATA)(data)
			d.dat_handle = C.DAT_HANDLE(ia.cHandle(ev.Async.Handle))
			d.reason = C.DAT_COUNT(ev.Async.Reason)
		}
	}
}

// swPointer is the data of a software event posted through the C API.
type swPointer struct{ p unsafe.Pointer }

// crRec returns the record of a connection request, copying its private
// data and remote address into the C handle when it is first seen.
func (ia *iaRec) crRec(cr *dat.CR) *rec {
	r, fresh := ia.recOfNew(cr)
	if r == nil || !fresh {
		return r
	}
	p, err := cr.Query(dat.CRFieldAll)
	if err == nil {
		putPData(r.c, p.PrivateData)
		putAddr(&r.c.remote, p.RemoteAddr)
	}
	return r
}
