package iwarp

// The responder side of RDMA Read (RFC 5040 §5.2, §6.1) and RFC 7306 atomics: requests in
// from QN 1 within IRD (the IRQ), responses out.

import (
	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

type irqEntry struct {
	atomic   bool
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
	reqID    uint32
	orig     uint64
}

// releaseIRD ends the inbound Read or atomic that the sender is responding to.
func (c *Conn) releaseIRD() {
	c.mu.Lock()
	c.irqBusy--
	c.mu.Unlock()
}

// inboundFull reports whether the peer already has IRD Read and atomic requests
// outstanding: queued, or being answered and not yet fully framed (RFC 5040 §6.1, RFC 7306
// §5.2). The caller holds mu.
func (c *Conn) inboundFull() bool { return c.irq.n+c.irqBusy >= c.ird }

// sendResponse sends a Read Response streamed from the source region or an Atomic
// Response.
func (c *Conn) sendResponse(e *irqEntry) error {
	if e.atomic {
		c.releaseIRD()
		putUntagged(c.hdr[:], true, rdmap.OpAtomicResponse, 0, ddp.QNAtomicResponse, c.txMSN[ddp.QNAtomicResponse], 0)
		c.txMSN[ddp.QNAtomicResponse] = c.txMSN[ddp.QNAtomicResponse].Next()
		h := rdmap.AtomicResponse{ReqID: e.reqID, Orig: e.orig}.Append(c.hdr[:ddp.UntaggedLen])
		if err := c.writeFPDU(h, nil); err != nil {
			return err
		}
		c.qp.CountTx(0, 1)
		return nil
	}
	var one [1][]byte
	one[0] = e.src
	return c.sendTagged(rdmap.OpReadResponse, e.sinkSTag, e.sinkTO, one[:], uint64(len(e.src)))
}

func (c *Conn) rxReadReq(h []byte, n int) bool {
	u := ddp.Untagged(h)
	if te, ok := c.singleSegment(u, ddp.QNReadRequest); !ok {
		c.sendTerm(te, h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
		return false
	}
	rr := rdmap.ReadRequest(h[ddp.UntaggedLen:]) // segment checked its length
	c.mu.Lock()
	full := c.inboundFull()
	c.mu.Unlock()
	if full {
		// RFC 5040 names no code for a peer exceeding IRD; Linux siw (siw_init_rresp)
		// sends RDMAP / Remote Operation / catastrophic error localized to the stream.
		c.sendTerm(rdmap.TermCatastrophicStream, h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
		return false
	}
	var src []byte
	if rr.Size() > 0 { // RFC 5040 §5.2.1: a zero-length Read's source MUST NOT be validated
		var err error
		src, err = c.qp.ResolveRemote(rr.SrcSTag(), rr.SrcTO(), uint64(rr.Size()), rnic.AccessRemoteRead)
		if err != nil {
			c.sendTerm(readTerm(err), h[:ddp.UntaggedLen], n, h[ddp.UntaggedLen:])
			return false
		}
	}
	if !c.end() {
		return false
	}
	c.rxMSN[ddp.QNReadRequest] = c.rxMSN[ddp.QNReadRequest].Next()
	c.mu.Lock()
	c.irq.push(irqEntry{sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO(), src: src})
	c.mu.Unlock()
	c.respond()
	return true
}

func (c *Conn) rxAtomicReq(h []byte, n int) bool {
	u := ddp.Untagged(h)
	dh, a := h[:ddp.UntaggedLen], h[ddp.UntaggedLen:]
	if te, ok := c.singleSegment(u, ddp.QNReadRequest); !ok {
		c.sendTerm(te, dh, n, nil)
		return false
	}
	c.mu.Lock()
	full := c.inboundFull()
	c.mu.Unlock()
	if full { // as for Read Requests: atomics share the IRD (RFC 7306 §5.2)
		c.sendTerm(rdmap.TermCatastrophicStream, dh, n, nil)
		return false
	}
	req, err := rdmap.ParseAtomicRequest(a)
	if err == nil {
		err = req.Check() // RFC 7306 §5.2.1, §8.2
	}
	if err != nil {
		te, ok := rdmap.AsTerminateError(err)
		if !ok {
			te = rdmap.TermCatastrophicStream
		}
		c.sendTerm(te, dh, n, nil)
		return false
	}
	dst, err := c.qp.ResolveRemote(req.STag, req.TO, 8, rnic.AccessRemoteAtomic)
	if err != nil {
		c.sendTerm(readTerm(err), dh, n, nil)
		return false
	}
	if !c.end() {
		return false
	}
	orig := c.qp.Atomic(dst, req.Apply) // RFC 7306 §5.3: one lock per device, across transports
	c.rxMSN[ddp.QNReadRequest] = c.rxMSN[ddp.QNReadRequest].Next()
	c.mu.Lock()
	c.irq.push(irqEntry{atomic: true, reqID: req.ReqID, orig: orig})
	c.mu.Unlock()
	c.respond()
	return true
}

// inlineFPDUs bounds the FPDUs of one respondInline.
const inlineFPDUs = 16

// respond sends the responses just queued on the IRQ. When the sender goroutine is idle,
// the receiver writes small responses itself (respondInline), saving the goroutine
// hand-off — and the runtime's wake-up of an idle thread that comes with it — on the
// critical path of every Read and atomic; otherwise it wakes the sender. While the next
// FPDU is already buffered (a burst of requests), it waits: the receive loop calls it
// again before it reads the stream, so a burst's responses go out in one write instead
// of one each. Only the receiver calls it.
func (c *Conn) respond() {
	if c.rd.FPDUBuffered() {
		c.respDefer = true
		return
	}
	if c.twRC == nil && !c.twNo {
		c.twRC = txTry(c.nc)
		c.twNo = c.twRC == nil
	}
	if c.twRC == nil || !c.ready.Load() || !c.txMu.TryLock() {
		c.wake()
		return
	}
	more := c.respondInline()
	c.txMu.Unlock()
	if more {
		c.wake()
	}
}

// respondInline writes queued responses of at most fastMax octets and inlineFPDUs FPDUs in
// all (so the batch never fills up, which would make QueueFPDU write it), in IRQ order,
// with one non-blocking vectored write: the receiver must never wait for the socket (the
// peer's receiver may be waiting for ours: both would stop reading). What the socket does
// not take now stays queued in the Writer, and the sender, woken, writes it before
// anything else. Anything but plain responses (a Terminate or nudge to send, closing, a
// batch already pending) is left to the sender; more reports that it must be woken. The
// caller holds txMu.
func (c *Conn) respondInline() (more bool) {
	if c.txDone || c.quitting() || c.wr.Buffered() > 0 || c.ng.want.Load() || c.params.TxMarkers {
		return !c.txDone
	}
	budget, fpdus := fastMax, inlineFPDUs
	per := c.mulpdu - ddp.TaggedLen
	for {
		c.mu.Lock()
		if c.termSend || c.closing || c.rxEOF || c.irq.n == 0 {
			more = c.irq.n > 0 || c.termSend || c.closing || c.rxEOF
			c.mu.Unlock()
			break
		}
		e := c.irq.front()
		size := len(e.src)
		nf := max(1, (size+per-1)/per)
		if size > budget || nf > fpdus {
			c.mu.Unlock()
			more = true
			break
		}
		budget -= size
		fpdus -= nf
		r := c.irq.pop()
		c.irqBusy++
		c.mu.Unlock()
		if err := c.sendResponse(&r); err != nil {
			c.txFail(err)
			return false
		}
	}
	if c.wr.Buffered() == 0 {
		return more
	}
	tw := writevStates.Get().(*writevState)
	tw.rc = c.twRC
	done, err := c.wr.TryFlush(tw.try)
	tw.rc = nil
	writevStates.Put(tw)
	if err != nil {
		c.txFail(err)
		return false
	}
	c.noteTx()
	return more || !done
}
