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

// DAT_IA_FIELD_ALL and DAT_PROVIDER_FIELD_ALL of udat.h (package dat's
// IAFieldAll has no bits for the transport and vendor attribute lists).
const (
	iaFieldAll       = uint64(C.DAT_IA_FIELD_ALL)
	providerFieldAll = uint64(C.DAT_PROVIDER_FIELD_ALL)
)

// ibExtensionVersion is DAT_IB_EXTENSION_VERSION: the IB extension
// operations of dat_ib_extensions.h are the interface libdat2 and dtest
// use, so the provider reports DAT_EXTENSION_IB.
const ibExtensionVersion = C.DAT_IB_EXTENSION_VERSION

//export srIAOpen
func srIAOpen(name *C.char, qlen C.DAT_COUNT, asyncEVD *C.DAT_EVD_HANDLE, iaOut *C.DAT_IA_HANDLE) C.DAT_RETURN {
	if name == nil {
		return badArg(1)
	}
	if iaOut == nil {
		return ret(dat.ErrInvalidHandleIA)
	}
	if asyncEVD == nil {
		return badArg(3)
	}
	pr := lookupProvider(C.GoString(name))
	if pr == nil {
		return ret(dat.ErrNameNotRegistered)
	}
	var given *dat.EVD
	var givenRec *rec
	switch h := unsafe.Pointer(*asyncEVD); {
	case h == nil:
	case uintptr(h) == 1: // DAT_EVD_ASYNC_EXISTS
		return ret(dat.ErrModelNotSupported)
	default:
		givenRec, given = evdOf(h)
		if given == nil {
			return ret(dat.ErrInvalidHandleEVDAsync)
		}
	}
	ia, async, err := registry.OpenIA(pr.name, int(qlen), given)
	if err != nil {
		return ret(err)
	}
	r := &iaRec{prov: pr, ia: ia, recs: map[*rec]struct{}{}}
	r.obj, r.rec.ia = ia, r
	r.attach(&r.rec, dat.HandleTypeIA)
	if a, _, err := ia.Query(0, 0); err == nil {
		putAddr(&r.c.local, a.Address)
	}
	if givenRec != nil {
		r.async = givenRec
	} else {
		r.async = newRec(r, async, dat.HandleTypeEVD)
	}
	provMu.Lock()
	pr.opens++
	provMu.Unlock()
	*asyncEVD = C.DAT_EVD_HANDLE(r.async.handle())
	*iaOut = C.DAT_IA_HANDLE(r.handle())
	return 0
}

//export srIAClose
func srIAClose(h unsafe.Pointer, flags C.uint32_t) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if err := ia.ia.Close(dat.CloseFlags(flags)); err != nil {
		return ret(err)
	}
	provMu.Lock()
	ia.prov.opens--
	provMu.Unlock()
	ia.closeAll()
	return 0
}

//export srIAHARelated
func srIAHARelated(h unsafe.Pointer, name *C.char, answer *C.DAT_BOOLEAN) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if name == nil {
		return badArg(2)
	}
	if answer == nil {
		return badArg(3)
	}
	rel, err := registry.ProvidersRelated(ia.prov.name, C.GoString(name))
	if err != nil {
		return ret(err)
	}
	*answer = boolean(rel == dat.HATrue)
	return 0
}

//export srIAQuery
func srIAQuery(h unsafe.Pointer, asyncEVD *C.DAT_EVD_HANDLE, iaMask C.DAT_IA_ATTR_MASK, iaAttr *C.DAT_IA_ATTR,
	prMask C.DAT_PROVIDER_ATTR_MASK, prAttr *C.DAT_PROVIDER_ATTR) C.DAT_RETURN {
	ia := iaOf(h)
	if ia == nil {
		return badHandle(dat.HandleTypeIA)
	}
	if uint64(iaMask)&^iaFieldAll != 0 {
		return badArg(3)
	}
	if uint64(prMask)&^providerFieldAll != 0 {
		return badArg(5)
	}
	if iaMask != 0 && iaAttr == nil {
		return badArg(4)
	}
	if prMask != 0 && prAttr == nil {
		return badArg(6)
	}
	a, p, err := ia.ia.Query(dat.IAFieldAll, 0)
	if err != nil {
		return ret(err)
	}
	if asyncEVD != nil {
		*asyncEVD = C.DAT_EVD_HANDLE(ia.async.handle())
	}
	if iaMask != 0 {
		ia.fillIAAttr(iaAttr, &a)
	}
	if prMask != 0 {
		ia.fillProviderAttr(prAttr, &p)
	}
	return 0
}

func count(n int) C.DAT_COUNT {
	if n > 1<<31-1 {
		return 1<<31 - 1
	}
	return C.DAT_COUNT(n)
}

func segLen(n uint64) C.DAT_SEG_LENGTH {
	if n > 1<<32-1 {
		return 1<<32 - 1
	}
	return C.DAT_SEG_LENGTH(n)
}

func (ia *iaRec) fillIAAttr(o *C.DAT_IA_ATTR, a *dat.IAAttr) {
	*o = C.DAT_IA_ATTR{}
	cstr(&o.adapter_name[0], len(o.adapter_name), a.AdapterName)
	cstr(&o.vendor_name[0], len(o.vendor_name), a.VendorName)
	o.hardware_version_major = C.DAT_UINT32(a.HardwareMajor)
	o.hardware_version_minor = C.DAT_UINT32(a.HardwareMinor)
	o.firmware_version_major = C.DAT_UINT32(a.FirmwareMajor)
	o.firmware_version_minor = C.DAT_UINT32(a.FirmwareMinor)
	o.ia_address_ptr = (*C.DAT_SOCK_ADDR)(unsafe.Pointer(&ia.c.local))
	o.max_eps = count(a.MaxEPs)
	o.max_dto_per_ep = count(a.MaxDTOPerEP)
	o.max_rdma_read_per_ep_in = count(a.MaxRDMAReadPerEPIn)
	o.max_rdma_read_per_ep_out = count(a.MaxRDMAReadPerEPOut)
	o.max_evds = count(a.MaxEVDs)
	o.max_evd_qlen = count(a.MaxEVDQLen)
	o.max_iov_segments_per_dto = count(min(a.MaxIOVSegmentsPerDTO, len(iovBuf{})))
	o.max_lmrs = count(a.MaxLMRs)
	o.max_lmr_block_size = segLen(a.MaxLMRBlockSize)
	o.max_lmr_virtual_address = C.DAT_VADDR(a.MaxLMRVirtualAddress)
	o.max_pzs = count(a.MaxPZs)
	o.max_message_size = segLen(a.MaxMessageSize)
	o.max_rdma_size = segLen(a.MaxRDMASize)
	o.max_rmrs = count(a.MaxRMRs)
	o.max_rmr_target_address = C.DAT_VADDR(a.MaxRMRTargetAddress)
	o.max_srqs = count(a.MaxSRQs)
	o.max_ep_per_srq = count(a.MaxEPPerSRQ)
	o.max_recv_per_srq = count(a.MaxRecvPerSRQ)
	o.max_iov_segments_per_rdma_read = count(min(a.MaxIOVSegmentsRDMARead, len(iovBuf{})))
	o.max_iov_segments_per_rdma_write = count(min(a.MaxIOVSegmentsRDMAWrite, len(iovBuf{})))
	o.max_rdma_read_in = count(a.MaxRDMAReadIn)
	o.max_rdma_read_out = count(a.MaxRDMAReadOut)
	o.max_rdma_read_per_ep_in_guaranteed = boolean(a.MaxRDMAReadInGuaranteed)
	o.max_rdma_read_per_ep_out_guaranteed = boolean(a.MaxRDMAReadOutGuaranteed)
	o.zb_supported = boolean(a.ZBSupported)
	o.extension_supported = C.DAT_EXTENSION_IB
	o.extension_version = ibExtensionVersion
}

func (ia *iaRec) fillProviderAttr(o *C.DAT_PROVIDER_ATTR, p *dat.ProviderAttr) {
	C.memset(unsafe.Pointer(o), 0, C.sizeof_DAT_PROVIDER_ATTR)
	// provider_name is the IA name, as OFA's providers report their
	// device_name; libdat2's dat_ia_close keys its registry with it and
	// with the DAPL version and thread safety below, so those echo the
	// dat.conf entry.
	cstr(&o.provider_name[0], len(o.provider_name), ia.prov.name)
	o.provider_version_major = C.DAT_UINT32(p.ProviderVersionMajor)
	o.provider_version_minor = C.DAT_UINT32(p.ProviderVersionMinor)
	o.dapl_version_major = C.DAT_UINT32(dat.VersionMajor)
	o.dapl_version_minor = C.DAT_UINT32(dat.VersionMinor)
	var mt C.DAT_MEM_TYPE
	for _, t := range p.LMRMemTypes {
		mt |= C.DAT_MEM_TYPE(t)
	}
	o.lmr_mem_types_supported = mt
	o.iov_ownership_on_return = C.DAT_IOV_CONSUMER
	o.dat_qos_supported = C.DAT_QOS(p.QoS)
	o.completion_flags_supported = C.DAT_COMPLETION_FLAGS(p.CompletionFlags)
	o.is_thread_safe = boolean(ia.prov.threadSafeRegistered())
	o.max_private_data_size = count(p.MaxPrivateDataSize - len(rejectHeader))
	o.supports_multipath = boolean(p.SupportsMultipath)
	o.ep_creator = C.DAT_PSP_CREATES_EP_IFASKED
	o.pz_support = C.DAT_PZ_UNIQUE
	o.optimal_buffer_alignment = C.DAT_UINT32(p.OptimalBufferAlignment)
	C.sr_set_merging(o, boolean(p.EVDStreamMergingAll))
	o.srq_supported = boolean(p.SRQSupported)
	o.srq_watermarks_supported = C.DAT_COUNT(p.SRQWatermarksSupported)
	o.srq_ep_pz_difference_supported = boolean(p.SRQPZDifferenceSupport)
	o.srq_info_supported = C.DAT_COUNT(p.SRQInfoSupported)
	o.ep_recv_info_supported = C.DAT_COUNT(p.EPRecvInfoSupported)
	o.lmr_sync_req = boolean(p.LMRSyncRequired)
	o.dto_async_return_guaranteed = boolean(p.DTOAsyncReturnGuarantee)
	o.rdma_write_for_rdma_read_req = boolean(p.RDMAWriteForRDMARead)
	o.rdma_read_lmr_rmr_context_exposure = boolean(p.RDMAReadLMRRMRContextExposure)
	o.rmr_scope_supported = C.DAT_RMR_SCOPE_PZ
	o.is_signal_safe = C.DAT_FALSE
	o.ha_supported = boolean(p.HASupported)
	o.ha_loadbalancing = C.DAT_HA_LB_NONE
	o.num_provider_specific_attr = C.SR_NUM_PROVIDER_ATTRS
	o.provider_specific_attr = &C.sr_provider_attrs[0]
}

// threadSafeRegistered reports the thread safety libdat2 registered the
// provider with. libdat2's dat_ia_close looks the registration up with the
// DAT_PROVIDER_INFO it builds from dat_ia_query's provider attributes, so
// is_thread_safe must echo the dat.conf entry the IA was opened through.
// With both entries of softrnic dat-conf registered, the nonthreadsafe one
// (what DAT_THREADSAFE makes dtest and dapltest ask for) wins.
func (p *provider) threadSafeRegistered() bool {
	provMu.Lock()
	defer provMu.Unlock()
	for k := range p.regs {
		if !k.threadSafe {
			return false
		}
	}
	return len(p.regs) > 0
}
