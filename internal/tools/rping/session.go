package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"io"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// output is where a run prints: rping's stdout lines, its DISCONNECT events on stderr.
type output struct {
	stdout, stderr io.Writer
	debug          bool
}

func (w output) debugf(format string, args ...any) {
	if w.debug {
		fmt.Fprintf(w.stdout, format+"\n", args...)
	}
}

// session holds the verbs resources of one rping connection (rping.c's control block).
type session struct {
	o      *Options
	out    output
	pd     *rnic.PD
	cq     *rnic.CQ
	qp     *rnic.QP
	conn   *cm.Conn
	recv   []byte // 16-byte receive buffer
	send   []byte // 16-byte send buffer
	rdma   []byte // server: RDMA Read sink / Write source; client: RDMA Write sink
	start  []byte // client: RDMA Read source
	recvMR *rnic.MR
	sendMR *rnic.MR
	rdmaMR *rnic.MR
	startM *rnic.MR
	idle   *time.Timer // server: ends the session when the client is idle (Options.IdleTimeout)
	wc     [8]rnic.Completion

	// Work requests reused for every post (the engine copies them), so a ping allocates
	// nothing here.
	recvWR  rnic.RecvWR
	sendWR  rnic.SendWR
	rdmaWR  rnic.SendWR
	recvSGE [1]rnic.SGE
	sendSGE [1]rnic.SGE
	rdmaSGE [1]rnic.SGE
}

// newSession allocates a session's PD, CQ, QP and buffers on dev.
func newSession(dev *rnic.Device, o *Options, out output) (*session, error) {
	s := &session{o: o, out: out}
	var err error
	fail := func(e error) (*session, error) { s.close(); return nil, e }
	if s.pd, err = dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = dev.CreateCQ(cqDepth); err != nil {
		return fail(err)
	}
	s.qp, err = dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: rnic.QPCap{
		MaxSendWR: sendDepth, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	s.recv = make([]byte, infoLen)
	s.send = make([]byte, infoLen)
	s.rdma = make([]byte, o.Size)
	if s.recvMR, err = s.pd.RegMR(s.recv, rnic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if s.sendMR, err = s.pd.RegMR(s.send, 0); err != nil {
		return fail(err)
	}
	remote := rnic.AccessLocalWrite | rnic.AccessRemoteRead | rnic.AccessRemoteWrite
	if s.rdmaMR, err = s.pd.RegMR(s.rdma, remote); err != nil {
		return fail(err)
	}
	if !o.Server {
		s.start = make([]byte, o.Size)
		if s.startM, err = s.pd.RegMR(s.start, remote); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// close releases the connection and every verbs resource of the session (not the device).
func (s *session) close() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.qp != nil {
		_ = s.qp.Destroy()
	}
	for _, mr := range []*rnic.MR{s.recvMR, s.sendMR, s.rdmaMR, s.startM} {
		if mr != nil {
			_ = mr.Dereg()
		}
	}
	if s.cq != nil {
		_ = s.cq.Destroy()
	}
	if s.pd != nil {
		_ = s.pd.Dealloc()
	}
}

func (s *session) postRecv() error {
	s.recvSGE[0] = s.recvMR.SGE(0, infoLen)
	s.recvWR = rnic.RecvWR{WRID: 1, SGL: s.recvSGE[:]}
	return s.qp.PostRecv(&s.recvWR)
}

// postInfo sends the 16-byte advertisement of buf (rping_format_send).
func (s *session) postInfo(buf rnic.RemoteBuffer) error {
	buf.Append(s.send[:0])
	s.out.debugf("RDMA addr %x rkey %x len %d", buf.Addr, buf.RKey, buf.Len)
	return s.postSend()
}

// postSource advertises the client's source buffer.
func (s *session) postSource() error { return s.postInfo(s.startM.RemoteBuffer(0, s.o.Size)) }

// postSink advertises the client's sink buffer (with --fault sink-oob, half a buffer past
// its start, so the peer's RDMA Write of -S bytes runs off the end of the region).
func (s *session) postSink() error {
	off := 0
	if s.o.Fault == FaultSinkOOB {
		off = s.o.Size / 2
	}
	b := s.rdmaMR.RemoteBuffer(off, s.o.Size)
	return s.postInfo(b)
}

func (s *session) postSend() error {
	s.sendSGE[0] = s.sendMR.SGE(0, infoLen)
	s.sendWR = rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: s.sendSGE[:]}
	return s.qp.PostSend(&s.sendWR)
}

// postRDMA posts the server's RDMA Read or Write of n bytes of its buffer at the peer's
// buffer.
func (s *session) postRDMA(op rnic.Opcode, n uint32, peer rnic.RemoteBuffer) error {
	s.rdmaSGE[0] = rnic.SGE{Addr: s.rdmaMR.Addr(), Length: n, LKey: s.rdmaMR.LKey()}
	s.rdmaWR = rnic.SendWR{WRID: 3, Opcode: op, Flags: rnic.Signaled, SGL: s.rdmaSGE[:], RemoteAddr: peer.Addr, RKey: peer.RKey}
	return s.qp.PostSend(&s.rdmaWR)
}

// errDisconnected reports that the peer closed the connection (rping's DISCONNECTED state).
var errDisconnected = errors.New("disconnected")

// qpError explains why the QP stopped: the peer closed the connection (errDisconnected), a
// Terminate was sent or received, or another error.
func (s *session) qpError() error {
	err := s.qp.Err()
	var llp *iwarp.LLPError
	var te *iwarp.TermError
	switch {
	case errors.As(err, &te):
		dir := "received"
		if te.Sent {
			dir = "sent"
		}
		return fmt.Errorf("Terminate %s: %v", dir, te.TerminateError)
	case err == nil, errors.As(err, &llp), errors.Is(err, io.EOF), errors.Is(err, rocev2.ErrPeerDisconnected):
		return errDisconnected
	}
	return err
}

// await waits for a completion of the given kind (WCRecv, WCRDMARead, WCRDMAWrite); send
// completions in between are consumed. A receive is re-posted as rping does.
func (s *session) await(ctx context.Context, want rnic.WCOpcode) (rnic.Completion, error) {
	for {
		n, err := s.cq.Wait(ctx, s.wc[:])
		if err != nil {
			if ctx.Err() != nil {
				return rnic.Completion{}, fmt.Errorf("timed out waiting for %v: %w", want, context.Cause(ctx))
			}
			return rnic.Completion{}, err
		}
		var got rnic.Completion
		found := false
		for i := 0; i < n; i++ {
			wc := s.wc[i]
			if wc.Status != rnic.StatusSuccess {
				if wc.Status == rnic.StatusWRFlushErr {
					// Wait for the transport to say why (Terminate or disconnect).
					select {
					case <-s.qp.Done():
					case <-time.After(2 * time.Second):
					}
					if err := s.qpError(); err != nil {
						return wc, err
					}
					return wc, errDisconnected
				}
				qerr := s.qpError()
				if qerr == errDisconnected {
					qerr = nil
				}
				return wc, fmt.Errorf("cq completion failed status %d (%v) opcode %v: %v", wc.Status, wc.Status, wc.Opcode, qerr)
			}
			switch wc.Opcode {
			case rnic.WCSend:
				s.out.debugf("send completion")
			case rnic.WCRecv:
				s.out.debugf("recv completion")
				if wc.ByteLen != infoLen {
					return wc, fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
				}
			default:
				if s.o.Debug {
					s.out.debugf("%v completion", wc.Opcode)
				}
			}
			if wc.Opcode == want && !found {
				got, found = wc, true
			} else if wc.Opcode != rnic.WCSend {
				return wc, fmt.Errorf("unexpected %v completion while waiting for %v", wc.Opcode, want)
			}
		}
		if found {
			if want == rnic.WCRecv {
				if err := s.postRecv(); err != nil {
					return got, fmt.Errorf("post recv error: %w", err)
				}
			}
			return got, nil
		}
	}
}

// report hands the session's negotiation and counters to the test hook and, with -d,
// prints them.
func (s *session) report() {
	if s.o.collectCounters != nil {
		s.o.collectCounters(s.qp.Counters())
	}
	if !s.o.Debug {
		return
	}
	if p, isMPA := s.conn.MPA(); isMPA {
		s.out.debugf("mpa: rev %d enhanced %v crc %v markers tx %v rx %v ird %d ord %d peer ird %d ord %d p2p %v",
			p.Rev, p.Enhanced, p.CRC, p.TxMarkers, p.RxMarkers, p.IRD, p.ORD, p.PeerIRD, p.PeerORD, p.P2P)
	}
	s.out.debugf("counters: %+v", s.qp.Counters().Snapshot())
}

// fillSource writes ping number ping into the client's source buffer (rping_test_client).
func fillSource(buf []byte, ping int, start byte) {
	var pre [32]byte // "rdma-ping-%d: " without fmt, so a ping allocates nothing
	p := append(pre[:0], "rdma-ping-"...)
	p = strconv.AppendInt(p, int64(ping), 10)
	p = append(p, ':', ' ')
	cc := copy(buf, p)
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > lastChar {
			c = firstChar
		}
	}
	buf[len(buf)-1] = 0
}

// cstr returns b up to its first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
