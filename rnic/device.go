package rnic

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a [Device]. Zero fields take the defaults shown.
type Config struct {
	Name      string // device name, e.g. "softrnic0"
	LocalAddr string // local IP address transports bind/listen on ("" = Interface's, or loopback/any)
	Interface string // network interface whose first address is used when LocalAddr is empty
	MaxQP     int    // 65536
	MaxCQE    int    // entries per CQ, 1<<20
	MaxMR     int    // STag table size (MRs + MWs), 1<<20
	MaxQPWR   int    // work requests per queue, 32768
	MaxSGE    int    // SGEs per work request, 16
	MaxInline int    // inline bytes per send WR, 256
	MaxORD    int    // outbound Read/atomic depth per QP, 128
	MaxIRD    int    // inbound Read/atomic depth per QP, 128
	// StartQPN is the first QP number allocated, numbering sequentially from it (for
	// reproducible numbers in tests and captures). 0, the default, starts at a random
	// number and advances by a random stride of 1..QPNStride, so a new process or device
	// does not reuse the numbers a recent one used: a peer's IB CM keeps (GID, QPN) of a
	// connection that ended uncleanly as stale for minutes and rejects a new connection
	// from the same QPN with STALE_CONN (IBTA Vol.1 §12.9.8.3), as hardware RNICs avoid
	// by numbering from varying positions.
	StartQPN uint32
	// MaxEvents bounds the asynchronous events queued for the reader of Events, 1024;
	// past it the oldest are dropped and counted (Device.EventsDropped), so a device
	// nobody listens to holds a bounded number of events (and of the QPs they name).
	MaxEvents int
	// QPNumbers, when set, numbers the device's QPs instead of the device: CreateQP
	// takes each number from it (an error fails CreateQP, wrapped) and Destroy gives
	// it back. A device attached to the softrnic daemon (package host) gets its
	// numbers from the daemon, which steers packets to this process by destination
	// QPN. StartQPN is ignored then.
	QPNumbers QPNAllocator
	// WaitDrivesReceive, when positive, lets the goroutine blocked in CQ.Wait run the
	// receive of the CQ's connection itself, so a message that completes a Wait costs no
	// hand-off from the connection's goroutine to the waiter (see ReceiveDriver). It applies
	// to a CQ that one QP uses (as its send CQ, receive CQ or both) whose transport can
	// (ReceiveDriver.CanDriveReceive: iWARP over a kernel TCP socket; a RoCEv2 RC connection
	// that is the only user of its endpoint's Linux UDP link, whose receive then serves the
	// whole endpoint), and to one Wait at a time. The receive stays with the waiting
	// goroutine between its Waits; when no Wait has started for between one and two times
	// this duration the connection's (RoCEv2: the endpoint's) goroutine takes it back. Until
	// then what arrives (a peer's Read Requests and Writes among it; over RoCEv2 also
	// connection management for the endpoint) is processed only when a Wait runs; over
	// RoCEv2 the ACK of a message a Wait received leaves with the next packets the QP sends
	// (a request/response program's answer), or when a receive next waits for the socket, or
	// at the end of the connection, or after an eighth of its ACK timeout, rather than at
	// once (rocev2.Endpoint.AcksDeferred): a process that exits right after such a Wait
	// without destroying the QP or closing the endpoint can leave the sender without its ACK
	// (the SEND that completed here then fails there with retries exceeded). QP.DriveReceive
	// runs the receive the same way for a program that polls memory for RDMA Writes. 0, the
	// default, leaves every receive to the connection's goroutine. Counters.WaitsDriven
	// counts the runs, so a program can tell that the mode applies to its CQ. Over iWARP a
	// goroutine locked to its thread (runtime.LockOSThread; a call from C) must not Wait on
	// such a CQ: the runtime's coroutine switch its hand-over uses refuses it (RoCEv2's uses
	// none).
	WaitDrivesReceive time.Duration
	// ReceiveSpin, when positive, makes a receive that finds its socket empty read it
	// again and again (non-blocking reads: busy-polling) for up to this long before it
	// blocks in the runtime's poller, whoever runs the receive: the connection's
	// goroutine, or a Wait driving it (WaitDrivesReceive). A message that arrives
	// meanwhile costs no thread wake-up, as with perftest busy-polling a hardware CQ;
	// where a wake-up is slow (a virtual machine's vCPUs) that is most of a round trip.
	// Each spinning receive keeps a CPU busy: it pays where each has a CPU of its own
	// (a latency test between two processes on a 2-CPU host), not where spinners
	// outnumber CPUs (both ends in one process on 2 CPUs: the goroutines that would
	// answer wait for the spinners). The end of a connection, and a Wait asking for the
	// receive, take effect within the spin. It applies to iWARP over a kernel TCP
	// socket. 0, the default, never spins.
	ReceiveSpin time.Duration
}

// LocalIP is the address the device's transports use: LocalAddr, else the first address
// of Interface (IPv4 preferred), else "" (the interface is missing or has none).
func (c Config) LocalIP() string {
	if c.LocalAddr != "" || c.Interface == "" {
		return c.LocalAddr
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return ""
	}
	addrs, _ := ifi.Addrs()
	first := ""
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
			if first == "" {
				first = ipn.IP.String()
			}
		}
	}
	return first
}

// QPNAllocator hands out QP numbers (FirstQPN..MaxQPN) for a device; see
// Config.QPNumbers. Both methods may be called from any goroutine.
type QPNAllocator interface {
	AllocQPN() (uint32, error)
	FreeQPN(qpn uint32)
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Name == "" {
		c.Name = "softrnic0"
	}
	def(&c.MaxQP, 65536)
	def(&c.MaxCQE, 1<<20)
	def(&c.MaxMR, 1<<20)
	def(&c.MaxQPWR, 32768)
	def(&c.MaxSGE, 16)
	def(&c.MaxInline, 256)
	def(&c.MaxORD, 128)
	def(&c.MaxIRD, 128)
	def(&c.MaxEvents, 1024)
	if c.StartQPN != 0 && (c.StartQPN < FirstQPN || c.StartQPN > MaxQPN) {
		c.StartQPN = FirstQPN
	}
	if c.MaxMR > 1<<24 {
		c.MaxMR = 1 << 24
	}
}

// Counters are per-QP or per-device traffic counters, updated atomically.
type Counters struct {
	TxBytes, RxBytes       atomic.Uint64 // payload bytes
	TxSegments, RxSegments atomic.Uint64 // wire segments (FPDUs / packets)
	CRCErrors              atomic.Uint64
	TermSent, TermRecv     atomic.Uint64 // iWARP Terminate messages
	Retransmits, NAKs      atomic.Uint64 // packet transports
	// Config.ReceiveSpin: reads that found data while spinning on an empty socket, and
	// spins that ran out (the read then blocked).
	SpinHits, SpinTimeouts atomic.Uint64
	// Config.WaitDrivesReceive: runs of the QP's receive by a goroutine in CQ.Wait or
	// QP.DriveReceive (each run ends when what it waited for arrived, or it was kicked).
	// Waits that found the receive held elsewhere, or could not drive it, are not counted.
	WaitsDriven atomic.Uint64
}

// Stats is a snapshot of [Counters].
type Stats struct {
	TxBytes, RxBytes       uint64
	TxSegments, RxSegments uint64
	CRCErrors              uint64
	TermSent, TermRecv     uint64
	Retransmits, NAKs      uint64
	SpinHits, SpinTimeouts uint64
	WaitsDriven            uint64
}

// Snapshot reads the counters.
func (c *Counters) Snapshot() Stats {
	return Stats{c.TxBytes.Load(), c.RxBytes.Load(), c.TxSegments.Load(), c.RxSegments.Load(),
		c.CRCErrors.Load(), c.TermSent.Load(), c.TermRecv.Load(), c.Retransmits.Load(), c.NAKs.Load(),
		c.SpinHits.Load(), c.SpinTimeouts.Load(), c.WaitsDriven.Load()}
}

// Device is one software RNIC: the owner of all resources.
type Device struct {
	cfg      Config
	counters Counters

	memMu   sync.RWMutex
	mem     []*memObj // STag table by index; mem[0] reserved
	memFree []uint32  // free indices
	memKey  uint8     // next default key

	qpMu   sync.Mutex
	qps    map[uint32]*QP
	nextQP uint32
	qpRand *rand.Rand // random QPN strides; nil numbers sequentially (Config.StartQPN)

	pds resTable[PD] // numbers and finds the live PDs and CQs (res.go)
	cqs resTable[CQ]

	closed atomic.Bool

	atomicMu sync.Mutex // serializes inbound atomics of every transport (TransportQP.Atomic)

	evMu     sync.Mutex
	evQ      []AsyncEvent
	evDrop   atomic.Uint64 // events dropped: queue full
	evSignal chan struct{}
	events   chan AsyncEvent
	evDone   chan struct{}
}

// Open creates a device in this process. To open a device by name — the one a softrnic
// daemon serves, which several processes share, or else an in-process one — call
// host.Open("softrnic0", …) (package github.com/softrnic/softrnic/host): it needs the
// RoCEv2 transport, which imports this package.
func Open(cfg Config) (*Device, error) {
	cfg.setDefaults()
	d := &Device{
		cfg:      cfg,
		mem:      make([]*memObj, 1, 1024),
		qps:      make(map[uint32]*QP),
		nextQP:   cfg.StartQPN,
		evSignal: make(chan struct{}, 1),
		events:   make(chan AsyncEvent),
		evDone:   make(chan struct{}),
		memKey:   1,
	}
	if cfg.StartQPN == 0 {
		d.qpRand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		d.nextQP = FirstQPN + d.qpRand.Uint32N(MaxQPN-FirstQPN+1)
	}
	go d.eventLoop()
	return d, nil
}

// Config returns the device configuration with defaults applied.
func (d *Device) Config() Config { return d.cfg }

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// Counters returns the device-wide counters (the sum over its QPs).
func (d *Device) Counters() *Counters { return &d.counters }

// Events returns the channel of asynchronous events, delivered in order. At most
// Config.MaxEvents wait for the reader (the oldest are dropped past that and counted in
// EventsDropped); the channel is closed by [Device.Close]. Reading it is optional.
func (d *Device) Events() <-chan AsyncEvent { return d.events }

// EventsDropped returns how many asynchronous events were dropped because the reader of
// Events fell Config.MaxEvents behind.
func (d *Device) EventsDropped() uint64 { return d.evDrop.Load() }

// Close moves every QP to Error (flushing their work) and stops the event goroutine.
// Transports must be closed by their owners (listeners) separately.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.qpMu.Lock()
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.qpMu.Unlock()
	for _, q := range qps {
		q.Destroy()
	}
	close(d.evDone)
	return nil
}

// QPs returns the live QPs, for statistics.
func (d *Device) QPs() []*QP {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	out := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		out = append(out, q)
	}
	return out
}

// QPByNum finds a QP by number.
func (d *Device) QPByNum(n uint32) *QP {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	return d.qps[n]
}

func (d *Device) postEvent(e AsyncEvent) {
	if d.closed.Load() {
		return
	}
	d.evMu.Lock()
	if len(d.evQ) >= d.cfg.MaxEvents {
		d.evQ[0] = AsyncEvent{}
		d.evQ = d.evQ[1:]
		d.evDrop.Add(1)
	}
	d.evQ = append(d.evQ, e)
	d.evMu.Unlock()
	select {
	case d.evSignal <- struct{}{}:
	default:
	}
}

func (d *Device) eventLoop() {
	defer close(d.events)
	for {
		d.evMu.Lock()
		var e AsyncEvent
		have := len(d.evQ) > 0
		if have {
			e = d.evQ[0]
			d.evQ[0] = AsyncEvent{}
			d.evQ = d.evQ[1:]
		}
		d.evMu.Unlock()
		if !have {
			select {
			case <-d.evSignal:
				continue
			case <-d.evDone:
				return
			}
		}
		select {
		case d.events <- e:
		case <-d.evDone:
			return
		}
	}
}
