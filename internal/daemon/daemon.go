package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/broker"
	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/tools/target"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
	"golang.org/x/sys/unix"
)

// qpInfo is what the control protocol uses of a QP: an *rnic.QP (tests add synthetic
// entries).
type qpInfo interface {
	State() rnic.QPState
	Counters() *rnic.Counters
	Disconnect()
}

// daemonConn is one QP of the memory target.
type daemonConn struct {
	qpn       uint32
	info      qpInfo
	transport string
	peer      string
	mulpdu    int // iWARP: the MULPDU of the FPDUs this side sends
}

// newLogger is the daemon's structured log: text (or JSON with Options.LogJSON) records
// on Options.LogOut, os.Stderr by default.
func newLogger(o Options) *slog.Logger {
	out := o.LogOut
	if out == nil {
		out = os.Stderr
	}
	if o.LogJSON {
		return slog.New(slog.NewJSONHandler(out, nil))
	}
	return slog.New(slog.NewTextHandler(out, nil))
}

// Daemon is a running standalone RNIC.
type Daemon struct {
	o      Options
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops, tool servers, event logger

	dev     *rnic.Device
	pd      *rnic.PD
	mem     []byte // the target region (mmap), nil without a target
	mr      *rnic.MR
	tgt     *target.Server // the memory target's accept loop, on every listener below
	ro      *cm.Transport  // RoCEv2 (-rocev2): the device's endpoint
	br      *broker.Broker // the device processes attach to (-rocev2 without -xdp)
	prt     *port          // its netdev: state, MTU, GIDs
	met     *http.Server   // -metrics
	metAddr net.Addr

	mu     sync.Mutex
	closed bool
	iw     *cm.Transport          // iWARP, opened with the first listener
	iwLns  []*cm.Listener         // iWARP listeners
	roLn   *cm.Listener           // the RoCEv2 listener
	conns  map[uint32]*daemonConn // by QP number
	qpns   []uint32               // the keys of conns in increasing order, for paging

	srv   *uapi.Server
	rping *rping.Server // -rping

	listenRefused atomic.Uint64 // listen_iwarp refused at MaxListeners
}

// Start opens the device, its transports and services, and the control socket.
func Start(o Options) (_ *Daemon, err error) {
	if o.MaxListeners <= 0 {
		o.MaxListeners = DefaultMaxListeners
	}
	if o.RpingMaxSessions <= 0 {
		o.RpingMaxSessions = rping.DefaultMaxSessions
	}
	d := &Daemon{o: o, log: newLogger(o), conns: make(map[uint32]*daemonConn)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	cfg := rnic.Config{Name: o.Name}
	var roAddr netip.AddrPort
	if o.RoCEv2 != "" {
		if roAddr, err = parseRoCEAddr(o.RoCEv2); err != nil {
			return nil, err
		}
		cfg.LocalAddr = roAddr.Addr().String()
		// the RoCEv2 address is a device processes attach to
		bc := broker.Config{Name: o.Name, Addr: roAddr, Socket: attach.Path(o.Sock), Group: o.Group,
			Mode: o.Steer, MaxProcs: o.MaxProcs, Logger: d.log}
		if o.Link.XDP != "" { // the device's packets arrive on the AF_XDP port: relayed to the processes
			if bc.Link, err = hostlink.Process().RoCELink(roAddr, nil); err != nil {
				return nil, fmt.Errorf("RoCEv2 link %v: %w", roAddr, err)
			}
		}
		if d.br, err = broker.New(bc); err != nil {
			return nil, err
		}
		cfg.QPNumbers = d.br.QPNumbers()
		if d.prt, err = trackPort(roAddr.Addr(), o.Netdev, d.log); err != nil {
			if o.Netdev != "" || !errors.Is(err, errNoNetdev) {
				return nil, err
			}
			d.log.Warn("device: no netdev carries its address; port state and GIDs not tracked", "addr", roAddr.Addr())
			err = nil
		}
		d.log.Info("device", "name", o.Name, "rocev2", d.br.Addr().String(), "steering", d.br.Mode().String(),
			"attach", attach.Path(o.Sock))
	}
	if d.dev, err = rnic.Open(cfg); err != nil {
		return nil, err
	}
	d.wg.Add(1)
	go d.logEvents()
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return nil, err
	}
	if o.TargetMiB > 0 {
		if d.mem, err = unix.Mmap(-1, 0, o.TargetMiB<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
			return nil, fmt.Errorf("mmap target: %w", err)
		}
		if d.mr, err = d.pd.RegMR(d.mem, rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite); err != nil {
			return nil, fmt.Errorf("register target: %w", err)
		}
	}
	// The listeners' accepts (without a target: with no private data).
	if d.tgt, err = target.NewServer(d.pd, d.mr, target.ServerConfig{MaxConns: o.TargetMaxConns, Log: d.log,
		Connected: d.connected, Closed: d.disconnected}); err != nil {
		return nil, err
	}
	for _, a := range o.IWARP {
		if err = d.listenIWARP(a); err != nil {
			return nil, err
		}
	}
	if o.RoCEv2 != "" {
		link := d.br.Link()
		rc := rocev2.DefaultConfig()
		rc.StrictICRC = o.StrictICRC
		if o.PeerPort >= 0 {
			rc.PeerPort = uint16(o.PeerPort) // an override; by default the endpoint follows rocev2.Addr's rule
		}
		if d.ro, err = cm.Open(d.dev, cm.RoCEv2, "", &cm.Options{Link: link, RoCE: rc}); err != nil {
			return nil, err
		}
		if d.mr != nil { // the memory target's listener; without one the CM port is free for processes
			ln, err := d.ro.Listen(net.JoinHostPort(roAddr.Addr().String(), strconv.Itoa(o.CMPort)))
			if err != nil {
				return nil, err
			}
			d.roLn = ln
			d.wg.Add(1)
			go d.serve(ln)
		}
	}
	if o.Rping != "" {
		if err = d.startRping(o.Rping); err != nil {
			return nil, err
		}
	}
	if o.Perftest != "" {
		if err = d.startTool("perftest", o.Perftest, func(host string, port int) func(context.Context) error {
			po := perftest.DefaultOptions(o.PerftestVerb)
			po.Bind, po.Port = host, port
			return func(ctx context.Context) error { return perftest.Run(ctx, po, nil, nil) }
		}); err != nil {
			return nil, err
		}
	}
	if o.Metrics != "" {
		if err = d.serveMetrics(o.Metrics); err != nil {
			return nil, err
		}
	}
	if d.srv, err = uapi.Listen(o.Sock, d, &uapi.ServerConfig{
		MaxClients: o.CtlMaxClients, IdleTimeout: o.CtlIdleTimeout, Logger: d.log}); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", o.Sock, err)
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

// splitToolAddr splits the host:port of a tool server flag.
func splitToolAddr(name, addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("-%s %q: %w", name, addr, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("-%s %q: bad port", name, addr)
	}
	return host, int(port), nil
}

// startRping runs a persistent rping server (rping -s -P) on its own device (so its
// traffic is not in this daemon's counters): every client gets its own session at once,
// up to RpingMaxSessions, each ended after RpingIdleTimeout without a message.
func (d *Daemon) startRping(addr string) error {
	host, port, err := splitToolAddr("rping", addr)
	if err != nil {
		return err
	}
	ro := rping.DefaultOptions()
	ro.Server, ro.Persistent, ro.Addr, ro.Port = true, true, host, port
	ro.MaxSessions, ro.IdleTimeout = d.o.RpingMaxSessions, d.o.RpingIdleTimeout
	ro.SessionEnd = func(peer string, err error) {
		if err != nil && d.ctx.Err() == nil {
			d.log.Warn("rping session failed", "peer", peer, "err", err)
		} else {
			d.log.Info("rping session ended", "peer", peer)
		}
	}
	srv, err := rping.Listen(ro, nil, nil)
	if err != nil {
		return fmt.Errorf("-rping %s: %w", addr, err)
	}
	d.rping = srv
	d.log.Info("listening", "tool", "rping", "addr", srv.Addr().String())
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(d.ctx); err != nil {
			d.log.Error("rping server stopped", "err", err)
		}
	}()
	return nil
}

// startTool runs a tool server (perftest) in a loop, one client session after the other,
// on its own device (so its traffic is not in this daemon's counters).
func (d *Daemon) startTool(name, addr string, mk func(host string, port int) func(context.Context) error) error {
	host, port, err := splitToolAddr(name, addr)
	if err != nil {
		return err
	}
	run := mk(host, port)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for d.ctx.Err() == nil {
			err := run(d.ctx)
			if d.ctx.Err() != nil {
				return
			}
			if err != nil {
				d.log.Error("tool server failed", "tool", name, "addr", addr, "err", err)
				select { // a persistent failure (port in use) must not spin
				case <-time.After(time.Second):
				case <-d.ctx.Done():
				}
			}
		}
	}()
	return nil
}

func (d *Daemon) logEvents() {
	defer d.wg.Done()
	for e := range d.dev.Events() {
		attrs := []any{"event", e.Type.String()}
		if e.QP != nil {
			attrs = append(attrs, "qpn", e.QP.Num())
		}
		if e.Err != nil {
			attrs = append(attrs, "err", e.Err)
		}
		d.log.Info("async event", attrs...)
	}
}

// errTooManyListeners refuses a listener over Options.MaxListeners.
var errTooManyListeners = errors.New("too many iWARP listeners")

// listenIWARP adds an iWARP listener on addr (an IP literal and a port, see
// parseListenAddr) and its accept loop, if there are fewer than MaxListeners.
func (d *Daemon) listenIWARP(addr string) error {
	if _, err := parseListenAddr(addr); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("daemon closed")
	}
	if len(d.iwLns) >= d.o.MaxListeners {
		d.listenRefused.Add(1)
		return fmt.Errorf("%w (%d)", errTooManyListeners, d.o.MaxListeners)
	}
	// -xdp: on the AF_XDP port of the first listener's address (a later listener on
	// another address fails with hostlink.ErrOneAddress); -pcap: recorded
	host, _, _ := net.SplitHostPort(addr)
	co := &cm.Options{IWARP: tool.IWARPConfig(d.o.CRC)}
	local, err := hostlink.Process().CM(cm.IWARP, host, co)
	if err != nil {
		return err
	}
	if d.iw == nil {
		if d.iw, err = cm.Open(d.dev, cm.IWARP, local, co); err != nil {
			return err
		}
	}
	ln, err := d.iw.Listen(everyAddress(addr, d.iw.LocalIP()))
	if err != nil {
		return err
	}
	d.iwLns = append(d.iwLns, ln)
	d.wg.Add(1)
	go d.serve(ln)
	return nil
}

// everyAddress gives a listen address without a host the unspecified address of ip's
// family (cm's Listen would take the transport's IP): every address of the host on the
// kernel's TCP, which listens on both families then, and the stack's address on an
// AF_XDP port's.
func everyAddress(addr string, ip netip.Addr) string {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil || host != "":
		return addr
	case ip.Is6():
		return net.JoinHostPort("::", port)
	}
	return net.JoinHostPort("0.0.0.0", port)
}

// serve runs the memory target's accept loop on ln until the daemon stops.
func (d *Daemon) serve(ln *cm.Listener) {
	defer d.wg.Done()
	_ = d.tgt.Serve(d.ctx, ln)
}

// addConn records c in the QP table; d.mu is held.
func (d *Daemon) addConn(c *daemonConn) {
	d.conns[c.qpn] = c
	if i, ok := slices.BinarySearch(d.qpns, c.qpn); !ok {
		d.qpns = slices.Insert(d.qpns, i, c.qpn)
	}
}

// removeConn forgets QP qpn; d.mu is held.
func (d *Daemon) removeConn(qpn uint32) {
	delete(d.conns, qpn)
	if i, ok := slices.BinarySearch(d.qpns, qpn); ok {
		d.qpns = slices.Delete(d.qpns, i, i+1)
	}
}

// connected records a connection the memory target accepted in the QP table.
func (d *Daemon) connected(c *cm.Conn, peer net.Addr) {
	qp := c.QP()
	d.mu.Lock()
	d.addConn(&daemonConn{qpn: qp.Num(), info: qp, transport: c.Network(), peer: peer.String(), mulpdu: c.MULPDU()})
	d.mu.Unlock()
}

// disconnected forgets a connection of the memory target whose QP it has destroyed.
func (d *Daemon) disconnected(c *cm.Conn) {
	d.mu.Lock()
	d.removeConn(c.QP().Num())
	d.mu.Unlock()
}

// Close shuts the daemon down: the control socket, the listeners, then every QP of the
// memory target is disconnected gracefully (bounded, target.Server.Close), then the
// transports and the device are closed and the target is unmapped. It waits for all the
// daemon's goroutines.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	lns, roLn, iw := d.iwLns, d.roLn, d.iw
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
	// The target's connections are disconnected before the transports go away, so the
	// disconnects can be graceful.
	if d.tgt != nil {
		d.tgt.Close()
	}
	if d.met != nil {
		errs = append(errs, d.met.Close())
	}
	if d.ro != nil {
		errs = append(errs, d.ro.Close())
	}
	if iw != nil {
		errs = append(errs, iw.Close())
	}
	if d.br != nil {
		errs = append(errs, d.br.Close())
	}
	if d.prt != nil {
		d.prt.close()
	}
	if d.dev != nil {
		errs = append(errs, d.dev.Close()) // closes Events, ending logEvents
	}
	d.wg.Wait()
	if d.rping != nil {
		errs = append(errs, d.rping.Close())
	}
	if d.mr != nil {
		errs = append(errs, d.mr.Dereg())
	}
	if d.mem != nil {
		errs = append(errs, unix.Munmap(d.mem))
		d.mem = nil
	}
	return errors.Join(errs...)
}
