package dat

import (
	"errors"

	"github.com/softrnic/softrnic/rnic"
)

// ---- posting (spec §6.6.20–§6.6.25, §6.7.3.5) ----

// checkReqFlags validates request completion flags (spec §6.8.1 tables).
func (ep *EP) checkReqFlags(f CompletionFlags) error {
	if f&^(CompletionSuppress|CompletionSolicitedWait|CompletionUnsignalled|CompletionBarrierFence) != 0 {
		return ErrInvalidParameter
	}
	if f&CompletionUnsignalled != 0 && ep.attr.RequestCompletionFlags&CompletionUnsignalled == 0 {
		return ErrInvalidParameter
	}
	return nil
}

// reqState checks the EP state for request posting: Connected, or
// Disconnected (the request is flushed).
func (ep *EP) reqState() (*rnic.QP, error) {
	ep.mu.Lock()
	st, qp := ep.state, ep.qp
	ep.mu.Unlock()
	switch st {
	case EPStateConnected, EPStateDisconnected:
		if qp == nil {
			return nil, ErrInvalidStateEPNotReady
		}
		return qp, nil
	}
	return nil, invalidState(st.invalidStateSub())
}

func sendFlags(f CompletionFlags) rnic.SendFlags {
	var s rnic.SendFlags
	if f&CompletionSuppress == 0 {
		s |= rnic.Signaled
	}
	if f&CompletionSolicitedWait != 0 {
		s |= rnic.Solicited
	}
	if f&CompletionBarrierFence != 0 {
		s |= rnic.Fence
	}
	return s
}

// postReq fills the request slot and posts ep.wr; caller holds sendMu.
func (ep *EP) postReq(qp *rnic.QP, op DTOOp, cookie, length uint64, f CompletionFlags, rmr *RMR, ext bool) error {
	ep.slotMu.Lock()
	if ep.reqSeq-ep.reaped >= uint64(ep.attr.MaxRequestDTOs) {
		// every request queue entry is held by an unreaped completion
		ep.slotMu.Unlock()
		ep.wr = rnic.SendWR{}
		return ErrResourceTEP
	}
	ep.reqSeq++
	seq := ep.reqSeq
	ep.req[seq%uint64(len(ep.req))] = reqSlot{seq: seq, cookie: cookie, length: length, op: op, flags: f, rmr: rmr, ext: ext}
	ep.slotMu.Unlock()
	ep.wr.WRID = seq
	ep.wr.Flags = sendFlags(f)
	// the engine may complete the WR (flush) and run the CQ handler
	// synchronously here: completion takes only slotMu
	err := qp.PostSend(&ep.wr)
	ep.wr = rnic.SendWR{}
	if err != nil {
		ep.slotMu.Lock()
		ep.req[seq%uint64(len(ep.req))] = reqSlot{}
		ep.slotMu.Unlock()
		return mapPostErr(err)
	}
	return nil
}

func mapPostErr(err error) error {
	switch {
	case errors.Is(err, rnic.ErrQueueFull), errors.Is(err, rnic.ErrResource):
		return ErrResourceTEP
	case errors.Is(err, rnic.ErrQPState):
		return ErrInvalidState
	case errors.Is(err, rnic.ErrTooManySGE), errors.Is(err, rnic.ErrInvalidArg):
		return ErrInvalidParameter
	case errors.Is(err, rnic.ErrNotSupported):
		return ErrModelNotSupported
	}
	return ErrInternalError
}

// PostSend is dat_ep_post_send (spec §6.6.20).
func (ep *EP) PostSend(iov []LMRTriplet, cookie uint64, flags CompletionFlags) error {
	return ep.postSend(iov, cookie, flags, false, 0)
}

// PostSendWithInvalidate is dat_ep_post_send_with_invalidate (spec
// §6.6.21): with invalidate set, the peer invalidates rmrContext on receipt
// (RFC 5040 Send with Invalidate).
func (ep *EP) PostSendWithInvalidate(iov []LMRTriplet, cookie uint64, flags CompletionFlags, invalidate bool, rmrContext uint32) error {
	return ep.postSend(iov, cookie, flags, invalidate, rmrContext)
}

func (ep *EP) postSend(iov []LMRTriplet, cookie uint64, flags CompletionFlags, inv bool, stag uint32) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if err := ep.checkReqFlags(flags); err != nil {
		return err
	}
	if len(iov) > ep.attr.MaxRequestIOV {
		return invalidArg(2)
	}
	qp, err := ep.reqState()
	if err != nil {
		return err
	}
	ep.sendMu.Lock()
	defer ep.sendMu.Unlock()
	sgl, total, err := ep.ia.checkIOV(iov, ep.pz, false, ep.sgl[:0])
	if err != nil {
		return err
	}
	if total > ep.attr.MaxMessageSize {
		return ErrLengthError
	}
	ep.wr.SGL = sgl
	ep.wr.Opcode = rnic.OpSend
	if inv {
		ep.wr.Opcode = rnic.OpSendInv
		ep.wr.InvalidateSTag = stag
	}
	return ep.postReq(qp, DTOSend, cookie, total, flags, nil, false)
}

// PostRDMAWrite is dat_ep_post_rdma_write (spec §6.6.25, man page).
func (ep *EP) PostRDMAWrite(iov []LMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags) error {
	return ep.postRDMA(rnic.OpWrite, DTORDMAWrite, iov, cookie, remote, flags, 0)
}

// PostRDMARead is dat_ep_post_rdma_read (spec §6.6.23).
func (ep *EP) PostRDMARead(iov []LMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags) error {
	return ep.postRDMA(rnic.OpRead, DTORDMARead, iov, cookie, remote, flags, 0)
}

func (ep *EP) postRDMA(op rnic.Opcode, dop DTOOp, iov []LMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags, imm uint32) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if err := ep.checkReqFlags(flags); err != nil {
		return err
	}
	maxIOV := ep.attr.MaxRDMAWriteIOV
	if op == rnic.OpRead {
		maxIOV = ep.attr.MaxRDMAReadIOV
	}
	if len(iov) > maxIOV {
		return invalidArg(2)
	}
	qp, err := ep.reqState()
	if err != nil {
		return err
	}
	ep.sendMu.Lock()
	defer ep.sendMu.Unlock()
	sgl, total, err := ep.ia.checkIOV(iov, ep.pz, op == rnic.OpRead, ep.sgl[:0])
	if err != nil {
		return err
	}
	if total > ep.attr.MaxRDMASize || total > remote.SegmentLength {
		return ErrLengthError
	}
	ep.wr.SGL = sgl
	ep.wr.Opcode = op
	ep.wr.RemoteAddr = remote.TargetAddress
	ep.wr.RKey = remote.RMRContext
	ep.wr.Imm = imm
	return ep.postReq(qp, dop, cookie, total, flags, nil, op == rnic.OpWriteImm)
}

// PostRDMAReadToRMR is dat_ep_post_rdma_read_to_rmr (spec §6.6.24): the
// data lands in the memory a local RMR is bound to. The engine reads into
// registered regions, so the RMR triplet is translated to the LMR range it
// is bound over after checking bounds and the RMR's write privilege.
func (ep *EP) PostRDMAReadToRMR(local RMRTriplet, cookie uint64, remote RMRTriplet, flags CompletionFlags) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	var lmr *LMR
	var base uint64
	ep.ia.mu.Lock()
	for h := range ep.ia.objs {
		if r, ok := h.(*RMR); ok {
			r.mu.Lock()
			if r.ctx == local.RMRContext && r.lmr != nil {
				if r.priv&MemPrivRemoteWrite == 0 && r.priv&MemPrivLocalWrite == 0 {
					r.mu.Unlock()
					ep.ia.mu.Unlock()
					return ErrPrivilegesWrite
				}
				end := local.TargetAddress + local.SegmentLength
				if local.TargetAddress < r.target || end > r.target+r.trip.SegmentLength || end < local.TargetAddress {
					r.mu.Unlock()
					ep.ia.mu.Unlock()
					return invalidArg(2)
				}
				lmr, base = r.lmr, r.trip.VirtualAddress+(local.TargetAddress-r.target)
			}
			r.mu.Unlock()
		}
	}
	ep.ia.mu.Unlock()
	if lmr == nil {
		return ErrPrivilegesWrite
	}
	if lmr.priv&MemPrivLocalWrite == 0 {
		return ErrPrivilegesWrite
	}
	iov := [1]LMRTriplet{{LMRContext: lmr.ctx, VirtualAddress: base, SegmentLength: local.SegmentLength}}
	return ep.postRDMA(rnic.OpRead, DTORDMARead, iov[:], cookie, remote, flags, 0)
}

// PostRecv is dat_ep_post_recv (spec §6.6.22). An EP on an SRQ takes its
// receives from the SRQ; posting to it is DAT_INVALID_STATE.
func (ep *EP) PostRecv(iov []LMRTriplet, cookie uint64, flags CompletionFlags) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if ep.srq != nil {
		return ErrInvalidState
	}
	if flags&^(CompletionUnsignalled) != 0 {
		return invalidArg(4)
	}
	if flags&CompletionUnsignalled != 0 && ep.attr.RecvCompletionFlags&CompletionUnsignalled == 0 {
		return invalidArg(4)
	}
	if len(iov) > ep.attr.MaxRecvIOV {
		return invalidArg(2)
	}
	ep.mu.Lock()
	st, qp := ep.state, ep.qp
	ep.mu.Unlock()
	if qp == nil {
		return invalidState(st.invalidStateSub())
	}
	switch st {
	case EPStateDisconnectPending, EPStateCompletionPending:
		return invalidState(st.invalidStateSub())
	}
	ep.recvMu.Lock()
	defer ep.recvMu.Unlock()
	sgl, _, err := ep.ia.checkIOV(iov, ep.pz, true, ep.rsgl[:0])
	if err != nil {
		return err
	}
	ep.slotMu.Lock()
	if ep.rPosted-ep.rReaped >= uint64(ep.attr.MaxRecvDTOs) {
		ep.slotMu.Unlock()
		return ErrResourceTEP
	}
	ep.rcvSeq++
	seq := ep.rcvSeq
	slot := &ep.rcv[seq%uint64(len(ep.rcv))]
	*slot = recvSlot{seq: seq, cookie: cookie, flags: flags}
	ep.rPosted++
	ep.slotMu.Unlock()
	ep.rwr = rnic.RecvWR{WRID: seq, SGL: sgl}
	err = qp.PostRecv(&ep.rwr)
	ep.rwr.SGL = nil
	if err != nil {
		ep.slotMu.Lock()
		*slot = recvSlot{}
		ep.rPosted--
		ep.slotMu.Unlock()
		return mapPostErr(err)
	}
	return nil
}

// ---- iWARP extensions (RFC 7306): DAT_IW extension operations ----

// PostFetchAdd posts an RFC 7306 FetchAdd of add to the 8 bytes at remote;
// the original value lands in local (8 bytes) and in the completion's Result.
func (ep *EP) PostFetchAdd(local LMRTriplet, add uint64, remote RMRTriplet, cookie uint64, flags CompletionFlags) error {
	return ep.postAtomic(rnic.OpAtomicFetchAdd, DTOExtFetchAdd, local, add, 0, remote, cookie, flags)
}

// PostCompareSwap posts an RFC 7306 CmpSwap: if the remote 8 bytes equal
// compare they become swap; the original value lands in local.
func (ep *EP) PostCompareSwap(local LMRTriplet, compare, swap uint64, remote RMRTriplet, cookie uint64, flags CompletionFlags) error {
	return ep.postAtomic(rnic.OpAtomicCmpSwap, DTOExtCompareSwap, local, compare, swap, remote, cookie, flags)
}

func (ep *EP) postAtomic(op rnic.Opcode, dop DTOOp, local LMRTriplet, a, b uint64, remote RMRTriplet, cookie uint64, flags CompletionFlags) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if err := ep.checkReqFlags(flags); err != nil {
		return err
	}
	if local.SegmentLength != 8 || remote.SegmentLength < 8 || remote.TargetAddress%8 != 0 {
		return ErrLengthError
	}
	qp, err := ep.reqState()
	if err != nil {
		return err
	}
	ep.sendMu.Lock()
	defer ep.sendMu.Unlock()
	iov := [1]LMRTriplet{local}
	sgl, _, err := ep.ia.checkIOV(iov[:], ep.pz, true, ep.sgl[:0])
	if err != nil {
		return err
	}
	ep.wr.SGL = sgl
	ep.wr.Opcode = op
	ep.wr.RemoteAddr = remote.TargetAddress
	ep.wr.RKey = remote.RMRContext
	ep.wr.Compare, ep.wr.Swap = a, b
	return ep.postReq(qp, dop, cookie, 8, flags, nil, true)
}

// PostRDMAWriteImmed posts an RDMA Write followed by RFC 7306 Immediate
// Data: the peer's next receive completes with Op DTOExtRecvImmed and imm.
func (ep *EP) PostRDMAWriteImmed(iov []LMRTriplet, cookie uint64, remote RMRTriplet, imm uint32, flags CompletionFlags) error {
	return ep.postRDMA(rnic.OpWriteImm, DTOExtRDMAWriteImmed, iov, cookie, remote, flags, imm)
}

// Bind is dat_rmr_bind (spec §6.7.3.5): it binds the RMR to triplet of lmr
// through ep's request queue and returns the new rmr_context at once; the
// bind completes with a DAT_RMR_BIND_COMPLETION_EVENT on ep's request EVD.
// A zero-length triplet unbinds.
func (r *RMR) Bind(lmr *LMR, triplet LMRTriplet, priv MemPriv, va VAType, ep *EP, cookie uint64, flags CompletionFlags) (uint32, error) {
	if !alive(r) {
		return 0, ErrInvalidHandleRMR
	}
	if triplet.SegmentLength != 0 && (!alive(lmr) || lmr.ia != r.ia) {
		return 0, ErrInvalidHandleLMR
	}
	if !alive(ep) || ep.ia != r.ia {
		return 0, ErrInvalidHandleEP
	}
	if r.ep != nil && r.ep != ep {
		return 0, ErrInvalidParameter
	}
	if priv&^(MemPrivRemoteRead|MemPrivRemoteWrite|MemPrivLocalRead|MemPrivLocalWrite|MemPrivRemoteAtomic) != 0 {
		return 0, invalidArg(4)
	}
	if err := ep.checkReqFlags(flags &^ CompletionSolicitedWait); err != nil {
		return 0, err
	}
	if triplet.SegmentLength != 0 {
		if lmr.pz != r.pz || ep.pz != r.pz {
			return 0, ErrProtectionViolation
		}
		if va != lmr.va {
			return 0, ErrModelNotSupported
		}
		if (priv&MemPrivRemoteRead != 0 && lmr.priv&MemPrivLocalRead == 0) ||
			(priv&MemPrivRemoteWrite != 0 && lmr.priv&MemPrivLocalWrite == 0) {
			return 0, ErrPrivilegesViolation
		}
		end := triplet.VirtualAddress + triplet.SegmentLength
		if triplet.LMRContext != lmr.ctx || end < triplet.VirtualAddress || triplet.VirtualAddress < lmr.addr ||
			end > lmr.addr+uint64(len(lmr.mem)) {
			return 0, invalidArg(3)
		}
	}
	qp, err := ep.reqState()
	if err != nil {
		return 0, err
	}
	ep.sendMu.Lock()
	defer ep.sendMu.Unlock()
	old := r.mw.STag()
	ctx := old&^0xff | (old+1)&0xff // a fresh key on each bind
	if r.mw.Type() == 2 && r.mw.Valid() {
		// a bound type 2 window must be invalidated before it is rebound
		ep.wr.Opcode = rnic.OpLocalInv
		ep.wr.InvalidateSTag = old
		if err := ep.postReq(qp, DTOSend, cookie, 0, CompletionSuppress, r, false); err != nil {
			return 0, err
		}
	}
	ep.wr.Opcode = rnic.OpBindMW
	ep.wr.Bind = rnic.BindInfo{MW: r.mw, Access: memAccess(priv) &^ rnic.AccessMWBind, Key: uint8(ctx)}
	if triplet.SegmentLength != 0 {
		ep.wr.Bind.MR = lmr.mr
		ep.wr.Bind.Addr = triplet.VirtualAddress
		ep.wr.Bind.Length = triplet.SegmentLength
	} else if r.lmr != nil {
		ep.wr.Bind.MR = r.lmr.mr
	} else {
		ep.wr.Bind.MR = nil
	}
	if ep.wr.Bind.MR == nil {
		ep.wr = rnic.SendWR{}
		return 0, invalidArg(3)
	}
	if err := ep.postReq(qp, DTOSend, cookie, 0, flags, r, false); err != nil {
		return 0, err
	}
	r.mu.Lock()
	if r.lmr != nil {
		r.lmr.rmrs.Add(-1)
	}
	r.lmr, r.trip, r.priv, r.va, r.ctx, r.target = nil, triplet, priv, va, ctx, triplet.VirtualAddress
	if triplet.SegmentLength != 0 {
		r.lmr = lmr
		lmr.rmrs.Add(1)
	} else {
		r.ctx = 0
	}
	r.mu.Unlock()
	return ctx, nil
}

// ---- completions ----

// cqFor returns the engine CQ feeding evd (created on first use), or the
// IA's discard CQ for a nil EVD.
func (ia *IA) cqFor(e *EVD) (*rnic.CQ, error) {
	if e == nil {
		ia.mu.Lock()
		defer ia.mu.Unlock()
		if ia.nullCQ == nil {
			cq, err := ia.dev.CreateCQ(4096)
			if err != nil {
				return nil, ErrResourceTEVD
			}
			ia.nullCQ = cq
			cq.SetHandler(func(cq *rnic.CQ) { drainCQ(ia, nil, cq) })
			cq.Arm(false)
		}
		return ia.nullCQ, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cq == nil {
		depth := min(max(4*len(e.q), 256), ia.dev.Config().MaxCQE)
		cq, err := ia.dev.CreateCQ(depth)
		if err != nil {
			return nil, ErrResourceTEVD
		}
		e.cq = cq
		cq.SetHandler(func(cq *rnic.CQ) { drainCQ(ia, e, cq) })
		cq.Arm(false)
	}
	return e.cq, nil
}

type cqDrain struct {
	wc [32]rnic.Completion
}

// drainCQ moves engine completions into DAT events. It runs on transport
// goroutines (the CQ handler) and never blocks.
func drainCQ(ia *IA, e *EVD, cq *rnic.CQ) {
	var d *cqDrain
	if e != nil {
		e.drainMu.Lock()
		defer e.drainMu.Unlock()
		d = &e.drain
	} else {
		ia.nullMu.Lock()
		defer ia.nullMu.Unlock()
		d = &ia.nullDrain
	}
	rearmed := false
	for {
		n, err := cq.Poll(d.wc[:])
		for i := 0; i < n; i++ {
			ia.completion(e, &d.wc[i])
		}
		if err != nil && e != nil {
			e.mu.Lock()
			first := !e.overflowed
			e.overflowed = true
			e.mu.Unlock()
			if first {
				e.ia.asyncEvent(AsyncErrorEVDOverflow, e, EVDOverflowError)
			}
		}
		if n == len(d.wc) {
			continue
		}
		if rearmed {
			return
		}
		cq.Arm(false)
		rearmed = true
	}
}

func dtoStatus(s rnic.Status) DTOStatus {
	switch s {
	case rnic.StatusSuccess:
		return DTOSuccess
	case rnic.StatusLocLenErr:
		return DTOErrLocalLength
	case rnic.StatusLocQPOpErr, rnic.StatusFatalErr:
		return DTOErrLocalEP
	case rnic.StatusLocProtErr, rnic.StatusLocAccessErr:
		return DTOErrLocalProtection
	case rnic.StatusWRFlushErr:
		return DTOErrFlushed
	case rnic.StatusMWBindErr:
		return RMROperationFailed
	case rnic.StatusBadRespErr:
		return DTOErrBadResponse
	case rnic.StatusRemAccessErr:
		return DTOErrRemoteAccess
	case rnic.StatusRemInvReqErr, rnic.StatusRemOpErr, rnic.StatusRemAbortErr:
		return DTOErrRemoteResponder
	case rnic.StatusRNRRetryExcErr:
		return DTOErrReceiverNotReady
	}
	return DTOErrTransport
}

// completion translates one engine completion polled from e's CQ (e is nil
// for the IA's discard CQ).
func (ia *IA) completion(e *EVD, wc *rnic.Completion) {
	ep := ia.epByQPN(wc.QPNum)
	if ep == nil {
		return
	}
	var ev Event
	var gen uint32
	notify := true
	if wc.Opcode == rnic.WCRecv || wc.Opcode == rnic.WCRecvRDMAWithImm {
		var cookie uint64
		var flags CompletionFlags
		if wc.SRQ {
			srq := ep.srq
			if srq == nil {
				return
			}
			var ok bool
			if cookie, ok = srq.complete(wc.WRID); !ok {
				return
			}
		} else {
			ep.slotMu.Lock()
			slot := &ep.rcv[wc.WRID%uint64(len(ep.rcv))]
			if slot.seq != wc.WRID {
				ep.slotMu.Unlock()
				return
			}
			cookie, flags = slot.cookie, slot.flags
			*slot = recvSlot{}
			ep.rDone++
			gen = ep.gen
			ep.slotMu.Unlock()
		}
		ev = Event{Number: DTOCompletionEvent, DTO: DTOCompletion{EP: ep, Cookie: cookie, Status: dtoStatus(wc.Status),
			Length: uint64(wc.ByteLen), Op: DTOReceive}}
		if wc.Flags&rnic.WCWithInv != 0 {
			ev.DTO.Op = DTOReceiveWithInvalidate
			ev.DTO.RMRContext = wc.InvalidatedSTag
		}
		if wc.Flags&rnic.WCWithImm != 0 || wc.Opcode == rnic.WCRecvRDMAWithImm {
			ev.Number = IWExtensionDTOEvent
			ev.DTO.Op = DTOExtRecvImmed
			ev.DTO.Immediate = wc.Imm
		}
		ev.rkind, ev.rgen, ev.rep = reapRecv, gen, ep
		if wc.SRQ {
			ev.rkind = reapSRQ
		}
		rf := ep.attr.RecvCompletionFlags
		switch {
		case rf&CompletionUnsignalled != 0:
			notify = flags&CompletionUnsignalled == 0
		case rf&CompletionSolicitedWait != 0:
			notify = wc.Flags&rnic.WCSolicited != 0
		}
	} else {
		ep.slotMu.Lock()
		slot := ep.req[wc.WRID%uint64(len(ep.req))]
		gen = ep.gen
		ep.slotMu.Unlock()
		if slot.seq != wc.WRID {
			return
		}
		st := dtoStatus(wc.Status)
		if slot.rmr != nil {
			ev = Event{Number: RMRBindCompletionEvent, RMRBind: RMRBindCompletion{RMR: slot.rmr, Cookie: slot.cookie, Status: st}}
		} else {
			ev = Event{Number: DTOCompletionEvent, DTO: DTOCompletion{EP: ep, Cookie: slot.cookie, Status: st,
				Length: slot.length, Op: slot.op}}
			if slot.ext {
				ev.Number = IWExtensionDTOEvent
			}
		}
		notify = slot.flags&CompletionUnsignalled == 0
		ev.rkind, ev.rgen, ev.rseq, ev.rep = reapReq, gen, slot.seq, ep
	}
	if e == nil {
		// a stream nobody listens to (DAT_HANDLE_NULL EVD): reap at once
		if ev.rkind != 0 {
			ep.reap(&ev)
		}
		return
	}
	if err := ep.holdOrPost(e, ev, notify); err != nil && errors.Is(err, ErrQueueFull) {
		// spec §6.3.1: a connection whose completion overflowed its EVD is broken
		ep.broken()
	}
}
