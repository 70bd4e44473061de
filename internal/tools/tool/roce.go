package tool

import (
	"context"
	"fmt"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// FlushRoCE returns once the RoCEv2 endpoint ep has finished handling every packet it had
// received before the call, the ACKs it owes for them included (or after a second, or
// when ctx ends).
//
// Why: rnic/rocev2 sends the coalesced ACK of a received batch after the batch's receive
// completions are delivered, and drops it when the QP is destroyed in between. A tool
// that tears its QP down right after the completion of the peer's last message (the
// pingpong and latency loops do, as the C tools do) would then leave the peer's last
// request unacknowledged, and the peer's requester fails with "transport retry counter
// exceeded" after its retries. Until rocev2 flushes pending ACKs on disconnect, the tools
// call FlushRoCE before destroying such QPs.
//
// How: a UD datagram to a UD QP of the endpoint itself travels through the endpoint's
// receive loop after every batch that had been received before it was sent; its receive
// completion is the barrier.
func FlushRoCE(ctx context.Context, dev *rnic.Device, ep *rocev2.Endpoint) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	cq, err := dev.CreateCQ(4)
	if err != nil {
		return err
	}
	defer cq.Destroy()
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()
	// The receive takes the GRH and the 1-byte payload; the byte sent is the one after
	// them. Sending from the receive's own payload byte would have the receive write what
	// the send read with no ordering the race detector sees: the kernel's socket orders
	// them, which it does not model.
	buf := make([]byte, rocev2.GRHLen+2)
	mr, err := pd.RegMR(buf, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	ud, err := ep.CreateUD(qp, 0)
	if err != nil {
		return err
	}
	if err := qp.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{mr.SGE(0, rocev2.GRHLen+1)}}); err != nil {
		return err
	}
	wr := rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{mr.SGE(rocev2.GRHLen+1, 1)}}
	if err := ud.PostSend(rocev2.AH{Addr: ep.LocalAddr(), QPN: qp.Num()}, &wr); err != nil {
		return err
	}
	var wc [2]rnic.Completion
	for {
		n, err := cq.Wait(ctx, wc[:])
		if err != nil {
			return fmt.Errorf("flushing the RoCEv2 endpoint: %w", err)
		}
		for _, c := range wc[:n] {
			if c.Opcode == rnic.WCRecv {
				return nil
			}
		}
	}
}
