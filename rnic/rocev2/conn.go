package rocev2

// Conn: the connected RC/UC QP, the orchestrator of its requester (requester.go),
// completer (completer.go) and responder (responder.go): its goroutine, state and
// disconnect.

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/pollwake"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// QPType is the IB transport service of a connected QP.
type QPType uint8

// Connected transport services (IBTA Vol.1 §9.8; UD is UDQP).
const (
	RC QPType = iota // reliable connection
	UC               // unreliable connection: SEND and WRITE only, no ACKs
)

func (t QPType) String() string {
	if t == UC {
		return "UC"
	}
	return "RC"
}

// ConnAttr are the per-connection attributes of ibv_modify_qp to RTR/RTS.
type ConnAttr struct {
	Type      QPType
	Remote    netip.AddrPort // the peer's link address (UDP port 4791 for a kernel peer)
	RemoteQPN uint32         // dest_qp_num
	SendPSN   roce.PSN       // sq_psn: the first PSN this QP sends
	RecvPSN   roce.PSN       // rq_psn: the first PSN expected from the peer
	MTU       roce.MTU       // path MTU; 0 means the endpoint's
}

// Errors of the transport.
var (
	ErrRetryExceeded    = errors.New("rocev2: transport retry count exceeded")
	ErrRNRRetryExceeded = errors.New("rocev2: RNR retry count exceeded")
	ErrRemoteNAK        = errors.New("rocev2: NAK received")
	ErrLocalNAK         = errors.New("rocev2: request refused with a NAK")
)

// NAKError is the cause of a QP error caused by a NAK, sent or received.
type NAKError struct {
	Code roce.NAKCode
	PSN  roce.PSN
	Sent bool // this side sent the NAK (responder)
}

func (e *NAKError) Error() string {
	if e.Sent {
		return "rocev2: sent NAK " + e.Code.String() + " at PSN " + e.PSN.String()
	}
	return "rocev2: received NAK " + e.Code.String() + " at PSN " + e.PSN.String()
}

// Unwrap returns ErrLocalNAK or ErrRemoteNAK.
func (e *NAKError) Unwrap() error {
	if e.Sent {
		return ErrLocalNAK
	}
	return ErrRemoteNAK
}

// Conn is a connected RC or UC QP on an Endpoint: it implements rnic.QPTransport.
// It is the orchestrator of the QP's requester, completer and responder: one
// goroutine (run) transmits requests and READ responses and runs the timers; the
// endpoint's receive goroutine runs the completer and responder under mu.
type Conn struct {
	e       *Endpoint
	qp      *rnic.TransportQP
	typ     QPType
	local   netip.AddrPort
	remote  netip.AddrPort
	rqpn    uint32
	mtu     int
	cfg     qpParams
	tmo     time.Duration // local ACK timeout; 0: none
	cmLocal uint16        // RDMA-CM ports of the two ends (0 without the CM)
	cmPeer  uint16

	kick chan struct{}
	// cw, once the connection has sent, replaces kick as what its goroutine waits on
	// (a pollwake.Waker); only that goroutine sets it.
	cw     atomic.Pointer[pollwake.Waker]
	cwDone bool // cw was tried
	done   chan struct{}
	disc   atomic.Int32 // 1 graceful, 2 abort

	onDone       func()      // CM: send a DREQ when the connection ends
	onFirst      func()      // CM: the first packet arrived (communication established)
	remoteClosed atomic.Bool // CM: the peer sent a DREQ
	peerPD       []byte

	mu        sync.Mutex
	flushResp bool // send the queued responses before stopping (responder NAK)
	dead      bool
	inBatch   bool
	rdSend    bool         // a lone READ response was queued in this receive batch: endBatch sends it (readQueued)
	held      atomic.Int32 // receive completions held in the receive goroutine's batch (rxCtx.recvs)
	fatal     bool
	err       error     // why the connection ended
	used      bool      // a packet was received or a request sent
	firstBy   time.Time // CM passive: end the connection if unused by then

	requester // requester.go and completer.go
	responder // responder.go

	// txMu is held by whoever builds and sends the connection's packets: its goroutine
	// (run), or a poster while that goroutine is parked (sendInline). parked and
	// parkUntil (written under mu) say that the goroutine is parked, or about to park,
	// until parkUntil (zero: until woken); parked is atomic so that a post can see
	// without a lock that the goroutine is busy and only needs waking.
	txMu      sync.Mutex
	parked    atomic.Bool
	parkUntil time.Time

	txb  *txBatch // while packets are being sent (from the endpoint's pool)
	segs [][]byte // request's scratch: the WQE segments holding a packet's payload
	// finishTx's ICRC pseudo-header state for packets of txICRCLen bytes (0: none)
	txICRCLen int
	txICRC    uint32
	crcq      atomic.Pointer[crcQueue] // WQEs whose payload CRCs a poster may compute (txcrc.go)
	txJoined  uint64                   // packets sent with a payload CRC joined (finishJoined), for tests
	ackJoined uint64                   // deferred ACKs that left in a batch of the connection's (owedAck), for tests
	// Traffic counted once per batch, not per packet (the rnic counters are four atomic
	// adds): payload bytes of the packets fill is building, and what input received in
	// the current receive batch (added by Endpoint.endBatch, under mu).
	txBytes         int
	rxBytes, rxSegs int
}

// txBatch is one Link batch of packet buffers. With a gatherLink, packet i may be
// b[i] (its headers), body[i] (payload in registered memory) and tail[i] (pad and ICRC,
// in b[i]'s buffer after the headers); body[i] and tail[i] are nil when b[i] is whole.
type txBatch struct{ b, body, tail [][]byte }

// setParts records packet i of the batch: whole in b[i] (body nil), or b[i] holding
// the headers, pad and ICRC around body (fill's requests, see Conn.request).
func (t *txBatch) setParts(i int, body []byte) {
	if body == nil {
		t.body[i], t.tail[i] = nil, nil
		return
	}
	hl := len(t.b[i]) - roce.ICRCLen - roce.PadLen(len(body))
	t.body[i], t.tail[i] = body, t.b[i][hl:]
	t.b[i] = t.b[i][:hl]
}

// Errors that end a connection (Conn.Err, and the Err of the QP's EventDisconnected).
var (
	ErrPeerDisconnected    = errors.New("rocev2: peer disconnected")
	ErrFirstMessageTimeout = errors.New("rocev2: no packet on the connection within the first-message timeout")
)

// connOpts are what the CM adds to a connection.
type connOpts struct {
	params          *qpParams // nil: the endpoint's
	onDone, onFirst func()
	firstMsg        time.Duration // > 0: the first-message timeout
	cmLocal, cmPeer uint16
}

// Connect binds qp (Idle, not yet attached) to a peer QP: the equivalent of
// ibv_modify_qp INIT→RTR→RTS with attr. The QP is in RTS on return.
func (e *Endpoint) Connect(qp *rnic.QP, attr ConnAttr) (*Conn, error) {
	return e.connect(qp, attr, connOpts{})
}

func (e *Endpoint) connect(qp *rnic.QP, attr ConnAttr, o connOpts) (*Conn, error) {
	if e.closed.Load() {
		return nil, ErrEndpointClosed
	}
	if qp.Num() < rnic.FirstQPN {
		return nil, ErrQPNumReserved
	}
	cfg := e.params
	if o.params != nil {
		cfg = *o.params
	}
	if attr.MTU.Valid() {
		cfg.MTU = attr.MTU
	}
	remote := netip.AddrPortFrom(attr.Remote.Addr().Unmap(), attr.Remote.Port())
	c := &Conn{e: e, typ: attr.Type, local: e.link.LocalAddr(), remote: remote,
		rqpn: attr.RemoteQPN & roce.QPNMask, mtu: cfg.MTU.Bytes(), cfg: cfg, cmLocal: o.cmLocal, cmPeer: o.cmPeer,
		kick: make(chan struct{}, 1), done: make(chan struct{}), onDone: o.onDone, onFirst: o.onFirst}
	if cfg.Timeout != 0 {
		c.tmo = roce.TimeoutExp(cfg.Timeout)
	}
	c.ackDeferMax = ackDeferMax(c.tmo)
	if o.firstMsg > 0 {
		c.firstBy = time.Now().Add(o.firstMsg)
	}
	if attr.Type == RC && e.cfg.KeepAlive > 0 {
		c.kaIdle = time.Now()
		c.kaNext = c.kaIdle.Add(e.cfg.KeepAlive / 4)
	}
	c.sqMax = qp.Attr().Cap.MaxSendWR
	c.sendPSN, c.maxSent, c.unaPSN = attr.SendPSN&roce.PSNMask, attr.SendPSN&roce.PSNMask, attr.SendPSN&roce.PSNMask
	c.ePSN = attr.RecvPSN & roce.PSNMask
	c.retryLeft, c.rnrLeft = cfg.RetryCnt, cfg.RNRRetry
	c.win.initWindow(cfg.Window)
	c.initResponder()
	c.hdr = roce.Header{PKey: cfg.PKey, DestQP: c.rqpn}
	c.rhdr = c.hdr
	// Attach before the receive goroutine can find c (e.conns): it uses c.qp.
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("rocev2: endpoint stopped: %w", err)
	}
	tq, err := rnic.AttachTransport(qp, c)
	if err != nil {
		return nil, err // ErrAttached: the QP already has a transport (a Conn of its own)
	}
	c.qp = tq
	e.mu.Lock()
	if err := e.Err(); err != nil {
		e.mu.Unlock()
		tq.TransportDone(err)
		return nil, fmt.Errorf("rocev2: endpoint stopped: %w", err)
	}
	e.conns[qp.Num()] = c
	e.connsGen.Add(1)
	e.mu.Unlock()
	e.connsChanged()
	go c.run()
	if err := tq.Established(); err != nil {
		c.Disconnect(false)
		<-c.done
		return nil, err
	}
	return c, nil
}

// QP returns the bound queue pair.
func (c *Conn) QP() *rnic.QP { return c.qp.QP() }

// Type returns RC or UC.
func (c *Conn) Type() QPType { return c.typ }

// Done is closed once the connection's goroutine has stopped (the QP is in
// Error and its work flushed).
func (c *Conn) Done() <-chan struct{} { return c.done }

// IRD returns the QP's inbound RDMA Read/atomic depth (max_dest_rd_atomic as negotiated
// by the CM, or as given to Endpoint.Connect).
func (c *Conn) IRD() int { return c.cfg.MaxDestRd }

// Window returns how many request packets the connection lets be unacknowledged now:
// its adaptive window, between 16 (or Config.Window if smaller) and Config.Window
// (window.go).
func (c *Conn) Window() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.win.n
}

// ORD returns the QP's outbound RDMA Read/atomic depth (max_rd_atomic).
func (c *Conn) ORD() int { return c.cfg.MaxRdAtomic }

// Err returns why the connection ended: nil while it is up and after a local
// Disconnect, ErrPeerDisconnected after the peer's DREQ, or the error that
// moved the QP to Error (retry exhaustion, a NAK, a first-message timeout, a
// link failure, a *RejectError…). The QP's EventDisconnected carries the same
// error.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LocalAddr returns this end's address: the endpoint's IP and UDP port, and the
// RDMA-CM port (the listener's on the passive side, the cma_hdr source port on
// the active side; 0 for a QP connected with Endpoint.Connect).
func (c *Conn) LocalAddr() Addr {
	return Addr{IP: c.local.Addr(), Port: c.cmLocal, UDPPort: c.local.Port()}
}

// RemoteAddr returns the peer's address: where its RoCE link is, and its
// RDMA-CM port (the dialed service port on the active side, the cma_hdr port on
// the passive side; 0 without the CM).
func (c *Conn) RemoteAddr() Addr {
	return Addr{IP: c.remote.Addr(), Port: c.cmPeer, UDPPort: c.remote.Port()}
}

// SendQueued implements rnic.QPTransport. The posting goroutine sends the new work
// itself when the connection's goroutine is parked (sendInline), else it wakes that
// goroutine; then it computes the payload CRCs of the WQEs the connection has taken and
// not sent yet (txcrc.go), so the connection's goroutine has less to do per packet.
func (c *Conn) SendQueued() {
	if !c.sendInline() {
		c.wake()
	}
	c.help()
}

// inlineMax is the largest message a posting goroutine sends itself (sendInline).
// Larger messages stream, where the wake-up matters less than batching: with inlineMax
// at 4096, the 4 KiB WRITE that started each burst of 64 left alone and drew an ACK of
// its own, and BenchmarkRoCEv2Write/4KiB measured 2,480 MB/s against 2,850 (commit
// 21c748d). iWARP's poster sends up to 16 KiB (iwarp fastMax): a lone FPDU costs TCP
// no ACK of its own.
const inlineMax = 1024

// sendInline builds and sends a batch of the connection's packets on the calling
// goroutine (a poster) when the connection's goroutine is parked, nothing earlier is
// outstanding (every WQE it took has completed), the posted message is at most
// inlineMax bytes and the connection is in its plain running state. That saves the
// wake-up of the connection's goroutine (an eventfd write, the poll that finds it and a
// goroutine switch) on the way of a message that finds the connection idle, as each
// message of a ping-pong does. Posts that find work outstanding wake the goroutine,
// which sends what has accumulated in batches: a poster sending each post of a burst
// on its own would make a system call per packet.
//
// The goroutine is still woken when work remains after the batch, and when fill armed
// an ACK deadline (IBTA §9.7.6.1.3) earlier than the one the goroutine parked with;
// while a message's ACK deadline is pending, the goroutine's own deadline covers the
// next ones. false: nothing was sent, and the caller wakes the goroutine.
func (c *Conn) sendInline() bool {
	if !c.lockHere() {
		return false
	}
	ok := c.sqHead == c.sqTail && c.unaPSN == c.maxSent
	if ok {
		// Nothing taken, or a message too large for this path (it waits in the ring): the
		// goroutine sends it.
		taken, _ := c.take()
		ok = taken && wireLen(c.ent(c.sqTail-1).w) <= inlineMax
	}
	if !ok {
		c.unlockHere()
		return false
	}
	if c.sendHere() > 0 {
		c.e.InlineSends.Add(1)
	}
	return true
}

// wireLen is the payload a send WQE's request carries: none for an RDMA READ or atomic
// (its data comes back in the response), the message otherwise.
func wireLen(w *rnic.SendWQE) uint64 {
	if isRdAtomic(w.Opcode) {
		return 0
	}
	return w.Len
}

// sendResponses sends the lone READ response a receive batch queued (readQueued), and
// any ACK queued behind it, on the receive goroutine at the end of the batch (lockHere's
// conditions): a READ then costs its responder no goroutine wake-up, as a SEND costs its
// requester none (sendInline). One batch of packets leaves here; the connection's
// goroutine is woken for the rest, as sendInline wakes it. false: nothing was sent, and
// the caller wakes the goroutine.
func (c *Conn) sendResponses() bool {
	if !c.lockHere() {
		return false
	}
	if c.rdLen == 0 {
		c.unlockHere()
		return false
	}
	if c.sendHere() > 0 {
		c.e.InlineResponses.Add(1)
	}
	return true
}

// lockHere takes c.txMu and c.mu for a goroutine other than the connection's that would
// send for it (sendInline, sendResponses, then sendHere): only while the connection's
// goroutine is parked and the connection in its plain running state (established, not
// ending, not failed, not waiting out an RNR NAK). false: neither lock is held.
func (c *Conn) lockHere() bool {
	if !c.parked.Load() || !c.txMu.TryLock() {
		return false
	}
	c.mu.Lock()
	if c.parked.Load() && c.cwDone && !c.dead && !c.fatal && !c.rnrPending && c.disc.Load() == 0 {
		return true
	}
	c.unlockHere()
	return false
}

// unlockHere releases what lockHere took, when nothing is sent after all.
func (c *Conn) unlockHere() {
	c.mu.Unlock()
	c.txMu.Unlock()
}

// sendHere builds one batch of the connection's packets (fill) and sends it on the calling
// goroutine, which holds c.txMu and c.mu (lockHere); it unlocks both, and wakes the
// connection's goroutine when work remains after the batch, or when fill armed an ACK
// deadline (IBTA §9.7.6.1.3) earlier than the one that goroutine parked with. It returns
// the packets sent.
func (c *Conn) sendHere() int {
	c.batch()
	n := c.fill()
	wake := n == len(c.txb.b) ||
		(!c.ackDeadline.IsZero() && (c.parkUntil.IsZero() || c.ackDeadline.Before(c.parkUntil)))
	c.mu.Unlock()
	if n > 0 {
		c.e.sendTx(c.txb, n, c.remote)
	}
	c.release()
	c.txMu.Unlock()
	if wake {
		c.wake()
	}
	return n
}

// CanDriveReceive implements rnic.ReceiveDriver: the device enables
// rnic.Config.WaitDrivesReceive, the endpoint's link is a Linux UDPLink, and this
// connection is the endpoint's only one (rxdrive.go).
func (c *Conn) CanDriveReceive() bool { return c.e.drv != nil && c.e.drv.canDrive(c) }

// DriveReceive implements rnic.ReceiveDriver: the caller runs the endpoint's receive.
func (c *Conn) DriveReceive(ready func() bool, w rnic.Waker) bool {
	if !c.CanDriveReceive() {
		w.Wake() // the caller asks CanDriveReceive again, and waits as without the mode
		return false
	}
	return c.e.drv.h.Drive(ready, w, c.e.drv.runWait)
}

// Kick implements rnic.ReceiveDriver.
func (c *Conn) Kick() {
	if c.e.drv != nil {
		c.e.drv.h.Kick()
	}
}

// Disconnect implements rnic.QPTransport: graceful waits until every sent
// request is acknowledged; abortive stops at once. RoCE has no LLP to close.
func (c *Conn) Disconnect(graceful bool) {
	v := int32(2)
	if graceful {
		v = 1
	}
	for {
		o := c.disc.Load()
		if o >= v || c.disc.CompareAndSwap(o, v) {
			break
		}
	}
	c.wake()
}

// abort ends the connection at once because of err (kept for Err unless an
// earlier error ended it).
func (c *Conn) abort(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.Disconnect(false)
}

func (c *Conn) wake() {
	if w := c.cw.Load(); w != nil {
		w.Signal()
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// batch takes a transmit batch from the endpoint for the goroutine's current run of
// sends; release returns it when there is nothing more to send, so an idle
// connection holds no packet buffers.
func (c *Conn) batch() {
	if c.txb == nil {
		c.txb = c.e.getBatch()
	}
}

func (c *Conn) release() {
	if c.txb != nil {
		c.e.putBatch(c.txb)
		c.txb = nil
	}
}

func (c *Conn) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if w := c.cw.Load(); w != nil {
			w.Arm() // before looking for work: a wake for work not seen below ends the wait
		}
		c.txMu.Lock()
		park, next, exit := c.step()
		c.txMu.Unlock()
		if exit {
			return
		}
		if park {
			c.park(t, next)
		}
	}
}

// step is one turn of the connection's goroutine, with c.txMu held: send a batch, or
// end the connection (exit), or say that the goroutine is to park until next (zero: until
// woken).
func (c *Conn) step() (park bool, next time.Time, exit bool) {
	c.batch()
	c.mu.Lock()
	c.parked.Store(false)
	if c.disc.Load() == 2 && c.flushResp && c.rdLen > 0 {
		// The responder NAKed and went to Error: the READ responses
		// queued before the NAK, and the NAK, still leave, in order.
		n := c.fill()
		c.mu.Unlock()
		c.e.sendTx(c.txb, n, c.remote)
		return false, time.Time{}, false
	}
	if c.disc.Load() == 2 || (c.disc.Load() == 1 && c.idleLocked()) {
		if c.owesAck() {
			// The end of the connection, even an abortive one, leaves no message that
			// completed here unacknowledged (an ACK a Wait deferred, Endpoint.AcksDeferred):
			// its sender would not see it complete (Endpoint.endBatch).
			n := c.owedAck(0)
			c.mu.Unlock()
			c.e.sendTx(c.txb, n, c.remote)
			return false, time.Time{}, false
		}
		if c.held.Load() > 0 {
			// The receive goroutine still holds receive completions of this
			// connection (rxCtx.recvs): they precede the flush. It wakes us.
			c.mu.Unlock()
			c.release()
			return true, time.Time{}, false
		}
		c.dead = true
		if c.ackTimer != nil {
			c.ackTimer.Stop()
		}
		err := c.err
		c.dropCRCs() // before TransportDone flushes the WQEs
		c.mu.Unlock()
		c.release()
		c.e.mu.Lock()
		delete(c.e.conns, c.qp.QP().Num())
		c.e.connsGen.Add(1)
		c.e.mu.Unlock()
		c.e.connsChanged()
		if c.onDone != nil && !c.remoteClosed.Load() && !c.e.closed.Load() {
			c.onDone()
		}
		c.qp.TransportDone(err)
		c.stopWake()
		close(c.done)
		return false, time.Time{}, true
	}
	now := time.Now()
	c.timersLocked(now)
	c.keepalive(now)
	if !c.firstBy.IsZero() && !now.Before(c.firstBy) {
		// CMConfig.FirstMessageTimeout: accepted, but nothing ever came.
		c.firstBy = time.Time{}
		if c.err == nil {
			c.err = ErrFirstMessageTimeout
		}
		c.e.FirstMessageTimeouts.Add(1)
		c.disc.Store(2)
		c.mu.Unlock()
		return false, time.Time{}, false
	}
	n := c.fill()
	next = c.nextDeadline()
	if n == 0 {
		c.parked.Store(true)
		c.parkUntil = next
	}
	c.mu.Unlock()
	if n > 0 {
		c.e.sendTx(c.txb, n, c.remote)
		if !c.cwDone {
			c.startWake()
		}
		return false, time.Time{}, false
	}
	c.release()
	return true, next, false
}

// park waits for a wake (Conn.wake) or until next (zero: none), on the connection's
// waker once it has one, else on its channel and t.
func (c *Conn) park(t *time.Timer, next time.Time) {
	if w := c.cw.Load(); w != nil {
		_ = w.Wait(next) // a deadline ends it with an error: the caller runs its timers
		return
	}
	if !next.IsZero() {
		t.Reset(time.Until(next))
	} else {
		t.Reset(time.Hour)
	}
	select {
	case <-c.kick:
	case <-t.C:
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

// startWake gives the connection, which has just sent its first packets, a pollwake.Waker,
// unless the endpoint's connections hold maxConnWakes of them (each is a descriptor)
// or the eventfd cannot be opened: then it keeps its channel (counted in WakeFallbacks).
func (c *Conn) startWake() {
	c.cwDone = true
	if !pollwake.Supported {
		return
	}
	if c.e.wakes.Add(1) <= maxConnWakes {
		if w := pollwake.New(); w != nil {
			c.cw.Store(w)
			return
		}
	}
	c.e.wakes.Add(-1)
	c.e.WakeFallbacks.Add(1)
}

// stopWake closes the connection's waker as its goroutine ends; a late wake goes to
// the channel, which nobody reads any more.
func (c *Conn) stopWake() {
	if w := c.cw.Swap(nil); w != nil {
		w.Close()
		c.e.wakes.Add(-1)
	}
}

func (c *Conn) idleLocked() bool {
	return c.fatal || (c.sqHead == c.sqTail && !c.qp.SendPending() && c.rdLen == 0)
}

func (c *Conn) nextDeadline() time.Time {
	var d time.Time
	if c.rnrPending {
		d = c.rnrUntil
	} else if !c.ackDeadline.IsZero() {
		d = c.ackDeadline
	}
	for _, t := range [...]time.Time{c.firstBy, c.kaNext} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// input hands a packet of this QP to the completer (responses) or the responder
// (requests); called by the endpoint's receive goroutine under c.mu.
func (c *Conn) input(r *rxCtx, p *roce.Packet, from netip.AddrPort) {
	op := p.Opcode()
	want := roce.ServiceRC
	if c.typ == UC {
		want = roce.ServiceUC
	}
	if op.Service() != want {
		c.e.RxDropped.Add(1)
		return
	}
	if c.onFirst != nil {
		c.onFirst() // any packet establishes a connection whose RTU was lost
		c.onFirst = nil
	}
	if !c.used && (op.IsResponse() && c.sqHead != c.sqTail || !op.IsResponse() && !isProbe(p)) {
		// A request, or the answer to one: the connection is in use. Keepalive
		// probes and their ACKs are not (CMConfig.FirstMessageTimeout).
		c.used = true
		c.firstBy = time.Time{}
	}
	c.rxBytes += len(p.Payload)
	c.rxSegs++
	if op.IsResponse() {
		if c.typ == RC && !c.fatal {
			c.completer(p)
		}
		return
	}
	if c.fatal || c.qp.InError() {
		return
	}
	if c.typ == UC {
		c.ucInput(r, p)
		return
	}
	c.rcInput(r, p)
}

func (c *Conn) setFatal(ev rnic.EventType, err error) {
	if c.fatal {
		return
	}
	c.fatal = true
	c.err = err
	c.ackDeadline = time.Time{}
	c.rnrPending = false
	c.qp.Fatal(ev, err)
}

var debugHook func(c *Conn)

// isProbe reports a keepalive probe: a zero-length RDMA WRITE without immediate
// data, which places nothing and completes nothing at the responder.
func isProbe(p *roce.Packet) bool {
	return p.Opcode().WithService(roce.ServiceRC) == roce.RCWriteOnly && p.RETH != nil && p.RETH.DMALen() == 0
}

// Network names the transport: "rocev2" (rnic.QP.Transport reports it).
func (c *Conn) Network() string { return "rocev2" }
