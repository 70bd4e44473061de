package rnic

// The transport SPI: what a wire transport (rnic/iwarp, rnic/rocev2) uses to carry a QP.
// Applications never need it; they use [QP] (see the package documentation, "Transport SPI").

// TransportQP is a transport's handle on the QP it carries, returned by [AttachTransport]:
// the calls only a transport makes (taking and completing work, driving the state machine,
// validating remote accesses, counting traffic). Each method is safe for concurrent use.
type TransportQP struct {
	q *QP
}

// QP returns the queue pair (for its number, attributes and state).
func (t *TransportQP) QP() *QP { return t.q }

// AttachTransport binds transport t to the Idle QP qp and returns the transport's handle.
// A QP carries at most one transport in its life (ErrAttached); a QP that is not Idle, or
// is being destroyed, cannot be attached (ErrQPState).
func AttachTransport(qp *QP, t QPTransport) (*TransportQP, error) {
	if err := qp.attach(t); err != nil {
		return nil, err
	}
	return &TransportQP{q: qp}, nil
}

// Established moves the attached Idle QP to RTS and posts EventCommEstablished.
func (t *TransportQP) Established() error { return t.q.established() }

// EnterTerminate moves the QP to Terminate (RFC 5040 §5): the transport found a protocol
// error and is sending a Terminate message. It is followed by Fatal.
func (t *TransportQP) EnterTerminate() { t.q.enterTerminate() }

// InError reports whether the QP is in Error, without taking its lock (QP.State takes it):
// a check a transport makes on every packet.
func (t *TransportQP) InError() bool { return t.q.state.get() == QPError }

// Fatal moves the QP to Error because of err (posting an async event of type ev unless the
// QP was already in Error) and asks the transport to abort (QPTransport.Disconnect(false)).
// Work is flushed when the transport calls TransportDone.
func (t *TransportQP) Fatal(ev EventType, err error) { t.q.fatal(ev, err) }

// TransportDone is called by the transport once its goroutines have stopped and it no
// longer touches work-request memory. The QP moves to Error and all unfinished work is
// flushed with StatusWRFlushErr. err (may be nil) is the reason; if the QP was not already
// in Error, EventDisconnected is posted with it.
func (t *TransportQP) TransportDone(err error) { t.q.transportDone(err) }

// NextSend returns the next send WQE in post order with its SGL resolved, or nil when none
// is waiting or the QP is not in RTS/Closing. A WQE whose SGL fails the local checks is
// completed with StatusLocProtErr (or StatusLocLenErr) here, the QP is moved to Error, and
// nil is returned.
func (t *TransportQP) NextSend() *SendWQE { return t.q.nextSend() }

// SendPending reports whether NextSend has work waiting.
func (t *TransportQP) SendPending() bool { return t.q.sendPending() }

// IsOldest reports whether w is the oldest unfinished send WQE (every WQE posted before it
// has completed): the condition for a LocalFence.
func (t *TransportQP) IsOldest(w *SendWQE) bool { return t.q.isOldest(w) }

// CompleteSend finishes a send WQE taken with NextSend. Completions are generated in post
// order, for signaled WRs and for every error. It does not change the QP state: on an error
// the transport also calls Fatal. Completing a WQE twice, or after it was flushed, is ignored.
func (t *TransportQP) CompleteSend(w *SendWQE, st Status) { t.q.completeSend(w, st) }

// TakeRecv consumes the next receive WQE from the QP's RQ or its SRQ and resolves its SGL
// for writing. It returns nil, StatusSuccess when no receive is posted (for iWARP a
// Terminate, RFC 5041 §7.2 "no buffer"; for RoCE an RNR NAK), nil, StatusWRFlushErr when the
// QP cannot take receives, and the WQE with StatusLocProtErr if its SGL is invalid (the
// transport completes it with that status).
func (t *TransportQP) TakeRecv() (*RecvWQE, Status) { return t.q.takeRecv() }

// CompleteRecv completes a receive WQE taken with TakeRecv and returns it to its queue.
func (t *TransportQP) CompleteRecv(w *RecvWQE, r RecvResult) { t.q.completeRecv(w, r) }

// FinishRecv completes w for a message of byteLen bytes that arrived in it (RFC 5040 §5.3,
// IBTA §9.7.5 receive completion): it invalidates m.Invalidate first when m.HasInvalidate
// (Send with Invalidate, RFC 5040 §6.4.2 / IETH), then completes w with the flags the
// message carried. If the invalidation fails, w is left taken (the transport reports the
// error in its own terms and the WQE is flushed or completed by it) and the error is
// returned. It is PrepareRecv followed by CompleteRecv.
func (t *TransportQP) FinishRecv(w *RecvWQE, m RecvMessage) error {
	r, err := t.PrepareRecv(m)
	if err != nil {
		return err
	}
	t.q.completeRecv(w, r)
	return nil
}

// PrepareRecv does what FinishRecv does for message m except the completion: it performs
// the invalidation m asks for and returns the result to complete the WQE with, for a
// transport that delivers the completion later (RoCEv2 completes a batch's receives
// after the batch's ACKs are on the wire). On an invalidation error nothing is done.
func (t *TransportQP) PrepareRecv(m RecvMessage) (RecvResult, error) {
	r := RecvResult{Opcode: WCRecv, ByteLen: m.ByteLen}
	if m.AfterWrite {
		r.Opcode = WCRecvRDMAWithImm
	}
	if m.HasImm {
		r.Flags |= WCWithImm
		r.Imm = m.Imm
	}
	if m.Solicited {
		r.Flags |= WCSolicited
	}
	if m.HasInvalidate {
		if err := t.q.pd.invalidate(t.q, m.Invalidate); err != nil {
			return RecvResult{}, err
		}
		r.Flags |= WCWithInv
		r.InvalidatedSTag = m.Invalidate
	}
	return r, nil
}

// RecvMessage describes an incoming message that consumed a receive WQE, for FinishRecv.
type RecvMessage struct {
	ByteLen       uint32
	Solicited     bool   // the message carried the solicited-event bit
	HasImm        bool   // immediate data (RFC 7306 §6, IB ImmDt)
	Imm           uint32 // the immediate data
	AfterWrite    bool   // the immediate data ends an RDMA Write (WCRecvRDMAWithImm)
	HasInvalidate bool   // Send with Invalidate
	Invalidate    uint32 // the STag to invalidate
}

// ResolveRemote validates an incoming tagged access of n bytes at tagged offset to through
// stag with right (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic) and returns
// the target bytes (RFC 5040 §6, RFC 5041 §7: the STag exists and is valid, belongs to the
// QP's PD — and a type 2 window to this QP — grants the right, and [to, to+n) lies inside
// it). It never allocates. The error is an [AccessError].
func (t *TransportQP) ResolveRemote(stag uint32, to, n uint64, right Access) ([]byte, error) {
	return t.q.pd.resolveRemote(t.q, stag, to, n, right)
}

// Invalidate invalidates a local STag on behalf of the peer (Send with Invalidate,
// RFC 5040 §6.4.2). Type 1 windows and regions with bound windows cannot be invalidated.
func (t *TransportQP) Invalidate(stag uint32) error { return t.q.pd.invalidate(t.q, stag) }

// ExecLocal performs a local operation (OpLocalInv, OpRegMR, OpBindMW) and returns its
// status; the transport calls it when the WQE's turn comes and then CompleteSend.
func (t *TransportQP) ExecLocal(w *SendWQE) Status { return t.q.execLocal(w) }

// Atomic performs an inbound atomic operation on the 8 bytes of dst (obtained from
// ResolveRemote with AccessRemoteAtomic): it reads the original value in host byte order,
// stores f(original) and returns the original. All atomics of a device are serialized
// under one lock, whatever transport carries them, so an iWARP and a RoCEv2 atomic on the
// same region are atomic with respect to each other (RFC 7306 §5.3, IBTA §9.4.5: atomicity
// across the QPs of the responder's device).
func (t *TransportQP) Atomic(dst []byte, f func(orig uint64) uint64) uint64 {
	d := t.q.dev
	d.atomicMu.Lock()
	orig := nativeEndian.Uint64(dst)
	nativeEndian.PutUint64(dst, f(orig))
	d.atomicMu.Unlock()
	return orig
}

// CountTx adds transmitted payload bytes and wire segments to the QP and device counters.
func (t *TransportQP) CountTx(bytes, segs int) {
	q := t.q
	q.counters.TxBytes.Add(uint64(bytes))
	q.counters.TxSegments.Add(uint64(segs))
	q.dev.counters.TxBytes.Add(uint64(bytes))
	q.dev.counters.TxSegments.Add(uint64(segs))
}

// CountRx adds received payload bytes and wire segments.
func (t *TransportQP) CountRx(bytes, segs int) {
	q := t.q
	q.counters.RxBytes.Add(uint64(bytes))
	q.counters.RxSegments.Add(uint64(segs))
	q.dev.counters.RxBytes.Add(uint64(bytes))
	q.dev.counters.RxSegments.Add(uint64(segs))
}

// CountCRCError counts a CRC (or ICRC) failure.
func (t *TransportQP) CountCRCError() {
	t.q.counters.CRCErrors.Add(1)
	t.q.dev.counters.CRCErrors.Add(1)
}

// CountTermSent counts a Terminate sent.
func (t *TransportQP) CountTermSent() {
	t.q.counters.TermSent.Add(1)
	t.q.dev.counters.TermSent.Add(1)
}

// CountTermRecv counts a Terminate received.
func (t *TransportQP) CountTermRecv() {
	t.q.counters.TermRecv.Add(1)
	t.q.dev.counters.TermRecv.Add(1)
}

// CountRetransmit counts a retransmission (packet transports).
func (t *TransportQP) CountRetransmit() {
	t.q.counters.Retransmits.Add(1)
	t.q.dev.counters.Retransmits.Add(1)
}

// CountSpin counts a spin of a receive on an empty socket (Config.ReceiveSpin) that
// found data (hit) or ran out.
func (t *TransportQP) CountSpin(hit bool) {
	if hit {
		t.q.counters.SpinHits.Add(1)
		t.q.dev.counters.SpinHits.Add(1)
	} else {
		t.q.counters.SpinTimeouts.Add(1)
		t.q.dev.counters.SpinTimeouts.Add(1)
	}
}

// CountNAK counts a NAK sent or received (packet transports).
func (t *TransportQP) CountNAK() {
	t.q.counters.NAKs.Add(1)
	t.q.dev.counters.NAKs.Add(1)
}
