// Package hostlink is what softrnic's tools and daemon share to choose how their
// transports reach the network, and to record what they send:
//
//   - --xdp NETDEV (Options.XDP) carries iWARP over the user-space TCP of link/netstack
//     and RoCEv2 over rnic/rocev2/xdp, both on one AF_XDP port on NETDEV (one XDP
//     program, one UMEM), instead of the kernel's sockets; --xdp-mode forces the XDP
//     attach mode (generic on a tap, say), the other choices are link/netdev's (what
//     `softrnic link show NETDEV` reports);
//   - --pcap FILE (Options.PCAP) records every transport's traffic in a pcapng file
//     (package capture): the AF_XDP port's frames as they are with --xdp, else iWARP
//     connections as reconstructed streams and RoCEv2 datagrams behind synthetic
//     headers. Recording is bounded and drops rather than slowing the datapath.
//
// A program parses the flags into Options (Options.Flag for a flag.FlagSet, or
// Options.Arg in a hand-written parser), opens one Host, and lets it prepare each
// transport: CM fills the cm.Options of a transport the program opens through rnic/cm;
// IWARPConfig, IWARPListen and RoCELink serve a program that uses rnic/iwarp and
// rnic/rocev2 directly. Close (after the transports) releases the port and finishes the
// capture file. The zero Options change nothing: the Host then hands out the kernel's
// sockets, as the program did before.
package hostlink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netdev"
	"github.com/softrnic/softrnic/link/netstack"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/xdp"
)

// Options select the datapath and the capture; the zero value is the kernel's sockets
// without a capture.
type Options struct {
	// XDP is the netdev whose AF_XDP port carries both networks ("": the kernel's
	// sockets).
	XDP string
	// XDPMode forces the XDP attach mode (afxdp.ModeAuto: link/netdev chooses).
	XDPMode afxdp.Mode
	// PCAP is the capture file ("": none).
	PCAP string
	// UDPOffload overrides the RoCEv2 UDP link's automatic offloads (rocev2.ListenUDP):
	// "" or "auto" keeps them, "none" turns GSO and GRO off, "gso", "gro" or "gso,gro"
	// turn on just those.
	UDPOffload string
}

// FlagUsage documents the flags, for a tool's usage text.
const FlagUsage = `  --xdp NETDEV            carry iWARP (user-space TCP) and RoCEv2 over an AF_XDP port on NETDEV (root)
  --xdp-mode MODE         XDP attach mode: auto, driver or generic
  --pcap FILE             record every packet the device sends and receives (pcapng)
  --udp-offload LIST      RoCEv2 UDP link offloads: auto (GSO and GRO), none, gso, gro or gso,gro
`

// Flag registers --xdp, --xdp-mode and --pcap on fs.
func (o *Options) Flag(fs *flag.FlagSet) {
	fs.StringVar(&o.XDP, "xdp", "", "carry iWARP and RoCEv2 over an AF_XDP port on this netdev")
	fs.Func("xdp-mode", "XDP attach mode: auto, driver or generic", func(v string) error { return o.setMode(v) })
	fs.StringVar(&o.PCAP, "pcap", "", "record every packet the device sends and receives in this pcapng file")
	fs.Func("udp-offload", "RoCEv2 UDP link offloads: auto (GSO and GRO), none, gso, gro or gso,gro", func(v string) error {
		return o.Set("udp-offload", v)
	})
}

// Arg parses one of the flags at args[0] for a hand-written parser ("--xdp eth0",
// "--xdp=eth0", one or two dashes) and returns how many arguments it took: 0 when
// args[0] is none of them.
func (o *Options) Arg(args []string) (int, error) {
	if len(args) == 0 {
		return 0, nil
	}
	name, val, eq := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
	if !strings.HasPrefix(args[0], "-") || (name != "xdp" && name != "xdp-mode" && name != "pcap" && name != "udp-offload") {
		return 0, nil
	}
	n := 1
	if !eq {
		if len(args) < 2 {
			return 0, fmt.Errorf("--%s needs a value", name)
		}
		val, n = args[1], 2
	}
	if err := o.Set(name, val); err != nil {
		return 0, err
	}
	return n, nil
}

// Set sets the option named name ("xdp", "xdp-mode", "pcap" or "udp-offload") to val.
func (o *Options) Set(name, val string) error {
	switch name {
	case "udp-offload":
		if _, err := udpOptions(val); err != nil {
			return err
		}
		o.UDPOffload = val
	case "xdp":
		o.XDP = val
	case "pcap":
		o.PCAP = val
	case "xdp-mode":
		return o.setMode(val)
	default:
		return fmt.Errorf("unknown option --%s", name)
	}
	return nil
}

func (o *Options) setMode(v string) error {
	switch v {
	case "auto":
		o.XDPMode = afxdp.ModeAuto
	case "driver":
		o.XDPMode = afxdp.ModeDriver
	case "generic":
		o.XDPMode = afxdp.ModeGeneric
	default:
		return fmt.Errorf("--xdp-mode %q: want auto, driver or generic", v)
	}
	return nil
}

// udpOptions parses --udp-offload: nil for the automatic choice.
func udpOptions(v string) (*rocev2.UDPOptions, error) {
	if v == "" || v == "auto" {
		return nil, nil
	}
	var u rocev2.UDPOptions
	if v == "none" {
		return &u, nil
	}
	for _, f := range strings.Split(v, ",") {
		switch f {
		case "gso":
			u.GSO = true
		case "gro":
			u.GRO = true
		default:
			return nil, fmt.Errorf("--udp-offload %q: want auto, none, gso, gro or gso,gro", v)
		}
	}
	return &u, nil
}

// Host is the datapath and capture of one program.
type Host struct {
	o Options
	w *capture.Writer

	mu    sync.Mutex
	port  *afxdp.Port
	stack *netstack.Stack
	desc  string // the port as opened, for Summary
}

// Open creates the capture file; the AF_XDP port opens when a transport first needs it
// (it needs the transport's address).
func Open(o Options) (*Host, error) {
	h := &Host{o: o}
	if o.PCAP != "" {
		w, err := capture.Create(o.PCAP, nil)
		if err != nil {
			return nil, err
		}
		h.w = w
	}
	return h, nil
}

// Options are the options the Host was opened with.
func (h *Host) Options() Options { return h.o }

// Capture is the capture writer (nil without --pcap), for its Stats.
func (h *Host) Capture() *capture.Writer { return h.w }

// Port is the AF_XDP port (nil until a transport opened it, and without --xdp).
func (h *Host) Port() *afxdp.Port {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.port
}

// ErrOneAddress is returned when transports ask one AF_XDP port for two addresses.
var ErrOneAddress = errors.New("hostlink: the AF_XDP port serves one address")

// xdpPort opens the port for addr (unspecified or invalid: the netdev's first address,
// IPv4 first) and its TCP stack, once.
func (h *Host) xdpPort(addr netip.Addr) (*afxdp.Port, *netstack.Stack, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.port != nil {
		if addr.IsValid() && !addr.IsUnspecified() && addr.Unmap() != h.port.Addr() {
			return nil, nil, fmt.Errorf("%w: %v, asked for %v", ErrOneAddress, h.port.Addr(), addr)
		}
		return h.port, h.stack, nil
	}
	if !addr.IsValid() || addr.IsUnspecified() {
		a, err := NetdevAddr(h.o.XDP)
		if err != nil {
			return nil, nil, fmt.Errorf("--xdp: %w", err)
		}
		addr = a
	}
	in, err := netdev.Inspect(h.o.XDP)
	if err != nil {
		return nil, nil, fmt.Errorf("--xdp: %w", err)
	}
	po := netdev.Choose(in, netdev.Prefs{Mode: h.o.XDPMode}).Options(h.o.XDP)
	po.Addr = addr.Unmap()
	if h.w != nil {
		po.Tap = h.w // the frames as they are
	}
	p, err := afxdp.Open(po)
	if err != nil {
		return nil, nil, fmt.Errorf("--xdp %s: %w", h.o.XDP, err)
	}
	st, err := netstack.New(p, nil)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("--xdp %s: %w", h.o.XDP, err)
	}
	h.port, h.stack = p, st
	mode := "copy"
	if p.ZeroCopy() {
		mode = "zero-copy"
	}
	h.desc = fmt.Sprintf("AF_XDP on %s (%v): XDP %s mode, %s, multi-buffer %v, TX checksum metadata %v",
		h.o.XDP, p.Addr(), p.Mode(), mode, p.MultiBuffer(), p.TxChecksum())
	return p, st, nil
}

// NetdevAddr is the first address of the netdev that is not link-local, IPv4 preferred
// (the address --xdp and the daemon's -netdev serve).
func NetdevAddr(name string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netdev %s: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netdev %s: %w", name, err)
	}
	var first netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(ipn.IP)
			ip = ip.Unmap()
			if ip.IsLinkLocalUnicast() {
				continue
			}
			if ip.Is4() {
				return ip, nil
			}
			if !first.IsValid() {
				first = ip
			}
		}
	}
	if !first.IsValid() {
		return first, fmt.Errorf("netdev %s has no address", name)
	}
	return first, nil
}

// parseLocal takes the IP out of "ip", "ip:port" or "" (invalid).
func parseLocal(local string) netip.Addr {
	if ap, err := netip.ParseAddrPort(local); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(strings.Trim(local, "[]"))
	return a.Unmap()
}

// CM prepares the cm.Options of a transport on network at local (as cm.Open takes them)
// and returns the local address to open it at: with --xdp the port's (local may be ""
// then), else local. The transport closes the RoCEv2 link it is given.
func (h *Host) CM(network, local string, co *cm.Options) (string, error) {
	if h.o.XDP == "" {
		co.Capture = h.w
		if co.UDP == nil {
			co.UDP, _ = udpOptions(h.o.UDPOffload) // checked by Set
		}
		return local, nil
	}
	p, st, err := h.xdpPort(parseLocal(local))
	if err != nil {
		return "", err
	}
	switch network {
	case cm.IWARP:
		co.TCP = st
		return p.Addr().String(), nil
	case cm.RoCEv2:
		ap, err := netip.ParseAddrPort(local)
		if err != nil {
			ap = netip.AddrPortFrom(p.Addr(), 0)
		}
		l, err := xdp.New(xdp.Options{Port: p, Addr: netip.AddrPortFrom(p.Addr(), ap.Port())})
		if err != nil {
			return "", err
		}
		co.Link = l
		return l.LocalAddr().String(), nil
	}
	return local, nil
}

// IWARPConfig returns cfg (nil: iwarp.DefaultConfig()) for rnic/iwarp's Dial, with its
// Dial hook set to the AF_XDP port's TCP (from the device's address) and to the capture,
// as the options ask; cfg itself is not changed.
func (h *Host) IWARPConfig(dev *rnic.Device, cfg *iwarp.Config) (*iwarp.Config, error) {
	if cfg == nil {
		cfg = iwarp.DefaultConfig()
	}
	if h.o.XDP == "" && h.w == nil {
		return cfg, nil
	}
	c := *cfg
	if h.o.XDP != "" {
		_, st, err := h.xdpPort(parseLocal(dev.Config().LocalAddr))
		if err != nil {
			return nil, err
		}
		c.Dial = st.DialContext
		return &c, nil
	}
	c.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		d := net.Dialer{KeepAlive: -1} // rnic/iwarp sets keepalive per connection
		if la := dev.Config().LocalAddr; la != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(la)}
		}
		nc, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return capture.WrapConn(nc, h.w), nil
	}
	return &c, nil
}

// IWARPListen is rnic/iwarp's Listen through the options: on the AF_XDP port's TCP, or
// the kernel's with each connection recorded.
func (h *Host) IWARPListen(dev *rnic.Device, addr string, cfg *iwarp.Config) (*iwarp.Listener, error) {
	if h.o.XDP == "" && h.w == nil {
		return iwarp.Listen(dev, addr, cfg)
	}
	var ln net.Listener
	var err error
	if h.o.XDP != "" {
		var st *netstack.Stack
		if _, st, err = h.xdpPort(parseLocal(addr)); err != nil {
			return nil, err
		}
		ln, err = st.Listen("tcp", addr)
	} else {
		lc := net.ListenConfig{KeepAlive: -1}
		if ln, err = lc.Listen(context.Background(), "tcp", addr); err == nil {
			ln = capture.WrapListener(ln, h.w)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("iwarp: listen: %w", err)
	}
	return iwarp.Serve(dev, ln, cfg), nil
}

// RoCELink is the RoCEv2 link at ap: the AF_XDP link on the port, or a UDP socket
// (with udp's options) recorded by the capture.
func (h *Host) RoCELink(ap netip.AddrPort, udp *rocev2.UDPOptions) (rocev2.Link, error) {
	if h.o.XDP != "" {
		p, _, err := h.xdpPort(ap.Addr())
		if err != nil {
			return nil, err
		}
		return xdp.New(xdp.Options{Port: p, Addr: netip.AddrPortFrom(p.Addr(), ap.Port())})
	}
	if udp == nil {
		udp, _ = udpOptions(h.o.UDPOffload) // checked by Set
	}
	l, err := rocev2.ListenUDP(ap, udp)
	if err != nil {
		return nil, err
	}
	if h.w != nil {
		return capture.WrapLink(l, h.w), nil
	}
	return l, nil
}

// Close closes the TCP stack and the port (after the transports that use them) and
// finishes the capture file. It returns the capture's first write error.
func (h *Host) Close() error {
	h.mu.Lock()
	st, p := h.stack, h.port
	h.stack, h.port = nil, nil
	h.mu.Unlock()
	if st != nil {
		_ = st.Close()
	}
	if p != nil {
		_ = p.Close()
	}
	if h.w != nil {
		return h.w.Close()
	}
	return nil
}

// Summary is a one-line account for a program's log (also after Close): the AF_XDP
// datapath, if one was opened, and the capture's counts.
func (h *Host) Summary() string {
	var parts []string
	h.mu.Lock()
	if h.desc != "" {
		parts = append(parts, h.desc)
	}
	h.mu.Unlock()
	if h.w != nil {
		s := h.w.Stats()
		parts = append(parts, fmt.Sprintf("pcap %s: %d packets written, %d dropped", h.o.PCAP, s.Written, s.Dropped))
	}
	return strings.Join(parts, "; ")
}

// The process's Host: the tools' entry (tool.Main) and the daemon open one from their
// flags and make it the process's, and the places that open transports take it from
// Process. A program that never set one gets the kernel's sockets, uncaptured.
var process struct {
	sync.Mutex
	h *Host
}

// SetProcess makes h the process's Host (nil: none).
func SetProcess(h *Host) {
	process.Lock()
	process.h = h
	process.Unlock()
}

// Process returns the process's Host, or one with zero Options.
func Process() *Host {
	process.Lock()
	defer process.Unlock()
	if process.h == nil {
		return &Host{}
	}
	return process.h
}

// Enabled reports whether the options change anything.
func (o Options) Enabled() bool { return o.XDP != "" || o.PCAP != "" }

// Carrier is implemented by a tool's Options that carry these (tool.Main opens the
// process's Host from them).
type Carrier interface{ LinkOptions() Options }

// Main runs run with the process's Host opened from o (when o changes anything):
// afterwards it closes the Host and writes its Summary to stderr as "name: …". An
// error opening the Host is written there too and ends with status 1.
func Main(name string, o Options, stderr io.Writer, run func() int) int {
	if !o.Enabled() {
		return run()
	}
	h, err := Open(o)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	SetProcess(h)
	defer SetProcess(nil)
	code := run()
	if err := h.Close(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if code == 0 {
			code = 1
		}
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, h.Summary())
	return code
}
