package tool

import (
	"context"
	"fmt"

	"github.com/softrnic/softrnic/rnic"
)

// MsgQP is the QP of rdma-core's rdma_server and rdma_client (rdma_create_ep's QP: one
// send and one receive of a fixed-size message, every send signaled, sends inline): the
// message buffers, one CQ and the waits on it.
type MsgQP struct {
	QP         *rnic.QP
	pd         *rnic.PD
	cq         *rnic.CQ
	mr         *rnic.MR
	send, recv []byte
	wc         [4]rnic.Completion
	seen       [2]int // completions taken off the CQ ahead of their wait: sends, receives
}

// NewMsgQP creates the QP and its size-byte send and receive buffers (zero bytes, as the
// C tools' static arrays).
func NewMsgQP(dev *rnic.Device, size int) (*MsgQP, error) {
	m := &MsgQP{}
	var err error
	if m.pd, err = dev.AllocPD(); err != nil {
		return m, err
	}
	if m.cq, err = dev.CreateCQ(4); err != nil {
		return m, err
	}
	if m.QP, err = dev.CreateQP(m.pd, rnic.QPAttr{SendCQ: m.cq, RecvCQ: m.cq, SignalAll: true,
		Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: size}}); err != nil {
		return m, fmt.Errorf("rdma_create_ep: %w", err)
	}
	buf := make([]byte, 2*size)
	m.send, m.recv = buf[:size], buf[size:]
	if m.mr, err = m.pd.RegMR(buf, rnic.AccessLocalWrite); err != nil {
		return m, fmt.Errorf("rdma_reg_msgs: %w", err)
	}
	return m, nil
}

// Close destroys the QP (its connection must be closed first).
func (m *MsgQP) Close() {
	if m.QP != nil {
		_ = m.QP.Destroy()
	}
}

// PostRecv posts the receive (rdma_post_recv).
func (m *MsgQP) PostRecv() error {
	return m.QP.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{m.mr.SGE(len(m.send), len(m.recv))}})
}

// PostSend sends the message, inline (rdma_post_send with IBV_SEND_INLINE).
func (m *MsgQP) PostSend() error {
	return m.QP.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Inline, SGL: []rnic.SGE{m.mr.SGE(0, len(m.send))}})
}

// Wait waits for the next completion of kind want (rnic.WCSend or rnic.WCRecv:
// rdma_get_send_comp, rdma_get_recv_comp); a failed one is an error naming its status.
func (m *MsgQP) Wait(ctx context.Context, want rnic.WCOpcode) error {
	k := 0
	if want == rnic.WCRecv {
		k = 1
	}
	for m.seen[k] == 0 {
		n, err := m.cq.Wait(ctx, m.wc[:])
		if err != nil {
			return Cause(ctx, err)
		}
		for _, wc := range m.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				code, text := IBVStatus(wc.Status)
				if err := m.QP.Err(); err != nil {
					return fmt.Errorf("%v completion: %s (%d): %w", wc.Opcode, text, code, err)
				}
				return fmt.Errorf("%v completion: %s (%d)", wc.Opcode, text, code)
			}
			if wc.Opcode == rnic.WCRecv {
				m.seen[1]++
			} else {
				m.seen[0]++
			}
		}
	}
	m.seen[k]--
	return nil
}
