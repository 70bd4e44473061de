package rocev2

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softrnic/softrnic/roce"
)

// Connection management: the IB CM (IBTA Vol.1 chapter 12) as RDMA-CM uses it
// over RoCEv2 — REQ/REP/RTU, REJ, MRA and DREQ/DREP MADs in UD SEND_ONLY
// packets to QP1 (Q_Key 0x80010000), with RDMA-CM's TCP port-space service
// IDs and the 36-byte cma_hdr at the start of the REQ private data. The API
// mirrors rnic/iwarp: Listen, Listener.Accept, ConnRequest.Accept/Reject, Dial.

// CMConfig are the CM timers of an endpoint's connection manager.
type CMConfig struct {
	// ResponseTimeout is the CM response timeout exponent (4.096 µs × 2^v;
	// default 20 ≈ 4.3 s, RDMA-CM's CMA_CM_RESPONSE_TIMEOUT).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is resent (default 15).
	MaxRetries int
	// Backlog is the number of pending requests per listener (default 128).
	Backlog int
}

func (c *CMConfig) norm() CMConfig {
	var n CMConfig
	if c != nil {
		n = *c
	}
	if n.ResponseTimeout == 0 {
		n.ResponseTimeout = 20
	}
	if n.MaxRetries <= 0 {
		n.MaxRetries = 15
	}
	if n.Backlog <= 0 {
		n.Backlog = 128
	}
	return n
}

// ConnParam are the per-connection parameters of Dial and ConnRequest.Accept
// (struct rdma_conn_param).
type ConnParam struct {
	PrivateData   []byte // ≤ 56 bytes in a REQ (after the cma_hdr), ≤ 196 in a REP
	IRD, ORD      int    // responder resources / initiator depth; 0 means 16
	RetryCount    uint8  // 0 means 7
	RNRRetryCount uint8  // 0 means 7 (infinite)
}

// Errors of the connection manager.
var (
	ErrCMClosed        = errors.New("rocev2: listener closed")
	ErrCMTimeout       = errors.New("rocev2: CM response timeout")
	ErrPrivateDataLong = errors.New("rocev2: private data too long")
	errCMUsed          = errors.New("rocev2: connection request already answered")
)

// RejectError is returned by Dial when the peer answered with a REJ.
type RejectError struct {
	Reason      roce.RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rocev2: connection rejected: %v (%d bytes private data)", e.Reason, len(e.PrivateData))
}

type cmKey struct {
	addr netip.Addr
	id   uint32 // the peer's comm ID
}

// cmConn is the CM state of one connection (either side).
type cmConn struct {
	localID, remoteID uint32
	peer              netip.AddrPort // where MADs go
	tid               uint64
	conn              *Conn
	active            bool

	mu       sync.Mutex
	state    int
	last     []byte // last MAD sent (for retries and duplicates)
	timer    *time.Timer
	retries  int
	reply    chan cmEvent // active side: REP/REJ/timeout
	dreqDone chan struct{}
}

const (
	cmReqSent = iota
	cmReqRcvd
	cmRepSent
	cmEstablished
	cmDreqSent
	cmClosed
)

type cmEvent struct {
	rep *roce.REP
	rej *roce.REJ
	err error
}

type cmAgent struct {
	e   *Endpoint
	cfg CMConfig

	mu        sync.Mutex
	listeners map[uint16]*Listener
	byLocal   map[uint32]*cmConn
	byRemote  map[cmKey]*cmConn
	psn       roce.PSN
	txbuf     []byte
}

// CM returns the endpoint's connection manager, creating it with cfg on the
// first call (later calls ignore cfg).
func (e *Endpoint) cm(cfg *CMConfig) *cmAgent {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cma == nil {
		a := &cmAgent{e: e, cfg: cfg.norm(), listeners: make(map[uint16]*Listener), byLocal: make(map[uint32]*cmConn),
			byRemote: make(map[cmKey]*cmConn), psn: roce.PSN(rand.Uint32() & roce.PSNMask)}
		e.cma = a
		e.gsi = a.input
	} else if cfg != nil {
		e.cma.mu.Lock()
		e.cma.cfg = cfg.norm()
		e.cma.mu.Unlock()
	}
	return e.cma
}

func (a *cmAgent) config() CMConfig {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

func (a *cmAgent) timeout() time.Duration { return roce.TimeoutExp(a.config().ResponseTimeout) }

// peerPort is the UDP port MADs and data go to on a peer that sent from src.
func (a *cmAgent) peerAddr(src netip.AddrPort) netip.AddrPort {
	if a.e.cfg.PeerPort != 0 {
		return netip.AddrPortFrom(src.Addr(), a.e.cfg.PeerPort)
	}
	return src
}

// send sends one CM MAD to QP1 at dst.
func (a *cmAgent) send(dst netip.AddrPort, mad []byte) {
	a.mu.Lock()
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, PSN: a.psn,
		QKey: roce.GSIQKey, SrcQP: 1}
	a.psn = a.psn.Add(1)
	b := h.Append(a.txbuf[:0], len(mad))
	b = append(b, mad...)
	b = finish(b, len(mad), a.e.link.LocalAddr(), dst)
	a.txbuf = b
	_ = a.e.link.Send([][]byte{b}, dst)
	a.mu.Unlock()
}

func newCommID() uint32 {
	for {
		if v := rand.Uint32(); v != 0 {
			return v
		}
	}
}

// arm (re)starts the retry timer of c: resend c.last until MaxRetries, then fail.
func (a *cmAgent) arm(c *cmConn, fail func()) {
	d := a.timeout()
	c.mu.Lock() // the callback takes c.mu first, so it sees c.timer set
	defer c.mu.Unlock()
	c.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		if c.state == cmEstablished || c.state == cmClosed || (c.state != cmReqSent && c.state != cmRepSent && c.state != cmDreqSent) {
			c.mu.Unlock()
			return
		}
		if c.retries >= a.config().MaxRetries {
			c.mu.Unlock()
			fail()
			return
		}
		c.retries++
		mad := c.last
		c.timer.Reset(a.timeout())
		c.mu.Unlock()
		a.send(c.peer, mad)
	})
}

func (a *cmAgent) forget(c *cmConn) {
	a.mu.Lock()
	if a.byLocal[c.localID] == c {
		delete(a.byLocal, c.localID)
	}
	k := cmKey{c.peer.Addr(), c.remoteID}
	if a.byRemote[k] == c {
		delete(a.byRemote, k)
	}
	a.mu.Unlock()
}

// input handles a packet to QP1 (called by the receive goroutine; must not block).
func (a *cmAgent) input(p *roce.Packet, from netip.AddrPort) {
	if p.DETH == nil || p.DETH.QKey() != roce.GSIQKey {
		return
	}
	h, data, err := roce.ParseMAD(p.Payload)
	if err != nil || !h.IsCM() || h.Method != roce.MADMethodSend {
		return
	}
	switch h.AttrID {
	case roce.AttrREQ:
		if m, err := roce.ParseREQ(data); err == nil {
			a.onREQ(h, &m, from)
		}
	case roce.AttrREP:
		if m, err := roce.ParseREP(data); err == nil {
			a.onREP(&m)
		}
	case roce.AttrRTU:
		if m, err := roce.ParseRTU(data); err == nil {
			a.onRTU(&m)
		}
	case roce.AttrREJ:
		if m, err := roce.ParseREJ(data); err == nil {
			a.onREJ(&m)
		}
	case roce.AttrMRA:
		if m, err := roce.ParseMRA(data); err == nil {
			if c := a.lookupLocal(m.RemoteCommID); c != nil {
				c.mu.Lock()
				if c.timer != nil {
					// The peer needs longer: wait its service timeout plus ours.
					c.timer.Reset(roce.TimeoutExp(m.ServiceTimeout) + a.timeout())
				}
				c.mu.Unlock()
			}
		}
	case roce.AttrDREQ:
		if m, err := roce.ParseDREQ(data); err == nil {
			a.onDREQ(h, &m, from)
		}
	case roce.AttrDREP:
		if m, err := roce.ParseDREP(data); err == nil {
			if c := a.lookupLocal(m.RemoteCommID); c != nil {
				c.mu.Lock()
				if c.state == cmDreqSent {
					c.state = cmClosed
					if c.timer != nil {
						c.timer.Stop()
					}
					close(c.dreqDone)
				}
				c.mu.Unlock()
				a.forget(c)
			}
		}
	}
}

func (a *cmAgent) lookupLocal(id uint32) *cmConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byLocal[id]
}

func (a *cmAgent) sendREJ(dst netip.AddrPort, tid uint64, localID, remoteID uint32, what roce.CMMsgType, reason roce.RejectReason, pd []byte) {
	m := roce.REJ{LocalCommID: localID, RemoteCommID: remoteID, MsgRejected: what, Reason: reason}
	copy(m.PrivateData[:], pd)
	a.send(dst, roce.AppendCMMAD(nil, tid, &m))
}

func (a *cmAgent) onREJ(m *roce.REJ) {
	c := a.lookupLocal(m.RemoteCommID)
	if c == nil {
		return
	}
	c.mu.Lock()
	st := c.state
	if st == cmReqSent || st == cmRepSent {
		c.state = cmClosed
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	c.mu.Unlock()
	switch st {
	case cmReqSent:
		a.forget(c)
		c.reply <- cmEvent{rej: m}
	case cmRepSent:
		a.forget(c)
		if c.conn != nil {
			c.conn.Disconnect(false)
		}
	}
}

func (a *cmAgent) onDREQ(h roce.MADHeader, m *roce.DREQ, from netip.AddrPort) {
	peer := a.peerAddr(from)
	rep := roce.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}
	c := a.lookupLocal(m.RemoteCommID)
	if c != nil {
		rep.LocalCommID = c.localID
		c.mu.Lock()
		conn := c.conn
		wasOpen := c.state != cmClosed
		c.state = cmClosed
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		a.forget(c)
		if conn != nil && wasOpen {
			conn.remoteClosed.Store(true)
			conn.Disconnect(false)
		}
	}
	a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &rep))
}

// connDone is called when a CM-managed Conn stops: send a DREQ (with
// retries) unless the peer already disconnected.
func (a *cmAgent) connDone(c *cmConn) {
	c.mu.Lock()
	if c.state != cmEstablished && c.state != cmRepSent {
		c.mu.Unlock()
		a.forget(c)
		return
	}
	c.state = cmDreqSent
	c.dreqDone = make(chan struct{})
	m := roce.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.conn.rqpn}
	c.last = roce.AppendCMMAD(nil, c.tid, &m)
	c.retries = 0
	if c.timer != nil {
		c.timer.Stop()
	}
	mad := c.last
	c.mu.Unlock()
	a.arm(c, func() {
		c.mu.Lock()
		c.state = cmClosed
		c.mu.Unlock()
		a.forget(c)
	})
	a.send(c.peer, mad)
}

func depth(v int) int {
	if v <= 0 {
		return 16
	}
	return min(v, 255)
}

func retry(v uint8) uint8 {
	if v == 0 || v > 7 {
		return 7
	}
	return v
}
