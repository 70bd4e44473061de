// Package host opens a softrnic device the way a program opens an RDMA device by name:
// when the softrnic daemon serves the device ("softrnic daemon -name softrnic0 -rocev2
// IP"), Open attaches to it, and the program shares the device's RoCEv2 address (UDP
// 4791) with every other process attached to it, as the processes using one rxe device
// do; without a daemon, Open can run an in-process device as rnic.Open and cm.Open do.
//
//	d, err := host.Open("softrnic0", nil)
//	...
//	t := d.Transport()            // a cm.Transport on the device's RoCEv2 address
//	qp, _ := d.RNIC().CreateQP(pd, attr)
//	conn, err := t.Dial(ctx, qp, "192.0.2.7:7174", cm.Param{})
//
// Attached, the engine still runs in this process: its registered memory is this
// process's memory and data moves between the wire and it with no copy through the
// daemon. The daemon (internal/broker) numbers the process's QPs, steers the packets
// for those numbers to this process's own socket (a BPF program on the device's
// SO_REUSEPORT group; a relay through the daemon where BPF is not permitted), and
// routes the IB CM's MADs (QP1 is the device's, not the process's) by the listeners and
// connections they name. iWARP needs no broker: cm.Open(d.RNIC(), cm.IWARP, …) runs
// over the kernel's TCP, its QPs numbered and listed by the daemon all the same.
//
// When this process exits, the daemon frees what it held and disconnects its peers.
// When the daemon goes away, the device fails: its connections end with an error, their
// QPs go to Error (an async event each), and Done is closed.
//
// The attach socket sits next to the daemon's control socket (internal/attach): for
// device softrnic0, /run/softrnic/softrnic0.attach, or the directory of $SOFTRNIC_SOCK
// or Options.Socket. The daemon decides who may attach (its -group flag: the socket's
// group, mode 0660; by default only the daemon's user).
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
)

// Options configure Open. The zero value (or nil) attaches to the daemon's device at the
// default socket and fails without one.
type Options struct {
	// Socket is the daemon's control socket (default: $SOFTRNIC_SOCK, else
	// /run/softrnic/<name>.sock); the attach socket is next to it.
	Socket string
	// Local, when set, is the RoCEv2 address (ip or ip:udpport) of an in-process
	// device Open runs when no daemon serves the device. Empty: Open fails with an
	// error wrapping ErrNoDaemon then.
	Local string
	// CM and RoCE configure the device's RoCEv2 transport (nil: cm's defaults).
	CM   *rocev2.CMConfig
	RoCE *rocev2.Config
	// Timeout bounds each request to the daemon (0: 5 s).
	Timeout time.Duration
	// Logger receives the device's rare messages (nil: slog.Default()).
	Logger *slog.Logger
}

// ErrNoDaemon: no daemon serves the device (wraps the socket's error, e.g. ENOENT or
// ECONNREFUSED). A process the attach socket's permissions refuse gets an error
// wrapping EACCES instead, and no in-process device (Options.Local).
var ErrNoDaemon = errors.New("host: no softrnic daemon serves the device")

// ErrDaemonGone is the error of a device whose daemon went away.
var ErrDaemonGone = errors.New("host: the softrnic daemon went away")

// SocketPath is the control socket of the daemon serving device name: $SOFTRNIC_SOCK
// when set, else /run/softrnic/<name>.sock.
func SocketPath(name string) string { return uapi.SocketPath(name) }

// Device is an open softrnic device: attached to the daemon's, or in-process.
type Device struct {
	name string
	dev  *rnic.Device
	t    *cm.Transport
	addr netip.AddrPort
	mode string

	conn    *attach.Conn // nil in-process
	timeout time.Duration
	done    chan struct{}
	errMu   sync.Mutex
	err     error
	wg      sync.WaitGroup
}

// Open opens device name ("" : softrnic0).
func Open(name string, o *Options) (*Device, error) {
	if name == "" {
		name = "softrnic0"
	}
	if o == nil {
		o = &Options{}
	}
	sock := o.Socket
	if sock == "" {
		sock = SocketPath(name)
	}
	d := &Device{name: name, timeout: o.Timeout, done: make(chan struct{})}
	if d.timeout <= 0 {
		d.timeout = 5 * time.Second
	}
	path := attach.Path(sock)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		// a daemon serves the device, for others: no in-process device instead
		return nil, fmt.Errorf("host: attach to %s (%s): not permitted (a daemon started with -group lets that group's members attach): %w",
			name, path, err)
	}
	if err != nil {
		if o.Local == "" {
			return nil, fmt.Errorf("%w %s (%s): %w", ErrNoDaemon, name, path, err)
		}
		return d.openLocal(o)
	}
	if err := d.attach(c, o); err != nil {
		c.Close()
		return nil, fmt.Errorf("host: attach to %s (%s): %w", name, path, err)
	}
	return d, nil
}

// openLocal runs an in-process device.
func (d *Device) openLocal(o *Options) (*Device, error) {
	ip := o.Local
	if ap, err := netip.ParseAddrPort(o.Local); err == nil {
		ip = ap.Addr().String()
	}
	dev, err := rnic.Open(rnic.Config{Name: d.name, LocalAddr: ip})
	if err != nil {
		return nil, err
	}
	t, err := cm.Open(dev, cm.RoCEv2, o.Local, &cm.Options{CM: o.CM, RoCE: o.RoCE})
	if err != nil {
		dev.Close()
		return nil, err
	}
	d.dev, d.t, d.addr, d.mode = dev, t, t.Endpoint().LocalAddr(), "in-process"
	return d, nil
}

// attach says hello, takes the welcome and its descriptors, and opens the device on them.
func (d *Device) attach(c *net.UnixConn, o *Options) error {
	comm := filepath.Base(os.Args[0])
	if b, err := os.ReadFile("/proc/self/comm"); err == nil && len(b) > 1 {
		comm = string(b[:len(b)-1])
	}
	if err := attach.Write(c, attach.Msg{Op: attach.OpHello, Hello: &attach.Hello{Version: attach.Version, PID: os.Getpid(), Comm: comm}}); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(d.timeout))
	buf := make([]byte, 64<<10)
	n, files, err := steer.RecvFiles(c, buf)
	if err != nil {
		return fmt.Errorf("welcome: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	m, err := attach.Decode(buf[:n])
	if err != nil {
		return err
	}
	if m.Op == attach.OpError {
		return &attach.Error{Op: attach.OpHello, Errno: m.Errno, Msg: m.Error}
	}
	w := m.Welcome
	if m.Op != attach.OpWelcome || w == nil || w.Steer < 1 || len(files) != w.Steer+1 {
		return fmt.Errorf("welcome: unexpected %q with %d descriptors", m.Op, len(files))
	}
	if d.addr, err = netip.ParseAddrPort(w.Addr); err != nil {
		return fmt.Errorf("welcome: address %q: %w", w.Addr, err)
	}
	d.mode = w.Mode
	data, err := steer.Join(files[:w.Steer], nil)
	if err != nil {
		return fmt.Errorf("device link: %w", err)
	}
	if rl, ok := data.(*steer.RelayLink); ok {
		rl.SetRecvAddr(d.addr) // relayed packets were sent to the device's address
	}
	gsi, err := newGSILink(files[w.Steer], d.addr)
	if err != nil {
		data.Close()
		return err
	}
	d.conn = attach.NewConn(c, d.handle)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		err := d.conn.Serve()
		if err == nil {
			err = ErrDaemonGone
		}
		d.fail(err)
	}()
	d.dev, err = rnic.Open(rnic.Config{Name: d.name, LocalAddr: d.addr.Addr().String(), QPNumbers: qpnClient{d}})
	if err != nil {
		data.Close()
		gsi.Close()
		d.conn.Close()
		return err
	}
	link := &attachedLink{Link: data, gsi: gsi, d: d}
	rc := o.RoCE
	if w.Mode == "relay" && (rc == nil || rc.PeerPort == 0) {
		// Relayed processes send from ephemeral ports of the device's IP, so a peer on
		// this host is recognised by its IP (and every peer answered on the device's
		// port, 4791 in production: rocev2.Config.PeerPort; the relay's limitation).
		c := rocev2.Config{}
		if rc != nil {
			c = *rc
		}
		c.PeerPort = d.addr.Port()
		rc = &c
	}
	d.t, err = cm.Open(d.dev, cm.RoCEv2, d.addr.String(), &cm.Options{Link: link, CM: o.CM, RoCE: rc})
	if err != nil {
		d.dev.Close()
		d.conn.Close()
		return err
	}
	return nil
}

func (d *Device) fail(err error) {
	d.errMu.Lock()
	if d.err == nil {
		d.err = err
		close(d.done)
	}
	d.errMu.Unlock()
}

// call sends one request to the daemon.
func (d *Device) call(m attach.Msg) (attach.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	r, err := d.conn.Call(ctx, m)
	if errors.Is(err, attach.ErrClosed) { // also a write that found the daemon gone
		err = fmt.Errorf("%w: %w", ErrDaemonGone, err)
	}
	return r, err
}

// handle answers the daemon's requests.
func (d *Device) handle(m attach.Msg) attach.Msg {
	switch m.Op {
	case attach.OpListQPs:
	case attach.OpListRes:
		return attach.Msg{Op: attach.OpOK, Res: attach.ListRes(d.dev, m.Kind)}
	default:
		return attach.Msg{Op: attach.OpError, Errno: 71, Error: "unknown op " + m.Op}
	}
	qps := d.dev.QPs()
	if len(qps) > attach.MaxQPs {
		qps = qps[:attach.MaxQPs]
	}
	out := make([]attach.QP, 0, len(qps))
	for _, q := range qps {
		s := q.Counters().Snapshot()
		out = append(out, attach.QP{QPN: q.Num(), Transport: q.Transport(), State: q.State().String(), TxBytes: s.TxBytes, RxBytes: s.RxBytes,
			TxSegs: s.TxSegments, RxSegs: s.RxSegments, Retrans: s.Retransmits, NAKs: s.NAKs})
	}
	return attach.Msg{Op: attach.OpOK, QPs: out}
}

// RNIC is the engine device: PDs, MRs, CQs, QPs.
func (d *Device) RNIC() *rnic.Device { return d.dev }

// Transport is the device's RoCEv2 transport at Addr.
func (d *Device) Transport() *cm.Transport { return d.t }

// Addr is the device's RoCEv2 address.
func (d *Device) Addr() netip.AddrPort { return d.addr }

// Attached reports whether the device is the daemon's (else in-process).
func (d *Device) Attached() bool { return d.conn != nil }

// Steering names how packets reach this process: "bpf", "relay", or "in-process".
func (d *Device) Steering() string { return d.mode }

// Done is closed when an attached device failed because its daemon went away (never
// for an in-process device); Err says why.
func (d *Device) Done() <-chan struct{} { return d.done }

// Err is why the device failed, or nil.
func (d *Device) Err() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.err
}

// Close closes the transport and the device, and detaches.
func (d *Device) Close() error {
	err := d.t.Close()
	err = errors.Join(err, d.dev.Close())
	if d.conn != nil {
		d.conn.Close()
		d.wg.Wait()
	}
	return err
}

// qpnClient numbers the device's QPs through the daemon.
type qpnClient struct{ d *Device }

func (q qpnClient) AllocQPN() (uint32, error) {
	r, err := q.d.call(attach.Msg{Op: attach.OpAllocQPN})
	return r.QPN, err
}

func (q qpnClient) FreeQPN(n uint32) { _, _ = q.d.call(attach.Msg{Op: attach.OpFreeQPN, QPN: n}) }

// attachedLink is the process's RoCEv2 link: its steered socket (or relay) for data,
// the GSI socketpair for the CM, listeners' services claimed from the daemon.
type attachedLink struct {
	rocev2.Link
	gsi *gsiLink
	d   *Device
}

func (l *attachedLink) GSI() rocev2.Link { return l.gsi }

func (l *attachedLink) ClaimService(id uint64) error {
	_, err := l.d.call(attach.Msg{Op: attach.OpClaim, Service: id})
	return err
}

func (l *attachedLink) ReleaseService(id uint64) {
	_, _ = l.d.call(attach.Msg{Op: attach.OpRelease, Service: id})
}

// RecvAddr is the address peers send to: the device's (relayed packets arrive from the
// daemon but were sent there; the ICRC covers it).
func (l *attachedLink) RecvAddr() netip.AddrPort { return l.d.addr }

// Pending tells whether data packets wait to be read (rocev2.PendingLink), when the link
// can say.
func (l *attachedLink) Pending() bool {
	p, ok := l.Link.(rocev2.PendingLink)
	return ok && p.Pending()
}
