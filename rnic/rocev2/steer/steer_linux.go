//go:build linux

package steer

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// Mode is how a Steerer delivers packets to processes.
type Mode int

const (
	// ModeAuto (the zero value) uses ModeBPF and falls back to ModeRelay
	// when the BPF maps or program cannot be created or attached.
	ModeAuto Mode = iota
	// ModeBPF steers in the kernel with an SK_REUSEPORT program (no copy).
	ModeBPF
	// ModeRelay has the daemon's socket receive everything and forward each
	// process's packets over a unix SOCK_SEQPACKET socket.
	ModeRelay
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeBPF:
		return "bpf"
	case ModeRelay:
		return "relay"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Slot names one socket of the group: DaemonSlot is the daemon's own, each
// attached process has one of 1..Config.MaxProcs.
type Slot uint32

// DaemonSlot is the daemon's socket: QP1, unmapped QPNs and fallbacks.
const DaemonSlot Slot = 0

// Config configures a Steerer. The zero value except Addr is ready to use.
type Config struct {
	// Addr is the RoCEv2 address: a specific IP (the ICRC covers it) and
	// the UDP port, roce.UDPPort (4791) for kernel peers; port 0 picks a
	// free one (tests).
	Addr netip.AddrPort
	// Mode selects steering (default ModeAuto).
	Mode Mode
	// MaxProcs bounds the attached processes (default 63: the sockarray has
	// MaxProcs+1 slots).
	MaxProcs int
	// MaxQPNs bounds the mapped QPNs (default 65536). Map beyond it fails
	// with ErrFull and counts Stats.MapFull.
	MaxQPNs int
	// UDP configures the daemon's own link; GRO is not used in ModeBPF
	// (see the package doc).
	UDP *rocev2.UDPOptions
	// RelayBuffer bounds the bytes queued to one process in ModeRelay (the
	// socket send buffer of the daemon's end, default 4 MiB; without
	// CAP_NET_ADMIN the kernel caps it at net.core.wmem_max).
	RelayBuffer int
	// Link, when set, is where the address's packets arrive instead of a UDP
	// socket the Steerer binds: an AF_XDP link (rnic/rocev2/xdp) whose XDP
	// program takes the address's UDP port from the kernel. The Steerer then
	// relays (ModeRelay; Mode must be ModeAuto or ModeRelay), receiving and
	// sending the daemon's packets on Link and closing it in Close.
	// Processes still send from a kernel UDP socket on the address's IP (an
	// XDP program sees only received packets).
	Link rocev2.Link
}

// Stats are the steering counters, summed over CPUs.
type Stats struct {
	Steered      uint64 // delivered to the process that owns the QPN (relay: forwarded)
	Default      uint64 // unmapped QPN (QP1 included): to the daemon
	Short        uint64 // too short for a BTH DestQP: to the daemon
	Fallback     uint64 // mapped QPN whose process socket is gone: to the daemon
	Dropped      uint64 // no daemon socket to fall back to (ModeBPF)
	RelayDropped uint64 // ModeRelay: the process's queue was full or it was gone
	MapFull      uint64 // Map calls refused at Config.MaxQPNs
}

// Errors returned by Steerer methods.
var (
	ErrClosed      = errors.New("steer: closed")
	ErrFull        = errors.New("steer: table full")
	ErrNoSlot      = errors.New("steer: no such process slot")
	ErrReservedQPN = errors.New("steer: QPN 0, 1 or beyond 24 bits cannot be mapped")
	ErrQPNInUse    = errors.New("steer: QPN already mapped")
)

// Steerer is the daemon's side: the reuseport group (or the relay) on one
// address, its processes' slots and the QPN map. Its methods are safe for
// concurrent use.
type Steerer struct {
	cfg      Config
	addr     netip.AddrPort
	mode     Mode
	fallback error
	link     rocev2.Link
	udp      *rocev2.UDPLink // the daemon's socket (nil with Config.Link)
	src      rocev2.Link     // what the daemon receives on: udp or Config.Link

	// ModeBPF
	qpnMap, sockMap, cntMap *ebpf.Map
	prog                    *ebpf.Program

	mu     sync.RWMutex
	closed bool
	qpns   map[uint32]Slot
	slots  []*member // by slot; nil: free; slots[0] is never used

	// counters kept in Go (ModeRelay, and MapFull)
	steered, dflt, short, fallbackN, relayDropped, mapFull atomic.Uint64
}

// member is one attached process.
type member struct {
	slot  Slot
	relay *relayOut // ModeRelay: the daemon's end of the process's socketpair
}

// New creates the daemon's socket on cfg.Addr and, in ModeBPF, the maps and
// the program attached to the group.
func New(cfg Config) (*Steerer, error) {
	a := cfg.Addr.Addr()
	if !a.IsValid() || a.IsUnspecified() {
		return nil, rocev2.ErrUnspecifiedAddr
	}
	if a.Zone() != "" {
		return nil, fmt.Errorf("steer: %v: scoped (link-local) IPv6 addresses are not supported", a)
	}
	cfg.Addr = netip.AddrPortFrom(a.Unmap(), cfg.Addr.Port())
	if cfg.MaxProcs <= 0 {
		cfg.MaxProcs = 63
	}
	if cfg.MaxQPNs <= 0 {
		cfg.MaxQPNs = 65536
	}
	if cfg.RelayBuffer <= 0 {
		cfg.RelayBuffer = 4 << 20
	}
	s := &Steerer{cfg: cfg, qpns: make(map[uint32]Slot), slots: make([]*member, cfg.MaxProcs+1)}
	if cfg.Link != nil {
		if cfg.Mode != ModeAuto && cfg.Mode != ModeRelay {
			return nil, fmt.Errorf("steer: a Config.Link is relayed from: mode %v", cfg.Mode)
		}
		s.src = cfg.Link
		s.addr = cfg.Link.LocalAddr()
		s.link = newRelayIn(s)
		s.mode = ModeRelay
		return s, nil
	}
	switch cfg.Mode {
	case ModeAuto, ModeBPF:
		err := s.loadBPF()
		if err == nil {
			if err = s.startBPF(); err != nil {
				s.closeBPF()
				return nil, err
			}
			return s, nil
		}
		s.closeBPF()
		if cfg.Mode == ModeBPF {
			return nil, err
		}
		s.fallback = err
	case ModeRelay:
	default:
		return nil, fmt.Errorf("steer: unknown mode %v", cfg.Mode)
	}
	if err := s.startRelay(); err != nil {
		return nil, err
	}
	return s, nil
}

// loadBPF creates the maps and loads the program: what needs privilege.
func (s *Steerer) loadBPF() error {
	var err error
	s.qpnMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_qpns", Type: ebpf.Hash,
		KeySize: 4, ValueSize: 4, MaxEntries: uint32(s.cfg.MaxQPNs)})
	if err != nil {
		return fmt.Errorf("steer: QPN map: %w", err)
	}
	s.sockMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_socks", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: uint32(s.cfg.MaxProcs + 1)})
	if err != nil {
		return fmt.Errorf("steer: sockarray: %w", err)
	}
	s.cntMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "softrnic_steerc", Type: ebpf.PerCPUArray,
		KeySize: 4, ValueSize: 8, MaxEntries: numCounters})
	if err != nil {
		return fmt.Errorf("steer: counters: %w", err)
	}
	s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "softrnic_steer", Type: ebpf.SkReuseport, License: "Dual BSD/GPL",
		Instructions: steerProgram(s.qpnMap, s.sockMap, s.cntMap),
	})
	if err != nil {
		return fmt.Errorf("steer: load SK_REUSEPORT program: %w", err)
	}
	return nil
}

// startBPF binds the daemon's socket, the group's first, into slot 0 and
// attaches the program to the group.
func (s *Steerer) startBPF() error {
	// A socket with SO_REUSEPORT would silently join a group another
	// process of the same uid (another daemon) has on the address, and
	// attaching the program would replace that group's. So the address is
	// first claimed without SO_REUSEPORT, which fails with EADDRINUSE if
	// anyone holds it, and released just before the group's first bind.
	probe, err := bindUDP(s.cfg.Addr, false)
	if err != nil {
		return err
	}
	addr := s.cfg.Addr
	if sa, err := unix.Getsockname(int(probe.Fd())); err == nil {
		addr = netip.AddrPortFrom(addr.Addr(), uint16(sockaddrPort(sa)))
	}
	probe.Close()
	f, err := bindUDP(addr, true)
	if err != nil {
		return err
	}
	defer f.Close()
	if err = s.sockMap.Update(uint32(DaemonSlot), uint64(f.Fd()), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("steer: sockarray slot 0: %w", err)
	}
	if err = unix.SetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, s.prog.FD()); err != nil {
		return fmt.Errorf("steer: SO_ATTACH_REUSEPORT_EBPF: %w", err)
	}
	var opt rocev2.UDPOptions
	if s.cfg.UDP != nil {
		opt = *s.cfg.UDP
	}
	opt.GRO = false
	s.udp, err = rocev2.NewUDPLinkFile(f, &opt)
	if err != nil {
		return err
	}
	s.addr = s.udp.LocalAddr()
	s.link, s.src = s.udp, s.udp
	s.mode = ModeBPF
	return nil
}

func (s *Steerer) closeBPF() {
	if s.udp != nil {
		s.udp.Close()
		s.udp = nil
	}
	s.closeBPFObjects()
}

func (s *Steerer) closeBPFObjects() {
	if s.prog != nil {
		s.prog.Close()
	}
	for _, m := range []*ebpf.Map{s.qpnMap, s.sockMap, s.cntMap} {
		if m != nil {
			m.Close()
		}
	}
	s.prog, s.qpnMap, s.sockMap, s.cntMap = nil, nil, nil, nil
}

func (s *Steerer) startRelay() error {
	f, err := bindUDP(s.cfg.Addr, false)
	if err != nil {
		return err
	}
	defer f.Close()
	s.udp, err = rocev2.NewUDPLinkFile(f, s.cfg.UDP)
	if err != nil {
		return err
	}
	s.addr = s.udp.LocalAddr()
	s.src = s.udp
	s.link = newRelayIn(s)
	s.mode = ModeRelay
	return nil
}

// bindUDP creates a UDP socket bound to addr, with SO_REUSEPORT if reuse.
func bindUDP(addr netip.AddrPort, reuse bool) (*os.File, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr
	if addr.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("steer: socket: %w", err)
	}
	if family == unix.AF_INET6 {
		if err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("steer: IPV6_V6ONLY: %w", err)
		}
	}
	if reuse {
		if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("steer: SO_REUSEPORT: %w", err)
		}
	}
	if err = unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("steer: bind %v: %w", addr, err)
	}
	return os.NewFile(uintptr(fd), "udp:"+addr.String()), nil
}

func sockaddrPort(sa unix.Sockaddr) int {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return a.Port
	case *unix.SockaddrInet6:
		return a.Port
	}
	return 0
}

// Mode reports ModeBPF or ModeRelay.
func (s *Steerer) Mode() Mode { return s.mode }

// FallbackErr reports why ModeAuto runs in ModeRelay (nil in ModeBPF).
func (s *Steerer) FallbackErr() error { return s.fallback }

// LocalAddr is the group's address (with the port picked for port 0).
func (s *Steerer) LocalAddr() netip.AddrPort { return s.addr }

// Link is the daemon's own link, slot 0: it receives QP1 and every packet
// no process owns, and sends from the group's address. In ModeRelay its
// Recv also forwards the processes' packets (see the package doc), so the
// daemon must keep receiving on it. Closing the link closes the daemon's
// socket; Close releases the rest.
func (s *Steerer) Link() rocev2.Link { return s.link }

// Add makes a slot for a new process and returns the descriptors the
// process needs (ModeBPF: its UDP socket in the group; ModeRelay: its end
// of the relay socketpair, then a UDP socket on the group's IP for
// sending). The caller sends them to the process with SendFiles and closes
// its copies; the process gives them to Join. Add fails with ErrFull when
// all Config.MaxProcs slots are taken.
func (s *Steerer) Add() (Slot, []*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, ErrClosed
	}
	slot := Slot(0)
	for i := 1; i < len(s.slots); i++ {
		if s.slots[i] == nil {
			slot = Slot(i)
			break
		}
	}
	if slot == 0 {
		return 0, nil, fmt.Errorf("%w: %d processes", ErrFull, s.cfg.MaxProcs)
	}
	m := &member{slot: slot}
	var files []*os.File
	if s.mode == ModeBPF {
		f, err := bindUDP(s.addr, true)
		if err != nil {
			return 0, nil, err
		}
		if err = s.sockMap.Update(uint32(slot), uint64(f.Fd()), ebpf.UpdateAny); err != nil {
			f.Close()
			return 0, nil, fmt.Errorf("steer: sockarray slot %d: %w", slot, err)
		}
		files = []*os.File{f}
	} else {
		out, pf, err := newRelayOut(s.cfg.RelayBuffer, s.src.BatchSize())
		if err != nil {
			return 0, nil, err
		}
		uf, err := bindUDP(netip.AddrPortFrom(s.addr.Addr(), 0), false)
		if err != nil {
			out.close()
			pf.Close()
			return 0, nil, err
		}
		m.relay = out
		files = []*os.File{pf, uf}
	}
	s.slots[slot] = m
	return slot, files, nil
}

// Remove releases a process's slot: its QPNs are unmapped (their packets go
// to the daemon) and its socket leaves the sockarray (ModeBPF) or its relay
// socket is closed (ModeRelay). The daemon calls it when the process
// detaches or its attach connection ends.
func (s *Steerer) Remove(slot Slot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.member(slot)
	if err != nil {
		return err
	}
	var keys []uint32
	for q, sl := range s.qpns {
		if sl == slot {
			keys = append(keys, q)
		}
	}
	err = s.deleteQPNs(keys)
	if s.sockMap != nil {
		if e := s.sockMap.Delete(uint32(slot)); e != nil && !errors.Is(e, ebpf.ErrKeyNotExist) && err == nil {
			err = fmt.Errorf("steer: sockarray slot %d: %w", slot, e)
		}
	}
	if m.relay != nil {
		m.relay.close()
	}
	s.slots[slot] = nil
	return err
}

func (s *Steerer) member(slot Slot) (*member, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if slot == DaemonSlot || int(slot) >= len(s.slots) || s.slots[slot] == nil {
		return nil, fmt.Errorf("%w: %d", ErrNoSlot, slot)
	}
	return s.slots[slot], nil
}

// Map steers QPNs first..first+n-1 to slot. QPN 0 and 1 are reserved (QP1
// is the daemon's CM), a QPN already mapped is refused with ErrQPNInUse
// (the daemon allocates QPNs; a double mapping would be a bug that hands
// one process another's packets), and the table is bounded by
// Config.MaxQPNs. Map is all or nothing.
func (s *Steerer) Map(slot Slot, first uint32, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.member(slot); err != nil {
		return err
	}
	if n <= 0 || first < 2 || uint64(first)+uint64(n)-1 > roce.QPNMask {
		return fmt.Errorf("%w: %d QPNs from %#x", ErrReservedQPN, n, first)
	}
	if len(s.qpns)+n > s.cfg.MaxQPNs {
		s.mapFull.Add(1)
		return fmt.Errorf("%w: %d of %d QPNs mapped, %d more asked", ErrFull, len(s.qpns), s.cfg.MaxQPNs, n)
	}
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = first + uint32(i)
		if old, ok := s.qpns[keys[i]]; ok {
			return fmt.Errorf("%w: QPN %#x by slot %d", ErrQPNInUse, keys[i], old)
		}
	}
	if s.qpnMap != nil {
		vals := make([]uint32, n)
		for i := range vals {
			vals[i] = uint32(slot)
		}
		if err := s.putQPNs(keys, vals); err != nil {
			return err
		}
	}
	for _, q := range keys {
		s.qpns[q] = slot
	}
	return nil
}

// putQPNs adds keys→vals to the BPF QPN map, all or nothing.
func (s *Steerer) putQPNs(keys, vals []uint32) error {
	// Batch updates take no BPF_NOEXIST (only BPF_F_LOCK); Map checked that
	// the keys are new.
	done, err := s.qpnMap.BatchUpdate(keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		done, err = 0, nil
		for i := range keys {
			if err = s.qpnMap.Update(keys[i], vals[i], ebpf.UpdateNoExist); err != nil {
				break
			}
			done++
		}
	}
	if err != nil {
		_ = s.deleteQPNs(keys[:done])
		return fmt.Errorf("steer: QPN map update: %w", err)
	}
	return nil
}

// deleteQPNs removes keys (all present) from the BPF QPN map and the table.
func (s *Steerer) deleteQPNs(keys []uint32) error {
	for _, q := range keys {
		delete(s.qpns, q)
	}
	if s.qpnMap == nil || len(keys) == 0 {
		return nil
	}
	_, err := s.qpnMap.BatchDelete(keys, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		err = nil
		for _, q := range keys {
			if e := s.qpnMap.Delete(q); e != nil && !errors.Is(e, ebpf.ErrKeyNotExist) {
				err = e
			}
		}
	}
	if err != nil {
		return fmt.Errorf("steer: QPN map delete: %w", err)
	}
	return nil
}

// Unmap stops steering QPNs first..first+n-1 (whichever are mapped): their
// packets go to the daemon again.
func (s *Steerer) Unmap(first uint32, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var keys []uint32
	for i := 0; i < n; i++ {
		q := first + uint32(i)
		if _, ok := s.qpns[q]; ok {
			keys = append(keys, q)
		}
	}
	return s.deleteQPNs(keys)
}

// Owner reports the slot QPN qpn is steered to (DaemonSlot if unmapped).
func (s *Steerer) Owner(qpn uint32) Slot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.qpns[qpn]
}

// Stats returns the counters.
func (s *Steerer) Stats() (Stats, error) {
	st := Stats{
		Steered: s.steered.Load(), Default: s.dflt.Load(), Short: s.short.Load(),
		Fallback: s.fallbackN.Load(), RelayDropped: s.relayDropped.Load(), MapFull: s.mapFull.Load(),
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cntMap == nil {
		return st, nil
	}
	var per []uint64
	for i, dst := range []*uint64{&st.Steered, &st.Default, &st.Short, &st.Fallback, &st.Dropped} {
		if err := s.cntMap.Lookup(uint32(i), &per); err != nil {
			return st, fmt.Errorf("steer: counters: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return st, nil
}

// Close closes the daemon's socket, the relay sockets and the BPF objects.
// Processes' sockets stay open in the processes: in ModeBPF the group keeps
// the program and maps while any of them lives (see the package doc).
func (s *Steerer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for i, m := range s.slots {
		if m != nil && m.relay != nil {
			m.relay.close()
		}
		s.slots[i] = nil
	}
	err := s.src.Close()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, rocev2.ErrLinkClosed) { // the daemon's engine closed its link first
		err = nil
	}
	s.closeBPFObjects()
	return err
}
