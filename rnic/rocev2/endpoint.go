package rocev2

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// Endpoint is a RoCEv2 port: one Link shared by the QPs of a device. Its
// receive goroutine demultiplexes packets by destination QP number and runs
// the responder and completer of the target QP inline.
type Endpoint struct {
	dev     *rnic.Device
	link    Link
	gsiLink Link       // the CM's MADs travel here: GSILink.GSI, or link
	gather  gatherLink // link, when it sends packets in parts (requests' payload uncopied)
	// writeOnly: RC RDMA WRITEs leave as one WRITE Only per packet (Config.WholeWrites:
	// the link sends with UDP GSO and the configuration does not forbid it).
	writeOnly bool
	cfg       Config
	params    qpParams // cfg in wire terms
	log       *slog.Logger

	mu       sync.RWMutex
	conns    map[uint32]*Conn
	connsGen atomic.Uint64 // bumped under mu when conns changes (rxCtx.conn)
	ud       map[uint32]*UDQP
	gsi      func(p *roce.Packet, from netip.AddrPort)
	cma      *cmAgent

	// Transmit batches of idle connections, for the next one that sends (Conn.batch):
	// up to txFreeMax, kept across GCs and shared by every P, unlike a sync.Pool,
	// which let a connection whose goroutine moved to the other P allocate a new
	// 270 KB batch (and GC empties it).
	txMu   sync.Mutex
	txFree []*txBatch
	txSize int // packets per batch: the link's BatchSize

	// idle payload CRC jobs (txcrc.go), up to pcrcFreeMax
	crcMu      sync.Mutex
	crcFree    []*pcrc
	crcHelpNow bool // tests: a WQE's payload CRCs are computed as it is taken

	closed  atomic.Bool
	drv     *rxDrive      // rnic.Config.WaitDrivesReceive (rxdrive.go); nil without it
	quit    chan struct{} // closed by Close: ends the receive back-off
	wg      sync.WaitGroup
	linkErr atomic.Pointer[error] // the receive error that stopped the endpoint

	// A DREQ on a GSI link waits for the data path's next batch (drainData).
	batchWaiters atomic.Int32
	batchCh      chan struct{}
	sendBad      atomic.Bool // link sends are failing (logged once per episode)

	// Counters. RxDropped counts packets that reach no QP (unknown or
	// reserved QPN, bad header, wrong service or P_Key); ICRCErrors packets
	// dropped for their ICRC (silently, as rxe does: no NAK); ICRCIDSolved
	// IPv4 packets accepted because their ICRC verifies with a non-zero IP ID
	// (see Config.StrictICRC).
	RxDropped, ICRCErrors, ICRCIDSolved atomic.Uint64
	// RxWrongSource counts RC/UC packets dropped because they came from an
	// address other than their QP's peer (IBTA §9.6 header validation, as
	// rxe_recv.c check_addr: a connected QP takes packets from its path only).
	RxWrongSource atomic.Uint64
	// RecvErrors and SendErrors count errors of the link's Recv and Send.
	RecvErrors, SendErrors atomic.Uint64
	// CMDropped counts CM MADs dropped because their comm IDs or source
	// address match no connection (IBTA Vol.1 ch. 12: a MAD names both comm IDs; Linux cm_acquire_id).
	CMDropped atomic.Uint64
	// CMRejectedLimit counts REQs refused with REJ "no resources" by a limit
	// (listener backlog or connections, Config.MaxPendingRequests,
	// Config.MaxPassiveConns); CMStale REQs or REPs refused with REJ
	// "stale connection" because the peer's QPN is still connected here.
	CMRejectedLimit, CMStale atomic.Uint64
	// AcceptTimeouts counts requests the application did not answer within
	// CMConfig.AcceptTimeout (rejected); FirstMessageTimeouts accepted
	// connections that carried no packet within CMConfig.FirstMessageTimeout
	// (disconnected).
	AcceptTimeouts, FirstMessageTimeouts atomic.Uint64
	// DupReadsDropped counts "duplicate" RDMA READ requests that match no READ
	// received in their PSN range (dropped, not executed).
	DupReadsDropped atomic.Uint64
	// WakeFallbacks counts connections whose goroutine waits for work on a channel
	// rather than on an eventfd in the runtime's poller (package pollwake): the endpoint's
	// connections held maxConnWakes of them, or the eventfd could not be opened.
	WakeFallbacks atomic.Uint64
	// InlineSends counts batches of packets a posting goroutine sent itself while the
	// connection's goroutine was parked (SendQueued), instead of waking it.
	InlineSends atomic.Uint64
	// InlineResponses counts batches of READ responses (and the ACKs queued behind them)
	// the receive goroutine sent itself at the end of a receive batch while the
	// connection's goroutine was parked (Conn.sendResponses), instead of waking it.
	InlineResponses atomic.Uint64
	// AcksDeferred counts ACKs that a receive batch run by a Wait (rnic.Config.
	// WaitDrivesReceive) did not send at its end: each left later with the connection's
	// next packets, the next batch's ACK, before the receive next waited for the socket,
	// or at the end of the connection (rxDrive.deferAck). AckDeferTimeouts counts those
	// that were still unsent after their bound (an eighth of the ACK timeout) and were
	// then sent by a timer (Conn.ackTick).
	AcksDeferred, AckDeferTimeouts atomic.Uint64
	// WindowCuts counts the halvings of RC connections' windows after a loss (window.go).
	WindowCuts atomic.Uint64

	wakes atomic.Int32 // wakers open (Conn.startWake), at most maxConnWakes
}

// maxConnWakes bounds the connections of an endpoint that wait on an eventfd (package pollwake):
// each holds a descriptor while it lives. The others wait on their channel, which costs
// a wake-up more per burst of sends (WakeFallbacks counts them).
const maxConnWakes = 1024

// ErrEndpointClosed is returned after Close.
var ErrEndpointClosed = errors.New("rocev2: endpoint closed")

// NewEndpoint starts a RoCEv2 endpoint for dev on link with cfg (nil: the
// defaults, as the zero Config).
func NewEndpoint(dev *rnic.Device, link Link, cfg *Config) *Endpoint {
	e := &Endpoint{dev: dev, link: link, gsiLink: link, cfg: cfg.norm(), conns: make(map[uint32]*Conn), ud: make(map[uint32]*UDQP),
		quit: make(chan struct{}), batchCh: make(chan struct{}, 1)}
	if g, ok := link.(GSILink); ok {
		e.gsiLink = g.GSI()
	}
	e.gather, _ = link.(gatherLink)
	if g, ok := link.(interface{ GSO() bool }); ok && g.GSO() && !e.cfg.WholeWrites {
		e.writeOnly = true
	}
	e.params = e.cfg.params()
	e.log = e.cfg.Logger
	e.txSize = link.BatchSize()
	if each, ok := link.(eachLink); ok && dev != nil {
		if hold := dev.Config().WaitDrivesReceive; hold > 0 {
			e.drv = newRxDrive(e, hold, each)
		}
	}
	e.cm()
	e.wg.Add(1)
	go e.recvLoop(link, e.input)
	if e.gsiLink != link {
		e.wg.Add(1)
		go e.recvLoop(e.gsiLink, e.inputGSI)
	}
	return e
}

// Device returns the engine device.
func (e *Endpoint) Device() *rnic.Device { return e.dev }

// Link returns the endpoint's link.
func (e *Endpoint) Link() Link { return e.link }

// Config returns the endpoint configuration with defaults applied (passing it to
// NewEndpoint again gives the same configuration).
func (e *Endpoint) Config() Config { return e.cfg }

// LocalAddr returns the link's local address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.link.LocalAddr() }

// Close aborts every connection, closes the link and waits for the goroutines.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.quit)
	e.mu.RLock()
	cs := make([]*Conn, 0, len(e.conns))
	for _, c := range e.conns {
		cs = append(cs, c)
	}
	e.mu.RUnlock()
	for _, c := range cs {
		c.Disconnect(false)
		<-c.done
	}
	e.mu.RLock()
	us := make([]*UDQP, 0, len(e.ud))
	for _, u := range e.ud {
		us = append(us, u)
	}
	e.mu.RUnlock()
	for _, u := range us {
		u.Disconnect(false)
		<-u.done
	}
	e.mu.RLock()
	a := e.cma
	e.mu.RUnlock()
	if a != nil {
		a.close()
	}
	err := e.link.Close()
	if e.gsiLink != e.link {
		err = errors.Join(err, e.gsiLink.Close())
	}
	e.wg.Wait()
	return err
}

func (e *Endpoint) lookup(qpn uint32) *Conn {
	e.mu.RLock()
	c := e.conns[qpn]
	e.mu.RUnlock()
	return c
}

// txFreeMax bounds the transmit batches an endpoint keeps for its connections (each
// BatchSize×MaxPacket bytes, 270 KB with the UDP link's 64).
const txFreeMax = 4

// getBatch returns a free transmit batch, or a new one.
func (e *Endpoint) getBatch() *txBatch {
	e.txMu.Lock()
	if n := len(e.txFree); n > 0 {
		b := e.txFree[n-1]
		e.txFree[n-1] = nil
		e.txFree = e.txFree[:n-1]
		e.txMu.Unlock()
		return b
	}
	e.txMu.Unlock()
	bs := e.txSize
	b := &txBatch{b: make([][]byte, bs), body: make([][]byte, bs), tail: make([][]byte, bs)}
	for i := range b.b {
		b.b[i] = make([]byte, 0, MaxPacket)
	}
	return b
}

// putBatch keeps b for getBatch, unless txFreeMax are kept.
func (e *Endpoint) putBatch(b *txBatch) {
	clear(b.body) // hold no registered memory
	e.txMu.Lock()
	if len(e.txFree) < txFreeMax {
		e.txFree = append(e.txFree, b)
	}
	e.txMu.Unlock()
}

// icrcStart returns the ICRC state over the pseudo headers of a packet of
// ibLen bytes (BTH through pad) from src to dst, as rxe computes it with the
// IPv4 ID 0 and DF set (what Linux puts on an unconnected DF socket).
func icrcStart(src, dst netip.AddrPort, ibLen int) uint32 {
	if src.Addr().Is4() && dst.Addr().Is4() {
		return roce.ICRCStartV4(src.Addr().As4(), dst.Addr().As4(), 0, true, src.Port(), dst.Port(), ibLen)
	}
	return roce.ICRCStartV6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), ibLen)
}

// finish appends pad and ICRC to b (BTH..payload) whose payload is n bytes.
func finish(b []byte, n int, src, dst netip.AddrPort) []byte {
	b = roce.AppendPad(b, n)
	crc := roce.ICRCAddTransport(icrcStart(src, dst, len(b)), b)
	return roce.AppendICRC(b, crc)
}

type ctlPkt struct {
	buf [128]byte
	n   int
	dst netip.AddrPort
}

// rxCtx is the receive goroutine's state: the control packets (ACKs, NAKs,
// atomic ACKs) produced while handling a batch, sent after it.
type rxCtx struct {
	ctl     []ctlPkt
	nctl    int
	touched []*Conn
	sends   []*Conn // touched connections whose queued responses endBatch sends (Conn.rdSend)
	bufs    [][]byte
	recvs   []doneRecv // receive completions held until the batch's ACKs are sent
	// icrcStart's state for the last packet parse checked: its source and length (the
	// destination is the loop's local address). A stream from one peer computes it once
	// per packet length.
	icrcFrom netip.AddrPort
	icrcLen  int
	icrcVal  uint32
	// The connection the last RC/UC packet went to, while the endpoint's connections
	// are as they were (Endpoint.connsGen): a stream to one QP takes no lock to find it.
	lastQPN  uint32
	lastConn *Conn
	lastGen  uint64
	// the endpoint's drive when this is its link's receive (rnic.Config.WaitDrivesReceive),
	// else nil
	drv *rxDrive
}

// conn is e.lookup(qpn), remembered for the next packet.
func (r *rxCtx) conn(e *Endpoint, qpn uint32) *Conn {
	g := e.connsGen.Load() // before the lookup: a change after it makes the next call look again
	if r.lastConn != nil && r.lastQPN == qpn && r.lastGen == g {
		return r.lastConn
	}
	c := e.lookup(qpn)
	r.lastQPN, r.lastConn, r.lastGen = qpn, c, g
	return c
}

// icrcStart is icrcStart(from, local, ibLen) for the receive loop's local address.
func (r *rxCtx) icrcStart(from, local netip.AddrPort, ibLen int) uint32 {
	if ibLen != r.icrcLen || from != r.icrcFrom {
		r.icrcFrom, r.icrcLen, r.icrcVal = from, ibLen, icrcStart(from, local, ibLen)
	}
	return r.icrcVal
}

// doneRecv is a receive completion of an RC/UC connection held for the end of the
// receive batch (see Conn.completeRecv).
type doneRecv struct {
	c   *Conn
	w   *rnic.RecvWQE
	res rnic.RecvResult
}

// deliver completes the batch's held receives, in the order they were completed.
func (r *rxCtx) deliver() {
	for i := range r.recvs {
		d := &r.recvs[i]
		d.c.qp.CompleteRecv(d.w, d.res)
		if d.c.held.Add(-1) == 0 && d.c.disc.Load() != 0 {
			d.c.wake() // its run goroutine may be waiting to flush the queues
		}
		*d = doneRecv{}
	}
	r.recvs = r.recvs[:0]
}

func (r *rxCtx) alloc(dst netip.AddrPort) *ctlPkt {
	if r.nctl == len(r.ctl) {
		return nil
	}
	p := &r.ctl[r.nctl]
	r.nctl++
	p.dst = dst
	p.n = 0
	return p
}

func (e *Endpoint) input(r *rxCtx, b []byte, from, local netip.AddrPort) {
	p, ipID, ok := e.parse(r, b, from, local)
	if !ok {
		return
	}
	if p.BTH.PKey() != 0xFFFF && p.BTH.PKey()&0x7FFF != e.cfg.PKey&0x7FFF {
		e.RxDropped.Add(1)
		return
	}
	op := p.Opcode()
	qpn := p.BTH.DestQP()
	if op.Service() == roce.ServiceUD {
		e.inputUD(p, from, qpn, ipID)
		return
	}
	if qpn < rnic.FirstQPN {
		// QP0/QP1 are the SMI and GSI; RC/UC traffic to them reaches no engine QP.
		e.RxDropped.Add(1)
		return
	}
	c := r.conn(e, qpn)
	if c == nil {
		e.RxDropped.Add(1)
		return
	}
	if !e.fromPeer(from, c.remote) {
		e.RxWrongSource.Add(1)
		return
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if !c.inBatch {
		c.inBatch = true
		r.touched = append(r.touched, c)
	}
	c.input(r, &p, from)
	c.mu.Unlock()
}

// parse parses a received packet and checks its ICRC and P_Key, counting what it
// drops; ipID is the sender's IPv4 ID where the ICRC had to be solved for it.
func (e *Endpoint) parse(r *rxCtx, b []byte, from, local netip.AddrPort) (p roce.Packet, ipID uint16, ok bool) {
	p, err := roce.ParsePacket(b)
	if err != nil {
		e.RxDropped.Add(1)
		return p, 0, false
	}
	ibLen := len(b) - roce.ICRCLen
	crc := roce.ICRCAddTransport(r.icrcStart(from, local, ibLen), p.Covered())
	if got := p.ICRCValue(); crc != got {
		if e.cfg.StrictICRC || !from.Addr().Is4() || isMem(e.link) {
			e.ICRCErrors.Add(1)
			return p, 0, false
		}
		id, ok := roce.SolveICRCIPv4ID(crc, got, ibLen)
		if !ok {
			e.ICRCErrors.Add(1)
			return p, 0, false
		}
		e.ICRCIDSolved.Add(1)
		ipID = id
	}
	if p.BTH.PKey() != 0xFFFF && p.BTH.PKey()&0x7FFF != e.cfg.PKey&0x7FFF {
		e.RxDropped.Add(1)
		return p, 0, false
	}
	return p, ipID, true
}

// inputGSI takes a packet from the GSI link of a GSILink: UD packets to QP1 only.
func (e *Endpoint) inputGSI(r *rxCtx, b []byte, from, local netip.AddrPort) {
	p, ipID, ok := e.parse(r, b, from, local)
	if !ok {
		return
	}
	if p.Opcode().Service() != roce.ServiceUD || p.BTH.DestQP() != 1 {
		e.RxDropped.Add(1)
		return
	}
	e.inputUD(p, from, 1, ipID)
}

// drainTimeout bounds how long a DREQ on a GSI link waits for the data path (drainData);
// it is waited only while packets are pending, so only a flooded or starved data path
// (a loaded machine) comes near it. 100 ms was too short for a machine running several
// race-detector test binaries at once (tests/hostdev: a last ACK flushed, 1 run in 10).
const drainTimeout = time.Second

// drainData lets the data path read what is pending before a peer's DREQ ends a
// connection, when the DREQ came on a separate GSI link and the data link can tell
// (PendingLink): until nothing is pending, or drainTimeout. The peer sent those packets
// (its last ACKs among them) before its DREQ.
func (e *Endpoint) drainData() {
	pl, ok := e.link.(PendingLink)
	if !ok || e.gsiLink == e.link || !pl.Pending() {
		return
	}
	e.batchWaiters.Add(1)
	defer e.batchWaiters.Add(-1)
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for pl.Pending() {
		select {
		case <-e.batchCh:
		case <-t.C:
			return
		case <-e.quit:
			return
		}
	}
	// the batch holding the last pending packet may still be in progress
	select {
	case <-e.batchCh:
	case <-t.C:
	case <-e.quit:
	}
}

// claimPort picks the listening port of a listener in port space ps: port, or a free
// one when port is 0 (free says which are free here), claimed with the GSI link's
// ClaimService when the endpoint's link is a GSILink. A port in use fails with an
// error wrapping syscall.EADDRINUSE.
func (e *Endpoint) claimPort(ps uint16, port uint16, free func(uint16) bool) (uint16, error) {
	g, _ := e.link.(GSILink)
	claim := func(p uint16) error {
		if !free(p) {
			return syscall.EADDRINUSE
		}
		if g != nil {
			return g.ClaimService(roce.ServiceID(ps, p))
		}
		return nil
	}
	if port != 0 {
		return port, claim(port)
	}
	var err error
	p := uint16(1024 + rand.IntN(60000))
	for range 64 { // a free port, also free in the daemon's table
		if err = claim(p); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return p, err
		}
		if p++; p < 1024 {
			p = 1024
		}
	}
	return 0, err
}

// releasePort gives back what claimPort claimed.
func (e *Endpoint) releasePort(ps uint16, port uint16) {
	if g, ok := e.link.(GSILink); ok {
		g.ReleaseService(roce.ServiceID(ps, port))
	}
}

// guid returns the endpoint's CA GUID: a modified EUI-64 style value
// derived from its address (softrnic has no MAC).
func (e *Endpoint) guid() uint64 {
	a := e.link.LocalAddr().Addr().As16()
	var g uint64 = 0x0200_5e00_0000_0000
	for _, b := range a[8:] {
		g = g<<8 ^ uint64(b) ^ g>>56
	}
	return g | 0x0200_0000_0000_0000
}

func isMem(l Link) bool { _, ok := l.(*MemLink); return ok }
