// Package broker is the softrnic daemon's device as a host's soft RNIC (issue 11): the
// RoCEv2 address every attached process shares, like the processes using one rxe device.
// The data path stays in each process (package host runs the engine there, with its
// registered memory); the broker owns what must be one per device:
//
//   - the UDP port (rnic/rocev2/steer): each process gets a socket of the device's
//     SO_REUSEPORT group, and a BPF program steers each packet to the process owning its
//     destination QP, with no copy (a relay through the daemon where BPF is not allowed);
//   - the QP numbers: every QP of every process, and of the daemon itself, is numbered by
//     the broker (Alloc), so the number names one process;
//   - QP1, the IB CM: MADs are routed among the processes by service ID and comm ID
//     (route.go), so each process runs its own CM over its GSI link;
//   - the attach socket (internal/attach): a process's connection is its lifetime; when
//     it ends the broker frees the process's QP numbers, steering slot, services and
//     comm IDs, and sends a DREQ to the peer of each of its connections answered with a
//     REP (established or about to be), again every CM response timeout until the
//     peer's DREP, as a CM does (dreq.go).
//
// The daemon's own endpoint (memory target, tool servers) runs on Broker.Link as one
// more client, slot steer.DaemonSlot.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
	"github.com/softrnic/softrnic/roce"
)

// Config configures a Broker. The zero value except Name, Addr and Socket is ready.
type Config struct {
	Name   string         // device name
	Addr   netip.AddrPort // the RoCEv2 address: roce.UDPPort for kernel peers (port 0: a free one, tests)
	Socket string         // the attach socket's path (attach.Path of the control socket)
	// Group, when set, owns the attach socket (mode 0660): its members may attach
	// without being root. Empty: mode 0600, the daemon's user only.
	Group string
	Mode  steer.Mode // steering (default steer.ModeAuto: BPF, else the relay)
	// MaxProcs bounds the attached processes (default 63); more are refused.
	MaxProcs int
	// MaxQPsPerProc bounds one process's QP numbers (default 16384).
	MaxQPsPerProc int
	// QueryTimeout bounds how long ListQPs waits for a process (default 2 s).
	QueryTimeout time.Duration
	MTU          int // the netdev's MTU told to processes (0: unknown)
	// Link, when set, is the device's RoCEv2 link on an AF_XDP port (the daemon's
	// -xdp): the broker relays each process's packets from it (steer.Config.Link)
	// and owns it from New on.
	Link   rocev2.Link
	Logger *slog.Logger // nil: slog.Default()
}

// Counters are the broker's counters (each bound and refusal has one).
type Counters struct {
	Attached, Detached     atomic.Uint64 // processes
	AttachRefused          atomic.Uint64 // MaxProcs reached, bad hello
	QPNAllocated, QPNFreed atomic.Uint64
	QPNRefused             atomic.Uint64 // MaxQPsPerProc reached or steering map full
	MADsIn, MADsOut        atomic.Uint64 // routed to a process / sent for a process
	MADDropped             atomic.Uint64 // a process's GSI queue was full or gone
	MADRefused             atomic.Uint64 // a process's MAD named what it does not own
	CommFull               atomic.Uint64 // the comm ID table was full
	DREQsSent              atomic.Uint64 // for connections of processes that ended
	DREQRetries            atomic.Uint64 // those DREQs sent again, no DREP having come (dreq.go)
	DREQsUnanswered        atomic.Uint64 // those given up after every retry
	ClaimRefused           atomic.Uint64 // a service another process listens on
}

// Broker is a device shared by processes. Its methods are safe for concurrent use.
type Broker struct {
	cfg Config
	log *slog.Logger
	s   *steer.Steerer
	raw rocev2.Link // the steerer's daemon link
	ln  *net.UnixListener
	cnt Counters

	mu       sync.Mutex
	closed   bool
	procs    map[steer.Slot]*proc
	qpns     map[uint32]steer.Slot // every QP number given out (the daemon's too)
	services map[uint64]steer.Slot
	comm     map[uint32]*commEntry
	reqs     map[uint32]reqInfo
	sidr     map[uint32]sidrEntry
	psn      roce.PSN          // of the DREQs the broker sends itself
	dying    map[uint32]*dying // DREQs sent for ended processes' connections, until their DREP (dreq.go)
	dreqT    *time.Timer       // resends them (made at the first)

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// proc is one attached process.
type proc struct {
	slot  steer.Slot
	pid   int
	comm  string
	since time.Time
	conn  *attach.Conn
	gsi   *os.File        // the daemon's end of the GSI socketpair
	gsiRC syscall.RawConn // for non-blocking sends
	nqp   int             // QP numbers held
	nsvc  int             // services claimed
	ncomm int             // comm IDs in the routing table
}

// New opens the device's RoCEv2 address and the attach socket. Serve accepts processes.
func New(cfg Config) (*Broker, error) {
	if cfg.MaxQPsPerProc <= 0 {
		cfg.MaxQPsPerProc = 16384
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s, err := newSteerer(cfg)
	if err != nil {
		if cfg.Link != nil {
			cfg.Link.Close()
		}
		return nil, fmt.Errorf("device %s: RoCEv2 address %v: %w", cfg.Name, cfg.Addr, err)
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, s: s, raw: s.Link(), procs: make(map[steer.Slot]*proc),
		qpns: make(map[uint32]steer.Slot), services: make(map[uint64]steer.Slot), comm: make(map[uint32]*commEntry),
		reqs: make(map[uint32]reqInfo), sidr: make(map[uint32]sidrEntry), dying: make(map[uint32]*dying), psn: roce.PSN(rand.Uint32() & roce.PSNMask),
		done: make(chan struct{})}
	if err := b.listen(); err != nil {
		s.Close()
		return nil, err
	}
	if s.Mode() == steer.ModeRelay && s.FallbackErr() != nil {
		b.log.Warn("device: BPF steering not permitted; relaying packets through the daemon", "device", cfg.Name, "err", s.FallbackErr())
	}
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

// newSteerer claims the device's address. Port 0 (tests) takes a free port below
// 0xC000, as rocev2.ListenUDP picks one: a source port in 0xC000-0xFFFF is flow entropy
// to RoCEv2 peers (IBTA A17.3), who would answer it on 4791.
func newSteerer(cfg Config) (*steer.Steerer, error) {
	sc := steer.Config{Addr: cfg.Addr, Mode: cfg.Mode, MaxProcs: cfg.MaxProcs, Link: cfg.Link}
	if cfg.Addr.Port() != 0 || cfg.Link != nil {
		return steer.New(sc)
	}
	var err error
	for range 8 {
		var l *rocev2.UDPLink
		if l, err = rocev2.ListenUDP(cfg.Addr, nil); err != nil {
			return nil, err
		}
		sc.Addr = l.LocalAddr()
		l.Close()
		var s *steer.Steerer
		if s, err = steer.New(sc); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return s, err
		}
	}
	return nil, err
}

// listen creates the attach socket with its permissions.
func (b *Broker) listen() error {
	path := b.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("attach socket %s: %w", path, err)
	}
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return fmt.Errorf("attach socket %s: a daemon is serving it: %w", path, syscall.EADDRINUSE)
	}
	_ = os.Remove(path) // a stale socket of a daemon that died
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("attach socket %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if b.cfg.Group != "" {
		g, err := user.LookupGroup(b.cfg.Group)
		if err != nil {
			ln.Close()
			return fmt.Errorf("attach socket group %q: %w", b.cfg.Group, err)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return fmt.Errorf("attach socket %s: %w", path, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return fmt.Errorf("attach socket %s: %w", path, err)
	}
	b.ln = ln
	return nil
}

// Addr is the device's RoCEv2 address.
func (b *Broker) Addr() netip.AddrPort { return b.s.LocalAddr() }

// Mode is the steering in use.
func (b *Broker) Mode() steer.Mode { return b.s.Mode() }

// Steering returns the steering counters.
func (b *Broker) Steering() (steer.Stats, error) { return b.s.Stats() }

// Counters returns the broker's counters.
func (b *Broker) Counters() *Counters { return &b.cnt }

// Link is the daemon's own RoCEv2 link (slot DaemonSlot): QP1 MADs that belong to a
// process are routed away before they reach the daemon's endpoint, and the daemon's
// own MADs are learned as they leave.
func (b *Broker) Link() rocev2.Link { return &daemonLink{b: b} }

// QPNumbers numbers the daemon's own device's QPs (rnic.Config.QPNumbers).
func (b *Broker) QPNumbers() rnic.QPNAllocator { return daemonQPNs{b} }

type daemonQPNs struct{ b *Broker }

func (d daemonQPNs) AllocQPN() (uint32, error) { return d.b.alloc(steer.DaemonSlot) }
func (d daemonQPNs) FreeQPN(n uint32)          { d.b.free(steer.DaemonSlot, n) }

// alloc gives slot a QP number no one holds, steered to it.
func (b *Broker) alloc(slot steer.Slot) (uint32, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, net.ErrClosed
	}
	if p := b.procs[slot]; p != nil {
		if p.nqp >= b.cfg.MaxQPsPerProc {
			b.cnt.QPNRefused.Add(1)
			return 0, fmt.Errorf("device %s: %d QPs per process: %w", b.cfg.Name, b.cfg.MaxQPsPerProc, syscall.ENOSPC)
		}
	} else if slot != steer.DaemonSlot {
		return 0, syscall.ENOENT
	}
	var n uint32
	for {
		n = rnic.FirstQPN + rand.Uint32N(rnic.MaxQPN-rnic.FirstQPN+1)
		if _, taken := b.qpns[n]; !taken {
			break
		}
	}
	if slot != steer.DaemonSlot {
		if err := b.s.Map(slot, n, 1); err != nil {
			b.cnt.QPNRefused.Add(1)
			return 0, err
		}
		b.procs[slot].nqp++
	}
	b.qpns[n] = slot
	b.cnt.QPNAllocated.Add(1)
	return n, nil
}

// free takes back a QP number of slot's.
func (b *Broker) free(slot steer.Slot, n uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freeLocked(slot, n)
}

func (b *Broker) freeLocked(slot steer.Slot, n uint32) {
	if s, ok := b.qpns[n]; !ok || s != slot {
		return
	}
	delete(b.qpns, n)
	if slot != steer.DaemonSlot {
		_ = b.s.Unmap(n, 1)
		if p := b.procs[slot]; p != nil {
			p.nqp--
		}
	}
	b.cnt.QPNFreed.Add(1)
}

// Per-process bounds of the routing tables (each refusal counted).
const (
	MaxServicesPerProc = 1024  // listeners (claimed service IDs): ClaimRefused, ENOSPC
	MaxCommPerProc     = 65536 // connections being set up or alive: CommFull
)

// claim routes requests for a service ID to slot (a listener of the process's, or of the
// daemon's own endpoint).
func (b *Broker) claim(slot steer.Slot, id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.services[id]
	if ok && s != slot {
		b.cnt.ClaimRefused.Add(1)
		return syscall.EADDRINUSE
	}
	if ok {
		return nil
	}
	p := b.procs[slot]
	if p != nil && p.nsvc >= MaxServicesPerProc {
		b.cnt.ClaimRefused.Add(1)
		return fmt.Errorf("%d listeners per process: %w", MaxServicesPerProc, syscall.ENOSPC)
	}
	b.services[id] = slot
	if p != nil {
		p.nsvc++
	}
	return nil
}

func (b *Broker) release(slot steer.Slot, id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.services[id]; ok && s == slot {
		delete(b.services, id)
		if p := b.procs[slot]; p != nil {
			p.nsvc--
		}
	}
}

// Close ends every attachment (the processes' devices fail), closes the attach socket
// and the RoCEv2 address.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	if b.dreqT != nil {
		b.dreqT.Stop()
	}
	ps := make([]*proc, 0, len(b.procs))
	for _, p := range b.procs {
		ps = append(ps, p)
	}
	b.mu.Unlock()
	b.ln.Close()
	for _, p := range ps {
		p.conn.Close()
		p.gsi.Close()
	}
	b.wg.Wait()
	_ = os.Remove(b.cfg.Socket)
	return b.s.Close()
}

func (b *Broker) acceptLoop() {
	defer b.wg.Done()
	var backoff time.Duration
	for {
		c, err := b.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE/ENFILE and the like: back off and go on (the listener stays)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			b.log.Warn("device: attach accept failing; retrying", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		b.wg.Add(1)
		go b.serve(c)
	}
}

// serve runs one process's attachment to its end.
func (b *Broker) serve(c *net.UnixConn) {
	defer b.wg.Done()
	defer c.Close()
	p, err := b.attach(c)
	if err != nil {
		b.cnt.AttachRefused.Add(1)
		b.log.Warn("device: attach refused", "err", err)
		_ = attach.Write(c, attach.ErrorMsg(attach.Msg{Op: attach.OpHello}, err))
		return
	}
	b.cnt.Attached.Add(1)
	b.log.Info("device: process attached", "pid", p.pid, "comm", p.comm, "slot", p.slot)
	b.wg.Add(1)
	go b.gsiLoop(p)
	err = p.conn.Serve()
	b.detach(p)
	b.cnt.Detached.Add(1)
	b.log.Info("device: process detached", "pid", p.pid, "comm", p.comm, "err", err)
}

// attach reads the hello and sends the welcome with the process's descriptors.
func (b *Broker) attach(c *net.UnixConn) (*proc, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	m, err := attach.Decode(buf[:n])
	if err != nil || m.Op != attach.OpHello || m.Hello == nil {
		return nil, fmt.Errorf("hello: %w", syscall.EPROTO)
	}
	if m.Hello.Version != attach.Version {
		return nil, fmt.Errorf("protocol version %d, the daemon speaks %d: %w", m.Hello.Version, attach.Version, syscall.EPROTO)
	}
	pid := m.Hello.PID
	if cred, err := peerCred(c); err == nil {
		pid = int(cred.Pid) // the kernel's word, not the process's
	}
	slot, files, err := b.s.Add()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		closeAll(files)
		_ = b.s.Remove(slot)
		return nil, fmt.Errorf("GSI socketpair: %w", err)
	}
	_ = unix.SetNonblock(fds[0], true) // before NewFile, which then uses the poller
	mine, theirs := os.NewFile(uintptr(fds[0]), "gsi"), os.NewFile(uintptr(fds[1]), "gsi-process")
	rc, err := mine.SyscallConn()
	if err != nil {
		closeAll(append(files, mine, theirs))
		_ = b.s.Remove(slot)
		return nil, err
	}
	p := &proc{slot: slot, pid: pid, comm: commName(m.Hello.Comm), since: time.Now(), gsi: mine, gsiRC: rc}
	w := attach.Msg{Op: attach.OpWelcome, Welcome: &attach.Welcome{Device: b.cfg.Name, Addr: b.Addr().String(),
		Mode: b.s.Mode().String(), Steer: len(files), MTU: b.cfg.MTU}}
	wb, _ := attach.Encode(w)
	err = steer.SendFiles(c, wb, append(files, theirs)...)
	closeAll(append(files, theirs))
	if err != nil {
		mine.Close()
		_ = b.s.Remove(slot)
		return nil, fmt.Errorf("welcome: %w", err)
	}
	p.conn = attach.NewConn(c, func(m attach.Msg) attach.Msg { return b.handle(p, m) })
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		mine.Close()
		_ = b.s.Remove(slot)
		return nil, net.ErrClosed
	}
	b.procs[slot] = p
	b.mu.Unlock()
	return p, nil
}

// commName keeps a process-supplied name printable (uapi.Sanitize) and short.
func commName(s string) string {
	s = uapi.Sanitize(s)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// handle answers a process's request.
func (b *Broker) handle(p *proc, m attach.Msg) attach.Msg {
	switch m.Op {
	case attach.OpAllocQPN:
		n, err := b.alloc(p.slot)
		if err != nil {
			return attach.ErrorMsg(m, err)
		}
		return attach.Msg{Op: attach.OpOK, QPN: n}
	case attach.OpFreeQPN:
		b.free(p.slot, m.QPN)
		return attach.Msg{Op: attach.OpOK}
	case attach.OpClaim:
		if err := b.claim(p.slot, m.Service); err != nil {
			return attach.ErrorMsg(m, err)
		}
		return attach.Msg{Op: attach.OpOK}
	case attach.OpRelease:
		b.release(p.slot, m.Service)
		return attach.Msg{Op: attach.OpOK}
	}
	return attach.ErrorMsg(m, fmt.Errorf("unknown op %q: %w", m.Op, syscall.EPROTO))
}

// gsiLoop sends the MADs the process writes to its GSI socket, after learnOut.
func (b *Broker) gsiLoop(p *proc) {
	defer b.wg.Done()
	buf := make([]byte, attach.AddrLen+rocev2.MaxPacket)
	for {
		var n int
		var rerr error
		err := p.gsiRC.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil || rerr != nil || n == 0 {
			return // the process went (its attachment ends through conn)
		}
		if n < attach.AddrLen {
			b.cnt.MADRefused.Add(1)
			continue
		}
		dst := attach.GetAddr(buf)
		pkt := buf[attach.AddrLen:n]
		m, ok := parseMAD(pkt)
		b.mu.Lock()
		ok = ok && b.learnOut(p.slot, m, dst, time.Now())
		b.mu.Unlock()
		if !ok {
			b.cnt.MADRefused.Add(1)
			continue
		}
		b.log.Debug("device: MAD out", "slot", p.slot, "attr", m.attr, "dst", dst)
		if err := b.raw.Send([][]byte{pkt}, dst); err != nil {
			b.log.Debug("device: sending a MAD failed", "pid", p.pid, "dst", dst, "err", err)
			continue
		}
		b.cnt.MADsOut.Add(1)
	}
}

// forward hands an incoming MAD to process p (non-blocking; dropped when its queue is full).
func (b *Broker) forward(p *proc, pkt []byte, from netip.AddrPort) {
	var hdr [attach.AddrLen]byte
	attach.PutAddr(hdr[:], from)
	var serr error
	err := p.gsiRC.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), [][]byte{hdr[:], pkt}, nil, nil, unix.MSG_DONTWAIT)
		return true
	})
	if err != nil || serr != nil {
		b.cnt.MADDropped.Add(1)
		return
	}
	b.cnt.MADsIn.Add(1)
}

// detach releases everything of a process that ended.
func (b *Broker) detach(p *proc) {
	now := time.Now()
	b.mu.Lock()
	delete(b.procs, p.slot)
	for n, s := range b.qpns {
		if s == p.slot {
			b.freeLocked(p.slot, n)
		}
	}
	for id, s := range b.services {
		if s == p.slot {
			delete(b.services, id)
		}
	}
	dreqs, dsts := b.dropComm(p.slot, b.Addr(), now)
	for id, s := range b.sidr {
		if s.slot == p.slot {
			delete(b.sidr, id)
		}
	}
	b.purge(now)
	b.mu.Unlock()
	_ = b.s.Remove(p.slot)
	p.gsi.Close()
	for i, d := range dreqs {
		if err := b.raw.Send([][]byte{d}, dsts[i]); err == nil {
			b.cnt.DREQsSent.Add(1)
		}
	}
	if len(dreqs) > 0 {
		b.mu.Lock()
		b.armDREQs(now)
		b.mu.Unlock()
	}
}

// Process is an attached process as ListQPs and Processes report it.
type Process struct {
	PID   int       `json:"pid"`
	Comm  string    `json:"comm"`
	Slot  int       `json:"slot"`
	Since time.Time `json:"since"`
	QPs   int       `json:"qps"`
}

// Processes lists the attached processes.
func (b *Broker) Processes() []Process {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Process, 0, len(b.procs))
	for _, p := range b.procs {
		out = append(out, Process{PID: p.pid, Comm: p.comm, Slot: int(p.slot), Since: p.since, QPs: p.nqp})
	}
	slices.SortFunc(out, func(x, y Process) int { return x.Slot - y.Slot })
	return out
}

// ProcessQP is one QP of an attached process.
type ProcessQP struct {
	attach.QP
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Peer string `json:"peer"` // the peer's RoCEv2 address and QPN, as the CM named them
}

// askAll sends m to every attached process at once (each within QueryTimeout: one that
// does not answer costs QueryTimeout, not N of them, and is left out) and returns the
// answers with the processes that gave them.
func (b *Broker) askAll(ctx context.Context, m attach.Msg) ([]*proc, []attach.Msg) {
	b.mu.Lock()
	ps := make([]*proc, 0, len(b.procs))
	for _, p := range b.procs {
		ps = append(ps, p)
	}
	b.mu.Unlock()
	answers := make([]attach.Msg, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, b.cfg.QueryTimeout)
			r, err := p.conn.Call(qctx, m)
			cancel()
			if err != nil {
				b.log.Debug("device: "+m.Op, "pid", p.pid, "err", err)
				return
			}
			answers[i] = r
		}()
	}
	wg.Wait()
	return ps, answers
}

// ListQPs asks every attached process for its QPs (askAll) and names their peers from
// the CM's tables.
func (b *Broker) ListQPs(ctx context.Context) []ProcessQP {
	ps, answers := b.askAll(ctx, attach.Msg{Op: attach.OpListQPs})
	var out []ProcessQP
	for i, r := range answers {
		for _, q := range r.QPs {
			out = append(out, ProcessQP{QP: q, PID: ps[i].pid, Comm: ps[i].comm})
		}
	}
	b.mu.Lock()
	peers := make(map[uint32]string)
	for _, e := range b.comm {
		if e.ended.IsZero() && e.remoteQPN != 0 {
			peers[e.localQPN] = fmt.Sprintf("%v qpn %d", e.peer, e.remoteQPN)
		}
	}
	b.mu.Unlock()
	for i := range out {
		out[i].Peer = peers[out[i].QPN]
	}
	slices.SortFunc(out, func(x, y ProcessQP) int { return int(x.QPN) - int(y.QPN) })
	return out
}

// ListRes asks every attached process for its resources of one kind ("cq", "mr" or
// "pd"; askAll), each named with the process's pid and name.
func (b *Broker) ListRes(ctx context.Context, kind string) []uapi.Res {
	ps, answers := b.askAll(ctx, attach.Msg{Op: attach.OpListRes, Kind: kind})
	var out []uapi.Res
	for i, r := range answers {
		for _, e := range r.Res {
			if e.Kind != kind {
				continue
			}
			e.PID, e.Comm = ps[i].pid, ps[i].comm
			out = append(out, e)
		}
	}
	return out
}

// daemonLink is the daemon's endpoint's link: the steerer's daemon link with the MADs
// of processes routed away (Recv) and the daemon's own learned (Send).
type daemonLink struct{ b *Broker }

func (l *daemonLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	b := l.b
	for {
		n, err := b.raw.Recv(bufs, sizes, from)
		if err != nil {
			return n, err
		}
		k := 0
		for i := range n {
			pkt := bufs[i][:sizes[i]]
			if isQP1(pkt) {
				if m, ok := parseMAD(pkt); ok {
					b.mu.Lock()
					slot := b.routeIn(m, from[i], time.Now())
					p := b.procs[slot]
					b.mu.Unlock()
					if p != nil {
						b.log.Debug("device: MAD in", "slot", slot, "attr", m.attr, "from", from[i])
						b.forward(p, pkt, from[i])
						continue
					}
				}
			}
			if k != i {
				bufs[k], bufs[i] = bufs[i], bufs[k]
				sizes[k], from[k] = sizes[i], from[i]
			}
			k++
		}
		if k > 0 {
			return k, nil
		}
	}
}

func (l *daemonLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	b := l.b
	for _, pkt := range bufs {
		if isQP1(pkt) {
			if m, ok := parseMAD(pkt); ok {
				b.mu.Lock()
				b.learnOut(steer.DaemonSlot, m, dst, time.Now())
				b.mu.Unlock()
			}
		}
	}
	return b.raw.Send(bufs, dst)
}

func (l *daemonLink) LocalAddr() netip.AddrPort { return l.b.raw.LocalAddr() }
func (l *daemonLink) BatchSize() int            { return l.b.raw.BatchSize() }

// Close closes the steerer's daemon link (the daemon's endpoint is closing): processes
// keep their steered sockets until Broker.Close.
func (l *daemonLink) Close() error { return l.b.raw.Close() }
