package main

// softrnic daemon runs one soft RNIC as a standalone service: a device with its iWARP and/or
// RoCEv2 transports, a memory target that peers can RDMA READ and WRITE, optionally the rping
// and perftest servers, and a control socket (internal/uapi) that "softrnic stat" reads.
//
// The memory target registers one region of -target-mib MiB (anonymous mmap) and accepts
// every connection request on the daemon's listeners. The accept private data (MPA Reply or
// IB CM REP) starts with the region's 16-byte advertisement, the layout of rping's
// struct rping_rdma_info:
//
//	offset  size  field
//	0       8     addr   big-endian IOVA of the region's first byte (the tagged offset)
//	8       4     rkey   big-endian STag granting Remote Read and Remote Write
//	12      4     len    big-endian region length in bytes
//
// The target posts no receives: a peer that Sends to it gets a Terminate (iWARP) or RNR
// NAKs (RoCEv2). RDMA READ and WRITE of the advertised range are all it serves.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

func init() {
	register(command{name: "daemon", usage: "standalone soft RNIC with a memory target and a control socket [-iwarp addr:port] [-rocev2 ip[:port]] [-sock path]", run: runDaemon})
}

// targetInfoLen is the size of the memory target's advertisement in the accept private data.
const targetInfoLen = 16

// Defaults of the daemon.
const (
	daemonDefName       = "softrnic0"
	daemonDefTargetMiB  = 16
	daemonDefCMPort     = 7471 // RDMA-CM port of the RoCEv2 memory target
	daemonMaxTargetMiB  = 4095 // the advertisement's length is 32 bits
	daemonStopTimeout   = 5 * time.Second
	daemonForegroundEnv = "SOFTRNIC_DAEMON_FOREGROUND"
)

// daemonOpts are the daemon's settings (flags, or a -config file of the same names).
type daemonOpts struct {
	name         string
	sock         string
	iwarp        []string // iWARP listen addresses (host:port)
	rocev2       string   // RoCEv2 link address ip[:udpport]
	cmPort       int      // RDMA-CM port of the RoCEv2 target listener
	peerPort     int      // RoCEv2 peers' UDP port (-1: 4791 if our own port is 4791, else 0)
	targetMiB    int
	crc          bool          // iWARP: request MPA CRC32c
	rping        string        // host:port of an rping server ("" = none)
	perftest     string        // host:port of a perftest server ("" = none)
	perftestVerb perftest.Verb // -perftest-verb
	foreground   bool
	logFile      string    // -log: append the log to this file
	logOut       io.Writer // nil = os.Stderr
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseDaemonArgs(args []string, errOut io.Writer) (daemonOpts, error) {
	o := daemonOpts{}
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(errOut)
	cfgFile := fs.String("config", "", "configuration `file`: key=value lines with the flag names as keys, # comments; flags given win")
	fs.StringVar(&o.name, "name", daemonDefName, "device name")
	fs.StringVar(&o.sock, "sock", "", "control socket (default /run/softrnic/<name>.sock)")
	fs.Var((*listFlag)(&o.iwarp), "iwarp", "iWARP listen address host:port (repeatable)")
	fs.StringVar(&o.rocev2, "rocev2", "", "RoCEv2 link address ip[:udpport] (default port 4791)")
	fs.IntVar(&o.cmPort, "rocev2-cm-port", daemonDefCMPort, "RDMA-CM port of the RoCEv2 memory target")
	fs.IntVar(&o.peerPort, "rocev2-peer-port", -1, "UDP port of RoCEv2 peers (0: their source port; default 4791 when ours is 4791, else 0)")
	fs.IntVar(&o.targetMiB, "target-mib", daemonDefTargetMiB, "size of the memory target in MiB (0: none)")
	fs.BoolVar(&o.crc, "crc", false, "iWARP: request MPA CRC32c")
	fs.StringVar(&o.rping, "rping", "", "also run an iWARP rping server on host:port")
	fs.StringVar(&o.perftest, "perftest", "", "also run an iWARP perftest server on host:port")
	verb := fs.String("perftest-verb", "write", "perftest server test: write, read or send")
	fs.BoolVar(&o.foreground, "foreground", false, "stay in the foreground (default: detach once the socket is up)")
	fs.StringVar(&o.logFile, "log", "", "append the log to this file (default stderr, which a detached daemon does not have)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *cfgFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := applyDaemonConfig(fs, *cfgFile, set); err != nil {
			return o, err
		}
	}
	if o.sock == "" {
		o.sock = uapi.SocketPath(o.name)
	}
	if o.targetMiB < 0 || o.targetMiB > daemonMaxTargetMiB {
		return o, fmt.Errorf("-target-mib %d out of range 0..%d", o.targetMiB, daemonMaxTargetMiB)
	}
	if o.cmPort <= 0 || o.cmPort > 65535 || o.peerPort < -1 || o.peerPort > 65535 {
		return o, errors.New("port out of range")
	}
	if len(o.iwarp) == 0 && o.rocev2 == "" {
		return o, errors.New("no transport: give -iwarp and/or -rocev2")
	}
	switch *verb {
	case "write":
		o.perftestVerb = perftest.Write
	case "read":
		o.perftestVerb = perftest.Read
	case "send":
		o.perftestVerb = perftest.Send
	default:
		return o, fmt.Errorf("-perftest-verb %q: want write, read or send", *verb)
	}
	return o, nil
}

// applyDaemonConfig sets the flags a config file names, except those given on the command
// line (which win). "iwarp" may repeat.
func applyDaemonConfig(fs *flag.FlagSet, path string, cmdline map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "config" || fs.Lookup(k) == nil {
			return fmt.Errorf("%s:%d: bad line %q", path, n, line)
		}
		if cmdline[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n, err)
		}
	}
	return sc.Err()
}

func runDaemon(args []string) int {
	o, err := parseDaemonArgs(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 2
	}
	if !o.foreground && os.Getenv(daemonForegroundEnv) == "" {
		return detachDaemon(o)
	}
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			fmt.Fprintln(os.Stderr, "daemon:", err)
			return 1
		}
		defer f.Close()
		o.logOut = f
	}
	// Catch the signals before the socket exists, so a stop request that follows its
	// appearance is never lost.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	d, err := startDaemon(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	d.logf("%s up: control socket %s", o.name, o.sock)
	s := <-sig
	d.logf("%v: shutting down", s)
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	return 0
}

// detachDaemon starts the daemon again as a session leader in the background (Go cannot
// fork), waits until its control socket answers, prints its pid and returns.
func detachDaemon(o daemonOpts) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	defer null.Close()
	env := append(os.Environ(), daemonForegroundEnv+"=1")
	p, err := os.StartProcess(exe, append([]string{exe, "daemon"}, os.Args[2:]...), &os.ProcAttr{
		Env: env, Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { _, err := p.Wait(); exited <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			fmt.Fprintln(os.Stderr, "daemon: exited during startup (run with -foreground to see why)")
			return 1
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := uapi.GetStatus(ctx, o.sock)
		cancel()
		if err == nil {
			fmt.Println(p.Pid)
			_ = p.Release()
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "daemon: control socket did not come up; killing", p.Pid)
	_ = p.Kill()
	return 1
}

// daemonConn is one QP of the memory target.
type daemonConn struct {
	qp        *rnic.QP
	transport string
	peer      string
	mulpdu    int           // iWARP: the MULPDU of the FPDUs this side sends
	done      chan struct{} // closed when its goroutine has destroyed the QP
}

// daemon is a running standalone RNIC.
type daemon struct {
	o      daemonOpts
	log    *log.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops, connection watchers, tool servers, event logger

	dev *rnic.Device
	pd  *rnic.PD
	cq  *rnic.CQ
	mem []byte // the target region (mmap), nil without a target
	mr  *rnic.MR
	ep  *rocev2.Endpoint

	mu     sync.Mutex
	closed bool
	iwLns  []*iwarp.Listener
	roLn   *rocev2.Listener
	conns  map[uint32]*daemonConn

	srv *uapi.Server
}

func (d *daemon) logf(format string, args ...any) { d.log.Printf(format, args...) }

// startDaemon opens the device, its transports and services, and the control socket.
func startDaemon(o daemonOpts) (_ *daemon, err error) {
	out := o.logOut
	if out == nil {
		out = os.Stderr
	}
	d := &daemon{o: o, log: log.New(out, "softrnic daemon: ", log.LstdFlags), conns: make(map[uint32]*daemonConn)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	cfg := rnic.Config{Name: o.name}
	var roAddr netip.AddrPort
	if o.rocev2 != "" {
		if roAddr, err = parseRoCEAddr(o.rocev2); err != nil {
			return nil, err
		}
		cfg.LocalAddr = roAddr.Addr().String()
	}
	if d.dev, err = rnic.Open(cfg); err != nil {
		return nil, err
	}
	d.wg.Add(1)
	go d.logEvents()
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return nil, err
	}
	if d.cq, err = d.dev.CreateCQ(64); err != nil {
		return nil, err
	}
	if o.targetMiB > 0 {
		if d.mem, err = unix.Mmap(-1, 0, o.targetMiB<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
			return nil, fmt.Errorf("mmap target: %w", err)
		}
		if d.mr, err = d.pd.RegMR(d.mem, rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite); err != nil {
			return nil, fmt.Errorf("register target: %w", err)
		}
	}
	for _, a := range o.iwarp {
		if err = d.listenIWARP(a); err != nil {
			return nil, err
		}
	}
	if o.rocev2 != "" {
		link, err := rocev2.ListenUDP(roAddr, nil)
		if err != nil {
			return nil, fmt.Errorf("RoCEv2 link %v: %w", roAddr, err)
		}
		rc := rocev2.DefaultConfig()
		switch {
		case o.peerPort >= 0:
			rc.PeerPort = uint16(o.peerPort)
		case roAddr.Port() == roce.UDPPort:
			rc.PeerPort = roce.UDPPort
		}
		d.ep = rocev2.NewEndpoint(d.dev, link, rc)
		ln, err := rocev2.Listen(d.ep, net.JoinHostPort(roAddr.Addr().String(), strconv.Itoa(o.cmPort)), nil)
		if err != nil {
			return nil, err
		}
		d.roLn = ln
		d.wg.Add(1)
		go d.acceptRoCE(ln)
	}
	if o.rping != "" {
		if err = d.startTool("rping", o.rping, func(host string, port int) func(context.Context) error {
			ro := rping.DefaultOptions()
			ro.Server, ro.Addr, ro.Port = true, host, port
			return func(ctx context.Context) error { return rping.Run(ctx, ro, nil, nil) }
		}); err != nil {
			return nil, err
		}
	}
	if o.perftest != "" {
		if err = d.startTool("perftest", o.perftest, func(host string, port int) func(context.Context) error {
			po := perftest.DefaultOptions(o.perftestVerb)
			po.Bind, po.Port = host, port
			return func(ctx context.Context) error { return perftest.Run(ctx, po, nil, nil) }
		}); err != nil {
			return nil, err
		}
	}
	if d.srv, err = uapi.Listen(o.sock, d); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", o.sock, err)
	}
	return d, nil
}

// parseRoCEAddr parses ip[:udpport] (port 4791 by default).
func parseRoCEAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("-rocev2 %q: want ip[:port]", s)
	}
	return netip.AddrPortFrom(a.Unmap(), roce.UDPPort), nil
}

// startTool runs one of the existing tool servers (rping, perftest) in a loop, one client
// session after the other, on its own device (so its traffic is not in this daemon's
// counters).
func (d *daemon) startTool(name, addr string, mk func(host string, port int) func(context.Context) error) error {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-%s %q: %w", name, addr, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return fmt.Errorf("-%s %q: bad port", name, addr)
	}
	run := mk(host, int(port))
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for d.ctx.Err() == nil {
			err := run(d.ctx)
			if d.ctx.Err() != nil {
				return
			}
			if err != nil {
				d.logf("%s server: %v", name, err)
				select { // a persistent failure (port in use) must not spin
				case <-time.After(time.Second):
				case <-d.ctx.Done():
				}
			}
		}
	}()
	return nil
}

func (d *daemon) logEvents() {
	defer d.wg.Done()
	for e := range d.dev.Events() {
		if e.QP != nil {
			d.logf("qp %d: %v", e.QP.Num(), e)
		} else {
			d.logf("%v", e)
		}
	}
}

// listenIWARP adds an iWARP listener and its accept loop.
func (d *daemon) listenIWARP(addr string) error {
	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = d.o.crc
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("daemon closed")
	}
	ln, err := iwarp.Listen(d.dev, addr, cfg)
	if err != nil {
		return err
	}
	d.iwLns = append(d.iwLns, ln)
	d.wg.Add(1)
	go d.acceptIWARP(ln)
	return nil
}

// advertisement returns the private data of an accept: the target's 16-byte info, or
// nothing without a target.
func (d *daemon) advertisement() []byte {
	if d.mr == nil {
		return nil
	}
	b := make([]byte, targetInfoLen)
	binary.BigEndian.PutUint64(b[0:], d.mr.Addr())
	binary.BigEndian.PutUint32(b[8:], d.mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(d.mr.Len()))
	return b
}

func (d *daemon) newQP() (*rnic.QP, error) {
	return d.dev.CreateQP(d.pd, rnic.QPAttr{SendCQ: d.cq, RecvCQ: d.cq, Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
}

// inboundDepth is the IRD the target grants: the initiator's ORD, capped at the device's
// MaxIRD default; 0 (an MPA rev 1 peer, which sends no ORD) leaves the transport's default.
func inboundDepth(ord int) int { return min(max(ord, 0), 128) }

func (d *daemon) acceptIWARP(ln *iwarp.Listener) {
	defer d.wg.Done()
	for {
		r, err := ln.Accept(d.ctx)
		if err != nil {
			return
		}
		qp, err := d.newQP()
		if err != nil {
			d.logf("iwarp: %v", err)
			_ = r.Reject(nil)
			continue
		}
		peer := r.RemoteAddr().String()
		conn, err := r.Accept(qp, iwarp.ConnParam{PrivateData: d.advertisement(), IRD: inboundDepth(r.ORD()), ORD: 1})
		if err != nil {
			d.logf("iwarp: accept %s: %v", peer, err)
			_ = qp.Destroy()
			continue
		}
		d.track(&daemonConn{qp: qp, transport: "iwarp", peer: peer, mulpdu: conn.MULPDU()})
	}
}

func (d *daemon) acceptRoCE(ln *rocev2.Listener) {
	defer d.wg.Done()
	for {
		r, err := ln.Accept(d.ctx)
		if err != nil {
			return
		}
		qp, err := d.newQP()
		if err != nil {
			d.logf("rocev2: %v", err)
			_ = r.Reject(nil)
			continue
		}
		peer := r.RemoteAddr().String()
		if _, err := r.Accept(qp, rocev2.ConnParam{PrivateData: d.advertisement(), IRD: inboundDepth(r.ORD()), ORD: 1}); err != nil {
			d.logf("rocev2: accept %s: %v", peer, err)
			_ = qp.Destroy()
			continue
		}
		d.track(&daemonConn{qp: qp, transport: "rocev2", peer: peer})
	}
}

// track records a connected QP and watches it: when its connection ends (or the daemon
// stops) the QP is destroyed and forgotten.
func (d *daemon) track(c *daemonConn) {
	qp := c.qp
	c.done = make(chan struct{})
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = qp.Destroy()
		return
	}
	d.conns[qp.Num()] = c
	d.wg.Add(1)
	d.mu.Unlock()
	d.logf("qp %d: %s connection from %s", qp.Num(), c.transport, c.peer)
	go func() {
		defer d.wg.Done()
		defer close(c.done)
		select {
		case <-qp.Done():
		case <-d.ctx.Done():
			qp.Disconnect()
			select {
			case <-qp.Done():
			case <-time.After(daemonStopTimeout):
			}
		}
		_ = qp.Destroy()
		d.mu.Lock()
		delete(d.conns, qp.Num())
		d.mu.Unlock()
		d.logf("qp %d: closed", qp.Num())
	}()
}

// Close shuts the daemon down: the control socket, the listeners, then every QP is
// disconnected gracefully (bounded by daemonStopTimeout), then the transports and the device
// are closed and the target is unmapped. It waits for all the daemon's goroutines.
func (d *daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	lns, roLn := d.iwLns, d.roLn
	d.mu.Unlock()
	var errs []error
	if d.srv != nil {
		errs = append(errs, d.srv.Close())
	}
	d.cancel()
	for _, ln := range lns {
		errs = append(errs, ln.Close())
	}
	if roLn != nil {
		errs = append(errs, roLn.Close())
	}
	// Connection watchers disconnect their QPs now (ctx is cancelled). Wait for them before
	// the transports go away so the disconnects can be graceful.
	d.mu.Lock()
	conns := make([]*daemonConn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		<-c.done
	}
	if d.ep != nil {
		errs = append(errs, d.ep.Close())
	}
	if d.dev != nil {
		errs = append(errs, d.dev.Close()) // closes Events, ending logEvents
	}
	d.wg.Wait()
	if d.mr != nil {
		errs = append(errs, d.mr.Dereg())
	}
	if d.mem != nil {
		errs = append(errs, unix.Munmap(d.mem))
		d.mem = nil
	}
	return errors.Join(errs...)
}

// ---- control protocol (uapi.Handler) ----

func countersOf(s rnic.Stats) uapi.Counters {
	return uapi.Counters{TxBytes: s.TxBytes, RxBytes: s.RxBytes, TxSegments: s.TxSegments, RxSegments: s.RxSegments,
		CRCErrors: s.CRCErrors, TermSent: s.TermSent, TermRecv: s.TermRecv, Retransmits: s.Retransmits, NAKs: s.NAKs}
}

// status collects the device's state for get=1.
func (d *daemon) status() uapi.Status {
	s := uapi.Status{Device: d.dev.Name(), Counters: countersOf(d.dev.Counters().Snapshot())}
	if d.mr != nil {
		s.TargetAddr, s.TargetRKey, s.TargetLen = d.mr.Addr(), d.mr.RKey(), uint64(d.mr.Len())
	}
	d.mu.Lock()
	for _, ln := range d.iwLns {
		s.ListenIWARP = append(s.ListenIWARP, ln.Addr().String())
	}
	if d.roLn != nil {
		s.ListenRoCEv2 = append(s.ListenRoCEv2, d.ep.LocalAddr().String())
		s.RoCEv2CMPort = d.roLn.Port()
	}
	conns := make([]*daemonConn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].qp.Num() < conns[j].qp.Num() })
	for _, c := range conns {
		q := uapi.QPStatus{QPN: c.qp.Num(), Transport: c.transport, State: c.qp.State().String(),
			Peer: c.peer, Counters: countersOf(c.qp.Counters().Snapshot())}
		s.QPs = append(s.QPs, q)
	}
	return s
}

// Get implements uapi.Handler.
func (d *daemon) Get() ([]uapi.Pair, error) {
	s := d.status()
	return s.Pairs(), nil
}

// Set implements uapi.Handler: listen_iwarp=host:port adds an iWARP listener;
// close_qp=N disconnects QP N gracefully.
func (d *daemon) Set(ps []uapi.Pair) error {
	for _, p := range ps {
		switch p.Key {
		case "listen_iwarp":
			if _, _, err := net.SplitHostPort(p.Value); err != nil {
				return uapi.Errorf(uapi.EINVAL, "listen_iwarp=%s: %v", p.Value, err)
			}
			if err := d.listenIWARP(p.Value); err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					return uapi.Errorf(uapi.EADDRINUSE, "listen_iwarp=%s: %v", p.Value, err)
				}
				return uapi.Errorf(uapi.EIO, "listen_iwarp=%s: %v", p.Value, err)
			}
			d.logf("listening on %s (iwarp)", p.Value)
		case "close_qp":
			n, err := strconv.ParseUint(p.Value, 10, 32)
			if err != nil {
				return uapi.Errorf(uapi.EINVAL, "close_qp=%s: not a QP number", p.Value)
			}
			d.mu.Lock()
			c := d.conns[uint32(n)]
			d.mu.Unlock()
			if c == nil {
				return uapi.Errorf(uapi.ENOENT, "close_qp=%d: no such QP", n)
			}
			c.qp.Disconnect()
		default:
			return uapi.Errorf(uapi.EPROTO, "unknown key %q", p.Key)
		}
	}
	return nil
}
