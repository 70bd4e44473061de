package iwarp

// Conn: one connection's state and life cycle (start, disconnect, abort, the exit that
// flushes the QP). The roles live in their own files: tx.go (sender), rx.go (receiver
// dispatch and untagged/Write placement), requester.go (our Reads and atomics: requests
// out, responses in), responder.go (the peer's Reads and atomics: requests in, IRQ,
// responses out), terminate.go (Terminate messages, both directions).

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// Conn is one established iWARP connection bound to a QP; it is the QP's transport.
type Conn struct {
	qp        *rnic.TransportQP // set by attach
	uqp       *rnic.QP          // the QP to attach to
	nc        net.Conn
	cfg       Config
	params    mpa.Params
	initiator bool
	peerPD    []byte
	release   func()            // responder: gives back the listener's connection slot
	lst       *listenerCounters // responder: the accepting listener's counters
	mulpdu    int
	ird, ord  int
	ext       bool

	rd *mpa.Reader // FPDUs in (RFC 5044 §4): readv straight into registered memory
	wr *mpa.Writer // FPDUs out, batched into vectored writes

	kick       chan struct{}
	quit       chan struct{}
	quitOnce   sync.Once
	running    atomic.Int32
	done       chan struct{}
	rxDone     chan struct{} // closed when the receiver has stopped
	drv        *rxDrive      // the receive's coroutine when a CQ waiter may drive it
	timer      *time.Timer   // graceful disconnect bound
	firstTimer *time.Timer   // responder: Config.FirstFPDUTimeout
	ng         nudger        // initiator: see nudge.go

	mu       sync.Mutex
	cond     chan struct{} // closed when the responder may transmit (first FPDU received)
	condOnce sync.Once
	orq      ring[orqEntry]
	irq      ring[irqEntry]
	irqBusy  int    // responses taken from irq whose last FPDU is not yet written
	term     []byte // pending Terminate ULPDU (after the MPA length), built by the receiver
	termErr  rdmap.TerminateError
	termSend bool
	closing  bool
	rxEOF    bool
	err      error

	// sender state, guarded by txMu (held by the sender goroutine or the fast path)
	txMu     sync.Mutex
	ready    atomic.Bool // gate passed and RTR sent: the fast path may run
	txDone   bool
	lastFast int64           // time of the last fast-path attempt (ns since fastEpoch)
	sent     []*rnic.SendWQE // written into the batch: complete after the flush
	txMSN    [4]ddp.MSN      // next MSN to send per queue (RFC 5041 §5.1)
	hdr      [96]byte
	pieces   [][]byte
	held     *rnic.SendWQE
	twRC     syscall.RawConn // the socket of the receiver's non-blocking writes (respond), at its first response
	twNo     bool            // nc has none (not a *net.TCPConn)
	holding  atomic.Bool     // held != nil (see hold)
	reqID    uint32

	// receiver-owned
	rxMSN     [4]ddp.MSN // next MSN expected per queue
	rxPieces  [][]byte
	ahead     *readAhead // Read Response segments read ahead (streamReadResp), once needed
	respDefer bool       // responses queued while more requests were buffered (respond)
	rh        [128]byte
	cur       *rnic.RecvWQE
	curSt     rnic.Status // TakeRecv's status for cur: not Success, its SGL is invalid
	curGot    uint64
	tagged    ddp.TaggedStream
	rtrExpect bool
	rxAny     bool                // an FPDU has arrived
	staging   bool                // CRC negotiated: each ULPDU is read whole and verified first (stage)
	stageBuf  *[mpa.MaxULPDU]byte // the staging buffer while an FPDU is processed
	staged    []byte              // the unread rest of the staged ULPDU
	// rxStream: staged holds only the header of the FPDU being processed, read ahead of its
	// CRC; the rest comes from the stream and the CRC is checked at its end (streamable).
	rxStream   bool
	rxStreamed atomic.Uint64 // FPDUs processed so (tests)
	// wNext continues the last Write segment placed that was not its message's last: its
	// STag and the TO after it (wNextOK), for streamable.
	wNextSTag uint32
	wNextTO   uint64
	wNextOK   bool
	lastWrite bool
}

func newConn(qp *rnic.QP, nc net.Conn, cfg Config, p mpa.Params, initiator bool, peerPD []byte) *Conn {
	c := &Conn{uqp: qp, nc: nc, cfg: cfg, params: p, initiator: initiator, peerPD: peerPD,
		ext: cfg.Extensions, kick: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{}), cond: make(chan struct{}), rxDone: make(chan struct{})}
	c.ird, c.ord = int(p.IRD), int(p.ORD)
	if c.ird > qp.Device().Config().MaxIRD {
		c.ird = qp.Device().Config().MaxIRD
	}
	if c.ord > qp.Device().Config().MaxORD {
		c.ord = qp.Device().Config().MaxORD
	}
	if cfg.testORD > 0 {
		c.ord = cfg.testORD
	}
	c.orq = newRing[orqEntry](c.ord + 1)
	c.irq = newRing[irqEntry](c.ird + 1)
	c.mulpdu = cfg.MULPDU
	if c.mulpdu <= 0 {
		c.mulpdu = mpa.MULPDU(tcpMSS(nc), p.TxMarkers)
		if isLoopback(nc) && !p.TxMarkers {
			// Loopback has no wire segments to align to (RFC 5044 §4.5 is a SHOULD):
			// use the largest FPDU with 4-byte aligned payload.
			c.mulpdu = mpa.MaxULPDU - 3
		}
	}
	c.mulpdu = max(min(c.mulpdu, mpa.MaxULPDU), mpa.MinMULPDU)
	rx := p.RxFraming()
	rx.ReadBuffer = rxReadBuffer
	rs := rxStream(nc)
	if v, ok := rs.(*vecConn); ok {
		dc := qp.Device().Config()
		v.rv.spinState = spinState{spin: dc.ReceiveSpin, c: c}
		if dc.WaitDrivesReceive > 0 {
			c.drv = newRxDrive(c, v, dc.WaitDrivesReceive)
		}
	}
	c.rd = mpa.NewReader(rs, rx)
	c.wr = mpa.NewWriter(nc, p.TxFraming())
	for i := range c.txMSN {
		c.txMSN[i] = ddp.InitialMSN
		c.rxMSN[i] = ddp.InitialMSN
	}
	c.rtrExpect = !initiator && p.P2P
	c.staging = p.CRC
	if initiator {
		c.openGate()
	}
	c.nudgeStart()
	return c
}

// attach binds c to its QP as the QP's transport.
func (c *Conn) attach() error {
	tq, err := rnic.AttachTransport(c.uqp, c)
	if err != nil {
		return err
	}
	c.qp = tq
	return nil
}

// start attaches c to the QP, moves it to RTS and runs the connection.
func (c *Conn) start() error {
	if err := c.attach(); err != nil {
		return err
	}
	if err := c.qp.Established(); err != nil {
		c.qp.TransportDone(err)
		return err
	}
	c.run()
	return nil
}

// run starts the sender and receiver goroutines.
func (c *Conn) run() {
	c.running.Store(2)
	go c.sendLoop()
	if c.drv != nil {
		go c.drv.run()
	} else {
		go c.recvLoop()
	}
}

// CanDriveReceive implements rnic.ReceiveDriver: the device enables the mode and the
// connection is a kernel TCP socket.
func (c *Conn) CanDriveReceive() bool { return c.drv != nil }

// DriveReceive implements rnic.ReceiveDriver (rnic.Config.WaitDrivesReceive).
func (c *Conn) DriveReceive(ready func() bool, w rnic.Waker) bool {
	return c.drv != nil && c.drv.DriveReceive(ready, w)
}

// Kick implements rnic.ReceiveDriver.
func (c *Conn) Kick() {
	if c.drv != nil {
		c.drv.Kick()
	}
}

// QP returns the bound queue pair.
func (c *Conn) QP() *rnic.QP { return c.uqp }

// Params returns the negotiated MPA parameters.
func (c *Conn) Params() mpa.Params { return c.params }

// PeerPrivateData returns the private data the peer sent (Reply for the initiator,
// Request for the responder).
func (c *Conn) PeerPrivateData() []byte { return c.peerPD }

// MULPDU returns the largest ULPDU this side sends.
func (c *Conn) MULPDU() int { return c.mulpdu }

// IRD and ORD return the negotiated inbound and outbound Read depths.
func (c *Conn) IRD() int { return c.ird }

// ORD returns the negotiated outbound Read depth.
func (c *Conn) ORD() int { return c.ord }

// LocalAddr returns the TCP local address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the TCP remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed when both goroutines have exited and the QP was flushed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close aborts the connection and waits until the QP is flushed.
func (c *Conn) Close() error {
	c.Disconnect(false)
	<-c.done
	return nil
}

// SendQueued implements rnic.QPTransport. Small work is written by the calling goroutine
// when the sender goroutine is idle (see fastPump).
func (c *Conn) SendQueued() {
	if !c.ready.Load() || !c.txMu.TryLock() {
		c.wake()
		return
	}
	more := c.fastPump()
	c.txMu.Unlock()
	if more {
		c.wake()
	}
}

// Disconnect implements rnic.QPTransport.
func (c *Conn) Disconnect(graceful bool) {
	if !graceful {
		c.abort(true)
		return
	}
	c.mu.Lock()
	if !c.closing {
		c.closing = true
		c.timer = time.AfterFunc(c.cfg.Disconnect, func() { c.abort(true) })
	}
	c.mu.Unlock()
	c.wake()
}

func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// openGate lets the sender transmit: at once for the initiator, at the initiator's first
// FPDU for the responder (RFC 5044 §7.1.2).
func (c *Conn) openGate() {
	c.condOnce.Do(func() {
		close(c.cond)
		if c.firstTimer != nil {
			c.firstTimer.Stop()
		}
	})
}

// firstFPDUExpired ends an accepted connection whose initiator has sent nothing within
// Config.FirstFPDUTimeout.
func (c *Conn) firstFPDUExpired() {
	select {
	case <-c.cond:
		return
	default:
	}
	if c.lst != nil {
		c.lst.firstFPDUTimeouts.Add(1)
	}
	c.fail(rnic.EventQPFatal, ErrFirstFPDUTimeout)
}

// abort closes the socket (with RST when rst) and stops both goroutines.
func (c *Conn) abort(rst bool) {
	c.quitOnce.Do(func() {
		close(c.quit)
		if rst {
			closeAbortive(c.nc)
		} else {
			_ = c.nc.Close()
		}
	})
}

func (c *Conn) quitting() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// exit is run by each goroutine on its way out; the last one finishes the QP.
func (c *Conn) exit() {
	if c.running.Add(-1) != 0 {
		return
	}
	c.abort(false)
	// Wait out a fast path running on a posting goroutine (its writes fail now that the
	// socket is closed) and keep it out, so no WQE is touched after the flush.
	c.txMu.Lock()
	c.txDone = true
	c.txMu.Unlock()
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.firstTimer != nil {
		c.firstTimer.Stop()
	}
	err := c.err
	c.mu.Unlock()
	c.nudgeStop()
	c.rd.Release()
	c.qp.TransportDone(err)
	if c.release != nil {
		c.release()
	}
	close(c.done)
}

// Err returns the error that ended the connection once Done is closed: nil after a
// graceful disconnect, else the cause (a *TermError for a Terminate sent or received, an
// *LLPError wrapping the I/O error for a lost connection, ErrFirstFPDUTimeout, …). The
// QP's async event carries the same error.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail moves the QP to Error because of an LLP or local error.
func (c *Conn) fail(ev rnic.EventType, err error) {
	if c.quitting() {
		return
	}
	c.setErr(err)
	c.qp.Fatal(ev, err)
}

// Network names the transport: "iwarp" (rnic.QP.Transport reports it).
func (c *Conn) Network() string { return "iwarp" }
