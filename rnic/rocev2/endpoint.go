package rocev2

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// Config are the transport defaults of an Endpoint (the verbs QP attributes of
// ibv_modify_qp that a ConnAttr does not override).
type Config struct {
	MTU         roce.MTU      // path MTU (default MTU1024, what a 1500-byte Ethernet gives)
	Timeout     uint8         // local ACK timeout exponent: 4.096 µs × 2^Timeout (default 14 ≈ 67 ms; 0 = infinite)
	RetryCnt    uint8         // transport retries (default 7)
	RNRRetry    uint8         // RNR retries (default 7 = infinite)
	MinRNRTimer roce.RNRTimer // RNR NAK timer sent by this responder (default 12 = 0.64 ms)
	MaxRdAtomic int           // outstanding Reads/atomics as requester (ORD, default 16)
	MaxDestRd   int           // inbound Reads/atomics as responder (IRD, default 16)
	Window      int           // unacknowledged request packets in flight (default 128, rxe's RXE_MAX_UNACKED_PSNS)
	AckEvery    int           // set AckReq at least every this many packets (default 64)
	PKey        uint16        // default 0xFFFF
	// PeerPort is the UDP port of peers' RoCE links (4791 for kernel peers,
	// which send from per-flow source ports but listen on 4791). 0 means:
	// reply to the source port of a request, and dial the endpoint's own port.
	PeerPort uint16
	// StrictICRC requires IPv4 ICRCs to verify exactly with IP ID 0 (what
	// softrnic sends without GSO). By default a UDP-socket receiver, which
	// cannot see the sender's IP ID, verifies an IPv4 ICRC exactly when it
	// matches with ID 0 and otherwise solves for the ID
	// (roce.SolveICRCIPv4ID): the packet is accepted, and counted in
	// ICRCIDSolved, iff some ID makes it consistent, a 16-bit check (a random
	// corruption passes with probability 2^-16; every single-bit error is
	// caught). Rxe sends non-zero IDs, so keep this off for kernel peers.
	// IPv6 ICRCs and in-memory links are always verified exactly.
	StrictICRC bool
}

func (c *Config) norm() Config {
	n := Config{Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12}
	if c != nil {
		n = *c
	}
	if !n.MTU.Valid() {
		n.MTU = roce.MTU1024
	}
	if n.MaxRdAtomic <= 0 {
		n.MaxRdAtomic = 16
	}
	if n.MaxDestRd <= 0 {
		n.MaxDestRd = 16
	}
	if n.Window <= 0 {
		n.Window = 128
	}
	if n.AckEvery <= 0 {
		n.AckEvery = 64
	}
	if n.PKey == 0 {
		n.PKey = 0xFFFF
	}
	return n
}

// DefaultConfig returns the defaults (rc_pingpong's QP attributes: timeout 14,
// retry_cnt 7, rnr_retry 7, min_rnr_timer 12).
func DefaultConfig() *Config { c := (*Config)(nil).norm(); return &c }

// Endpoint is a RoCEv2 port: one Link shared by the QPs of a device. Its
// receive goroutine demultiplexes packets by destination QP number and runs
// the responder and completer of the target QP inline.
type Endpoint struct {
	dev  *rnic.Device
	link Link
	cfg  Config

	mu    sync.RWMutex
	conns map[uint32]*Conn
	ud    map[uint32]*UDQP
	gsi   func(p *roce.Packet, from netip.AddrPort)
	cma   *cmAgent

	closed atomic.Bool
	wg     sync.WaitGroup

	// Counters. ICRCErrors counts packets dropped for their ICRC (silently,
	// as rxe does: no NAK); ICRCIDSolved counts IPv4 packets accepted because
	// their ICRC verifies with a non-zero IP ID (see Config.StrictICRC).
	RxDropped, ICRCErrors, ICRCIDSolved atomic.Uint64
}

// ErrEndpointClosed is returned after Close.
var ErrEndpointClosed = errors.New("rocev2: endpoint closed")

// NewEndpoint starts a RoCEv2 endpoint for dev on link.
func NewEndpoint(dev *rnic.Device, link Link, cfg *Config) *Endpoint {
	e := &Endpoint{dev: dev, link: link, cfg: cfg.norm(), conns: make(map[uint32]*Conn), ud: make(map[uint32]*UDQP)}
	if e.cfg.PeerPort == 0 && link.LocalAddr().Port() == roce.UDPPort {
		e.cfg.PeerPort = roce.UDPPort // a standard deployment: peers listen on 4791
	}
	e.cm(nil)
	e.wg.Add(1)
	go e.recvLoop()
	return e
}

// Device returns the engine device.
func (e *Endpoint) Device() *rnic.Device { return e.dev }

// Link returns the endpoint's link.
func (e *Endpoint) Link() Link { return e.link }

// Config returns the endpoint configuration with defaults applied.
func (e *Endpoint) Config() Config { return e.cfg }

// LocalAddr returns the link's local address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.link.LocalAddr() }

// Close aborts every connection, closes the link and waits for the goroutines.
func (e *Endpoint) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
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
		a.mu.Lock()
		pend := make([]*cmConn, 0, len(a.byLocal))
		for _, c := range a.byLocal {
			pend = append(pend, c)
		}
		a.mu.Unlock()
		for _, c := range pend {
			c.mu.Lock()
			if c.timer != nil {
				c.timer.Stop()
			}
			c.state = cmClosed
			c.mu.Unlock()
		}
	}
	err := e.link.Close()
	e.wg.Wait()
	return err
}

func (e *Endpoint) lookup(qpn uint32) *Conn {
	e.mu.RLock()
	c := e.conns[qpn]
	e.mu.RUnlock()
	return c
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
	bufs    [][]byte
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

func (e *Endpoint) flushCtl(r *rxCtx) {
	i := 0
	for i < r.nctl {
		j := i
		r.bufs = r.bufs[:0]
		for j < r.nctl && r.ctl[j].dst == r.ctl[i].dst {
			r.bufs = append(r.bufs, r.ctl[j].buf[:r.ctl[j].n])
			j++
		}
		_ = e.link.Send(r.bufs, r.ctl[i].dst)
		i = j
	}
	r.nctl = 0
}

func (e *Endpoint) recvLoop() {
	defer e.wg.Done()
	bs := e.link.BatchSize()
	bufs := make([][]byte, bs)
	for i := range bufs {
		bufs[i] = make([]byte, MaxPacket)
	}
	sizes := make([]int, bs)
	from := make([]netip.AddrPort, bs)
	r := &rxCtx{ctl: make([]ctlPkt, 2*bs+8), bufs: make([][]byte, 0, 2*bs+8), touched: make([]*Conn, 0, bs)}
	local := e.link.LocalAddr()
	for {
		n, err := e.link.Recv(bufs, sizes, from)
		if err != nil {
			if errors.Is(err, ErrLinkClosed) || e.closed.Load() {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		for i := range n {
			e.input(r, bufs[i][:sizes[i]], from[i], local)
		}
		for _, c := range r.touched {
			c.mu.Lock()
			c.flushAck(r)
			c.inBatch = false
			c.mu.Unlock()
		}
		r.touched = r.touched[:0]
		e.flushCtl(r)
	}
}

func (e *Endpoint) input(r *rxCtx, b []byte, from, local netip.AddrPort) {
	p, err := roce.ParsePacket(b)
	if err != nil {
		e.RxDropped.Add(1)
		return
	}
	ibLen := len(b) - roce.ICRCLen
	crc := roce.ICRCAddTransport(icrcStart(from, local, ibLen), p.Covered())
	var ipID uint16
	if got := p.ICRCValue(); crc != got {
		if e.cfg.StrictICRC || !from.Addr().Is4() || isMem(e.link) {
			e.ICRCErrors.Add(1)
			return
		}
		id, ok := roce.SolveICRCIPv4ID(crc, got, ibLen)
		if !ok {
			e.ICRCErrors.Add(1)
			return
		}
		e.ICRCIDSolved.Add(1)
		ipID = id
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
	c := e.lookup(qpn)
	if c == nil {
		e.RxDropped.Add(1)
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
