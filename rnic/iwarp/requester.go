package iwarp

// The requester side of RDMA Read (RFC 5040 §5.2) and RFC 7306 atomics: requests out on
// QN 1, with an ORD slot each (the ORQ), and their responses in.

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

type orqKind uint8

const (
	orqRead orqKind = iota
	orqAtomic
	orqRTR
)

type orqEntry struct {
	kind     orqKind
	w        *rnic.SendWQE
	sinkSTag uint32
	sinkTO   uint64
	size     uint64
	got      uint64
	reqID    uint32
	msn      ddp.MSN // QN 1 MSN of the request
}

// sendRead starts an RDMA Read work request (RFC 5040 §5.2): it takes an ORD slot
// (the caller checked blocked) and sends the Read Request; the WQE completes when the
// last Read Response segment has been placed.
func (c *Conn) sendRead(w *rnic.SendWQE) error {
	if c.ord == 0 || w.Len > 0xFFFFFFFF {
		return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
	}
	e := orqEntry{kind: orqRead, w: w, sinkSTag: 1, size: w.Len}
	if len(w.SGL) > 0 {
		e.sinkSTag, e.sinkTO = w.SGL[0].LKey, w.SGL[0].Addr
	}
	e.msn = c.txMSN[ddp.QNReadRequest]
	c.mu.Lock()
	c.orq.push(e)
	c.mu.Unlock()
	return c.sendReadReq(e.sinkSTag, e.sinkTO, uint32(w.Len), w.RKey, w.RemoteAddr)
}

// sendAtomic sends an RFC 7306 §5.1 Atomic Request on QN 1 for w; it completes with the
// Atomic Response (the original value is stored in w's 8-byte buffer).
func (c *Conn) sendAtomic(w *rnic.SendWQE) error {
	if !c.ext || c.ord == 0 {
		return c.localError(w, rnic.StatusLocQPOpErr, rnic.EventQPReqErr)
	}
	c.reqID++
	msn := c.txMSN[ddp.QNReadRequest]
	c.txMSN[ddp.QNReadRequest] = msn.Next()
	c.mu.Lock()
	c.orq.push(orqEntry{kind: orqAtomic, w: w, reqID: c.reqID, msn: msn})
	c.mu.Unlock()
	putUntagged(c.hdr[:], true, rdmap.OpAtomicRequest, 0, ddp.QNReadRequest, msn, 0)
	req := rdmap.NewFetchAdd(c.reqID, w.RKey, w.RemoteAddr, w.Compare, 0)
	if w.Opcode == rnic.OpAtomicCmpSwap {
		req = rdmap.NewCmpSwap(c.reqID, w.RKey, w.RemoteAddr, w.Compare, rdmap.AllOnes, w.Swap, rdmap.AllOnes)
	}
	h := req.Append(c.hdr[:ddp.UntaggedLen])
	if err := c.writeFPDU(h, nil); err != nil {
		return err
	}
	c.qp.CountTx(0, 1)
	return nil
}

// sendReadReq sends an RDMA Read Request (RFC 5040 §4.4) on QN 1.
func (c *Conn) sendReadReq(sinkSTag uint32, sinkTO uint64, size, srcSTag uint32, srcTO uint64) error {
	h := c.hdr[:ddp.UntaggedLen+rdmap.ReadRequestLen]
	putUntagged(h, true, rdmap.OpReadRequest, 0, ddp.QNReadRequest, c.txMSN[ddp.QNReadRequest], 0)
	c.txMSN[ddp.QNReadRequest] = c.txMSN[ddp.QNReadRequest].Next()
	rdmap.ReadRequest(h[ddp.UntaggedLen:]).Init(sinkSTag, sinkTO, size, srcSTag, srcTO)
	if err := c.writeFPDU(h, nil); err != nil {
		return err
	}
	c.qp.CountTx(0, 1)
	return nil
}

func (c *Conn) rxReadResp(h []byte, n int, plen uint64) bool {
	t := ddp.Tagged(h)
	c.mu.Lock()
	var e *orqEntry
	if c.orq.n > 0 && c.orq.front().kind != orqAtomic {
		e = c.orq.front()
	}
	c.mu.Unlock()
	if e == nil {
		c.sendTerm(rdmap.TermUnexpectedOpcode, h, n, nil)
		return false
	}
	// RFC 5041 §5: the STag and TO of a zero-length tagged message are not checked.
	if plen > 0 && t.STag() != e.sinkSTag {
		c.sendTerm(rdmap.FromDDP(ddp.ErrInvalidSTag), h, n, nil)
		return false
	}
	if (plen > 0 && t.TO() != e.sinkTO+e.got) || e.got+plen > e.size {
		c.sendTerm(rdmap.FromDDP(ddp.ErrBaseBounds), h, n, nil)
		return false
	}
	if !c.staging && e.w != nil {
		return c.streamReadResp(h, plen, e)
	}
	if e.w != nil {
		if err := c.readInto(e.w.Segs, e.got, plen); err != nil {
			c.rxError(err)
			return false
		}
	}
	if !c.end() {
		return false
	}
	return c.readRespPlaced(h, n, plen, e)
}

// streamReadResp reads the payload of the Read Response FPDU whose header h was just
// read (plen octets, continuing e, the front of the ORQ) from the stream into e's sink
// and ends the FPDU. When the Read goes on past it and the sink is contiguous there, the
// segments still to come are expected to be the same size (the peer's MULPDU) with the
// same header but for their TO and the last one's L bit, and the same system call takes
// them straight into the sink too (mpa.Reader.ReadAhead; one readv per several 64 KiB
// FPDUs instead of one each). A segment that turns out otherwise is parsed as usual from
// where it starts. Every segment taken is accounted for as segment and rxReadResp would
// have. It returns false when the receiver must stop.
func (c *Conn) streamReadResp(h []byte, plen uint64, e *orqEntry) bool {
	n := len(h) + int(plen)
	c.rxPieces = rnic.Segs(e.w.Segs).Slices(c.rxPieces, e.got, plen)
	t := ddp.Tagged(h)
	if len(c.rxPieces) != 1 || t.Last() || plen == 0 || len(h) != ddp.TaggedLen {
		for _, p := range c.rxPieces {
			if err := c.rd.ReadFull(p); err != nil {
				clear(c.rxPieces)
				c.rxError(err)
				return false
			}
		}
		clear(c.rxPieces) // keep no reference to the WQE's memory
		if err := c.rd.End(); err != nil {
			c.rxError(err)
			return false
		}
		return c.readRespPlaced(h, n, plen, e)
	}
	p := c.rxPieces[0]
	if c.ahead == nil {
		c.ahead = new(readAhead)
	}
	a := c.ahead
	k, off, to := 0, e.got+plen, t.TO()+plen
	for k < mpa.MaxAhead && off < e.size {
		sz := min(plen, e.size-off)
		c.rxPieces = rnic.Segs(e.w.Segs).Slices(c.rxPieces[:0], off, sz)
		if len(c.rxPieces) != 1 {
			break
		}
		hk := a.hdr[k][:]
		copy(hk, h)
		ddp.Tagged(hk).Init(off+sz == e.size, t.ULPControl(), t.STag(), to)
		a.exp[k] = mpa.Ahead{Header: hk, Payload: c.rxPieces[0]}
		k, off, to = k+1, off+sz, to+sz
	}
	clear(c.rxPieces)
	done, started, err := c.rd.ReadAhead(p, a.exp[:k])
	if err != nil {
		clear(a.exp[:])
		c.rxError(err)
		return false
	}
	ok := c.readRespPlaced(h, n, plen, e)
	for i := 0; ok && i < done; i++ {
		x := a.exp[i]
		c.qp.CountRx(len(x.Payload), 1)
		ok = c.readRespPlaced(x.Header, len(x.Header)+len(x.Payload), uint64(len(x.Payload)), e)
	}
	if ok && started {
		x := a.exp[done]
		c.qp.CountRx(len(x.Payload), 1)
		if err := c.rd.ReadFull(x.Payload[len(x.Payload)-c.rd.Remaining():]); err != nil {
			c.rxError(err)
			ok = false
		} else if err := c.rd.End(); err != nil {
			c.rxError(err)
			ok = false
		} else {
			ok = c.readRespPlaced(x.Header, len(x.Header)+len(x.Payload), uint64(len(x.Payload)), e)
		}
	}
	clear(a.exp[:]) // keep no reference to the WQE's memory
	return ok
}

// readAhead is a connection's state for the Read Response segments it reads ahead
// (streamReadResp), made at its first Read of several segments.
type readAhead struct {
	exp [mpa.MaxAhead]mpa.Ahead
	hdr [mpa.MaxAhead][ddp.TaggedLen]byte
}

// readRespPlaced accounts for a Read Response segment of plen bytes placed for e (the
// front of the ORQ): the Read completes with its last segment.
func (c *Conn) readRespPlaced(h []byte, n int, plen uint64, e *orqEntry) bool {
	t := ddp.Tagged(h)
	e.got += plen
	if !t.Last() {
		return true
	}
	if e.got != e.size {
		c.sendTerm(rdmap.FromDDP(ddp.ErrBaseBounds), h, n, nil)
		return false
	}
	c.mu.Lock()
	done := c.orq.pop()
	closing := c.closing
	c.mu.Unlock()
	if done.w != nil {
		c.qp.CompleteSend(done.w, rnic.StatusSuccess)
	}
	c.orqFreed(closing)
	return true
}

func (c *Conn) rxAtomicResp(h []byte, n int) bool {
	u := ddp.Untagged(h)
	dh, a := h[:ddp.UntaggedLen], h[ddp.UntaggedLen:]
	if te, ok := c.singleSegment(u, ddp.QNAtomicResponse); !ok {
		c.sendTerm(te, dh, n, nil)
		return false
	}
	c.mu.Lock()
	var e *orqEntry
	if c.orq.n > 0 && c.orq.front().kind == orqAtomic {
		e = c.orq.front()
	}
	c.mu.Unlock()
	resp, err := rdmap.ParseAtomicResponse(a)
	if err != nil || e == nil || e.reqID != resp.ReqID {
		c.sendTerm(rdmap.TermUnexpectedOpcode, dh, n, nil)
		return false
	}
	if !c.end() {
		return false
	}
	c.rxMSN[ddp.QNAtomicResponse] = c.rxMSN[ddp.QNAtomicResponse].Next()
	binary.NativeEndian.PutUint64(e.w.Segs[0], resp.Orig)
	c.mu.Lock()
	done := c.orq.pop()
	closing := c.closing
	c.mu.Unlock()
	c.qp.CompleteSend(done.w, rnic.StatusSuccess)
	c.orqFreed(closing)
	return true
}

// orqFreed wakes the sender after an outbound Read or atomic ended, if it waits for that:
// a held WQE (ORD full, Fence, LocalFence) or a graceful close waiting for the last
// response. Otherwise the sender sleeps on: waking it would cost a goroutine hand-off (and
// the runtime waking an idle thread) on the Read's critical path for nothing. The sender
// sets holding before it re-checks the ORQ (pump), so a response that frees the slot
// in between is seen by one or the other.
func (c *Conn) orqFreed(closing bool) {
	if closing || c.holding.Load() {
		c.wake()
	}
}
