package perftest

// The out-of-band exchange ("comm"): one message each way per exchange, the client first.
// Over rdma_cm (-R, -z) it is a separate RC connection to the port whose messages are
// single SENDs into one 56-byte receive; over TCP (RoCEv2 without -R) each message is one
// write() read with one read(). Messages are not framed: both sides must agree on the
// size of every message, so a message of another size than expected (seen over rdma_cm)
// means the peer runs another test or other options.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// comm is the exchange's channel.
type comm interface {
	// send sends one message; over RDMA it returns once the peer acknowledged it
	// (perftest's ctx_xchg_data_rdma polls for the send's completion too).
	send(ctx context.Context, b []byte) error
	// recv returns the next message, which must be n bytes.
	recv(ctx context.Context, n int) ([]byte, error)
	// done is closed when the channel's connection has ended (nil: never known).
	done() <-chan struct{}
	close()
}

// errPeerClosed reports that the peer closed the exchange's connection.
var errPeerClosed = errors.New("the peer closed the connection")

const (
	sendWRID  = 1 << 32 // the communication QP's send (receives are numbered 0..commRecvs-1)
	commRecvs = 4       // receives kept posted on the communication QP
	commSlot  = 64      // bytes per receive buffer: perftest's messages are at most 56
)

// rdmaComm is the communication QP of -R and -z (create_comm_struct: RC, one send and one
// receive of sizeof(struct pingpong_dest) in perftest).
type rdmaComm struct {
	qp       *rnic.QP
	cq       *rnic.CQ
	conn     *cm.Conn
	rbuf     []byte
	rmr      *rnic.MR
	sbuf     []byte
	smr      *rnic.MR
	pending  [][]byte // messages received, not yet consumed
	sendDone bool     // the last send completed
	err      error    // the first failure on the QP
	wc       [2 * commRecvs]rnic.Completion
}

func newRDMAComm(dev *rnic.Device, pd *rnic.PD) (*rdmaComm, error) {
	c := &rdmaComm{}
	var err error
	if c.cq, err = dev.CreateCQ(4 * commRecvs); err != nil {
		return c, err
	}
	if c.qp, err = dev.CreateQP(pd, rnic.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, Cap: rnic.QPCap{
		MaxSendWR: commRecvs, MaxRecvWR: commRecvs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: commSlot}}); err != nil {
		return c, err
	}
	c.rbuf = make([]byte, commRecvs*commSlot)
	if c.rmr, err = pd.RegMR(c.rbuf, rnic.AccessLocalWrite); err != nil {
		return c, err
	}
	c.sbuf = make([]byte, commSlot)
	if c.smr, err = pd.RegMR(c.sbuf, 0); err != nil {
		return c, err
	}
	for i := range commRecvs {
		if err := c.postRecv(i); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *rdmaComm) postRecv(i int) error {
	return c.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{c.rmr.SGE(i*commSlot, commSlot)}})
}

// send sends b as one signaled SEND (inline: the buffer is free on return) and waits
// for its completion, as perftest does: the last message of a run must reach the peer
// before this side closes (closing first would flush it unsent or unacknowledged).
// Messages that arrive meanwhile are kept for recv.
func (c *rdmaComm) send(ctx context.Context, b []byte) error {
	n := copy(c.sbuf, b)
	if err := c.qp.PostSend(&rnic.SendWR{WRID: sendWRID, Opcode: rnic.OpSend, Flags: rnic.Signaled | rnic.Inline,
		SGL: []rnic.SGE{c.smr.SGE(0, n)}}); err != nil {
		return fmt.Errorf("send on the communication QP: %w", err)
	}
	c.sendDone = false
	for !c.sendDone {
		if err := c.poll(ctx); err != nil {
			return err
		}
	}
	return nil
}

// recv returns the next message received (see poll for how a failure is reported).
func (c *rdmaComm) recv(ctx context.Context, n int) ([]byte, error) {
	for len(c.pending) == 0 {
		if err := c.poll(ctx); err != nil {
			return nil, err
		}
	}
	m := c.pending[0]
	c.pending = c.pending[1:]
	// perftest copies the expected size out of its 56-byte buffer whatever arrived; a
	// peer that sent another size is at another step of another test.
	if len(m) != n && !(n == destLen && len(m) > destLen) {
		return nil, &sizeError{got: len(m), want: n}
	}
	return m[:n], nil
}

// poll waits for the next completions: received messages go to pending (their receive
// is posted again), a send's completion sets sendDone. The first failure is kept: a
// batch can hold the peer's last message followed by the flushes of the remaining
// receives (perftest closes right after its final message), and the message is still
// consumed; the error is returned when the caller needs more than was received.
func (c *rdmaComm) poll(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	k, err := c.cq.Wait(ctx, c.wc[:])
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return err
	}
	for _, wc := range c.wc[:k] {
		if wc.Status != rnic.StatusSuccess {
			if c.err == nil {
				c.err = c.failure(wc)
			}
			continue
		}
		if wc.WRID == sendWRID {
			c.sendDone = true
			continue
		}
		if wc.Opcode != rnic.WCRecv || c.err != nil {
			continue
		}
		i := int(wc.WRID)
		msg := append([]byte(nil), c.rbuf[i*commSlot:i*commSlot+min(int(wc.ByteLen), commSlot)]...)
		c.pending = append(c.pending, msg)
		if err := c.postRecv(i); err != nil {
			c.err = err
		}
	}
	return nil
}

// failure explains a failed completion on the communication QP.
func (c *rdmaComm) failure(wc rnic.Completion) error {
	if c.conn != nil {
		select {
		case <-c.conn.Done():
			if err := c.conn.Err(); err != nil && !cm.IsPeerClose(err) {
				return fmt.Errorf("communication connection failed: %w", err)
			}
			return errPeerClosed
		default:
		}
	}
	if err := c.qp.Err(); err != nil {
		return fmt.Errorf("communication QP: %v %v: %w", wc.Opcode, wc.Status, err)
	}
	if wc.Status == rnic.StatusWRFlushErr {
		return errPeerClosed
	}
	return fmt.Errorf("communication QP: %v completed with %v", wc.Opcode, wc.Status)
}

func (c *rdmaComm) done() <-chan struct{} {
	if c.conn == nil {
		return nil
	}
	return c.conn.Done()
}

func (c *rdmaComm) close() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	for _, m := range []*rnic.MR{c.rmr, c.smr} {
		if m != nil {
			_ = m.Dereg()
		}
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
}

// sizeError is a message of an unexpected size.
type sizeError struct{ got, want int }

func (e *sizeError) Error() string {
	return fmt.Sprintf("the peer sent a %d-byte message where %d bytes were due (perftest has no negotiation: is it running the same test with the same options?)", e.got, e.want)
}

// tcpComm is the exchange over TCP (ethernet_client_connect / ethernet_server_connect).
type tcpComm struct {
	c    net.Conn
	end  chan struct{}
	msgs atomic.Uint64 // messages received (the idle watchdog's progress)
}

func newTCPComm(c net.Conn) *tcpComm { return &tcpComm{c: c, end: make(chan struct{})} }

// send writes b in one write(): perftest reads each message with one read().
func (c *tcpComm) send(_ context.Context, b []byte) error {
	if _, err := c.c.Write(b); err != nil {
		return fmt.Errorf("Couldn't send to the peer: %w", err)
	}
	return nil
}

func (c *tcpComm) recv(ctx context.Context, n int) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.c.Close() })
	defer stop()
	b := make([]byte, n)
	if _, err := io.ReadFull(c.c, b); err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errPeerClosed
		}
		return nil, err
	}
	c.msgs.Add(1)
	return b, nil
}

func (c *tcpComm) done() <-chan struct{} { return nil }

func (c *tcpComm) close() { _ = c.c.Close() }
