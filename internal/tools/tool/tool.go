// Package tool holds what the softrnic test tools (rping, perftest, pingpong, cmatose,
// rdma-server/-client, udaddy, demo, stat) share: the process entry that parses arguments
// and runs a tool under SIGINT, getopt_long-style parsing, output and timeout set-up,
// duration options, and opening a device attached to a network through rnic/cm.
//
// Each tool is a package under internal/tools with a typed Options struct, a ParseArgs that
// builds it from the command line, and Run(ctx, Options, stdout, stderr); cmd/softrnic
// only names them.
package tool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/roce"
)

// DefaultDevice is the name a tool gives the device it opens.
const DefaultDevice = "softrnic0"

// Main is the process entry of a tool: it parses args, printing the error and the usage
// text with exit status 2 when they are bad (status 0 for -h when the parser is a
// flag.FlagSet's); runs the tool on the process's stdout and stderr with SIGINT
// cancelling its context; and prints any error with exit status 1 (only the status for
// an error marked Reported).
func Main[O any](name string, args []string, parse func([]string) (O, error), usage func(io.Writer),
	run func(ctx context.Context, o O, stdout, stderr io.Writer) error) int {
	o, err := parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		if usage != nil {
			usage(os.Stderr)
		}
		return 2
	}
	var lo hostlink.Options // --xdp, --pcap: the process's datapath and capture
	if lc, ok := any(o).(hostlink.Carrier); ok {
		lo = lc.LinkOptions()
	}
	return hostlink.Main(name, lo, os.Stderr, func() int {
		ctx, stop := SignalContext()
		defer stop()
		if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
			if !errors.As(err, new(reportedError)) {
				fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			}
			return 1
		}
		return 0
	})
}

// Reported marks err (nil stays nil) as one the tool has printed already, in the words of
// the C tool it imitates: Main then only sets the exit status.
func Reported(err error) error {
	if err == nil {
		return nil
	}
	return reportedError{err}
}

type reportedError struct{ error }

func (e reportedError) Unwrap() error { return e.error }

// ReturnStatus ends a run of ucmatose or udaddy as they end theirs: the error (as
// "name: err"), "test complete" and "return status 0" or 1. It returns err.
func ReturnStatus(out io.Writer, name string, err error) error {
	status := 0
	if err != nil {
		fmt.Fprintf(out, "%s: %v\n", name, err)
		status = 1
	}
	fmt.Fprintf(out, "test complete\n")
	fmt.Fprintf(out, "return status %d\n", status)
	return err
}

// LinkOpts are the options of the process's datapath and capture (--xdp, --xdp-mode,
// --pcap; internal/hostlink) for a tool's Getopt table; SetLink takes their values.
var LinkOpts = []Opt{{Long: "xdp", Arg: true}, {Long: "xdp-mode", Arg: true}, {Long: "pcap", Arg: true}, {Long: "udp-offload", Arg: true}}

// SetLink stores a found option into l when it is one of LinkOpts, reporting whether it was.
func SetLink(l *hostlink.Options, a Arg) (bool, error) {
	switch a.Long {
	case "xdp", "xdp-mode", "pcap", "udp-offload":
		return true, l.Set(a.Long, a.Value)
	}
	return false, nil
}

// Output returns w, or io.Discard when w is nil.
func Output(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// WithTimeout bounds ctx by timeout when it is positive. The caller must call the
// returned cancel function.
func WithTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// ParseDuration parses the value v of the duration option --name; negative durations are
// rejected.
func ParseDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid --%s %q", name, v)
	}
	return d, nil
}

// Open opens a device configured by dev, named dev.Name (DefaultDevice when ""), and
// attaches it through the connection manager to network (cm.IWARP or cm.RoCEv2) at local, an IP (the address
// listeners bind; "" for the transport's default) or, for RoCEv2, "ip" or "ip:udpport":
// the address of the RoCE link (required; the ICRC covers it; UDP 4791 by default). On
// error the device made so far is still returned, for the caller's cleanup to close.
//
// A device name the user gave (-d NAME; "" means none) that a running softrnic daemon
// serves is attached to (package host, the daemon's socket at $SOFTRNIC_SOCK or
// /run/softrnic/NAME.sock): over RoCEv2 the transport is the device's, at its address
// (local is not used); over iWARP the transport runs over the kernel's TCP at local as
// without a daemon, its QPs numbered and listed by the daemon. Without a daemon the
// device is in-process as for "".
//
// The rest of dev applies to an in-process device only (a daemon's device is the daemon's).
func Open(dev rnic.Config, network, local string, o *cm.Options) (*rnic.Device, *cm.Transport, error) {
	if o == nil {
		o = &cm.Options{}
	}
	if dev.Name != "" && hostlink.Process().Options().XDP == "" {
		d, err := host.Open(dev.Name, &host.Options{CM: o.CM, RoCE: o.RoCE})
		switch {
		case err == nil && network == cm.RoCEv2:
			return d.RNIC(), d.Transport(), nil
		case err == nil:
			t, err := cm.Open(d.RNIC(), network, local, o)
			return d.RNIC(), t, err
		case !errors.Is(err, host.ErrNoDaemon):
			return nil, nil, err
		}
	}
	if dev.Name == "" {
		dev.Name = DefaultDevice
	}
	if local != "" {
		ip := local
		if ap, err := netip.ParseAddrPort(local); err == nil {
			ip = ap.Addr().Unmap().String()
		}
		dev.LocalAddr = ip
	} else if network == cm.RoCEv2 {
		return nil, nil, errors.New("RoCEv2 needs a local IP address")
	}
	d, err := rnic.Open(dev)
	if err != nil {
		return d, nil, err
	}
	// --xdp: the transport runs on the process's AF_XDP port; --pcap: it is recorded
	if local, err = hostlink.Process().CM(network, local, o); err != nil {
		return d, nil, err
	}
	t, err := cm.Open(d, network, local, o)
	if err != nil {
		return d, nil, err
	}
	return d, t, nil
}

// LocalIP picks a tool's local IP address: bind when given (an IP literal, named what in
// errors), else the route's source towards peer (when given), else the host's first
// non-loopback IPv4 address, else 127.0.0.1.
func LocalIP(what, bind, peer string) (netip.Addr, error) {
	if bind != "" {
		return ParseIP(what, bind)
	}
	if peer != "" {
		return RouteSource(peer, roce.UDPPort)
	}
	ifs, _ := net.InterfaceAddrs()
	for _, ia := range ifs {
		if pn, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(pn.IP); ok && a.Unmap().Is4() && !a.IsLoopback() {
				return a.Unmap(), nil
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
}

// RouteSource returns the local address the kernel would use to send UDP to host:port
// (no packet is sent: connecting a UDP socket only picks the route).
func RouteSource(host string, port int) (netip.Addr, error) {
	c, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// ParseIP parses an IP literal (an IPv4-mapped IPv6 address is unmapped); what names the
// option goes into the error.
func ParseIP(what, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%s must be an IP address: %w", what, err)
	}
	return a.Unmap(), nil
}

// IBVStatus returns the ibv_wc_status value and ibv_wc_status_str text of st,
// for tools that print completion errors the way rdma-core's do.
func IBVStatus(st rnic.Status) (int, string) {
	switch st {
	case rnic.StatusSuccess:
		return 0, "success"
	case rnic.StatusLocLenErr:
		return 1, "local length error"
	case rnic.StatusLocQPOpErr:
		return 2, "local QP operation error"
	case rnic.StatusLocProtErr:
		return 4, "local protection error"
	case rnic.StatusWRFlushErr:
		return 5, "Work Request Flushed Error"
	case rnic.StatusMWBindErr:
		return 6, "memory bind operation error"
	case rnic.StatusBadRespErr:
		return 7, "bad response error"
	case rnic.StatusLocAccessErr:
		return 8, "local access error"
	case rnic.StatusRemInvReqErr:
		return 9, "remote invalid request error"
	case rnic.StatusRemAccessErr:
		return 10, "remote access error"
	case rnic.StatusRemOpErr:
		return 11, "remote operation error"
	case rnic.StatusRetryExcErr:
		return 12, "transport retry counter exceeded"
	case rnic.StatusRNRRetryExcErr:
		return 13, "RNR retry counter exceeded"
	case rnic.StatusRemAbortErr:
		return 16, "operation aborted"
	case rnic.StatusFatalErr:
		return 19, "fatal error"
	}
	return 21, "general error"
}

// Watchdog ends a context with a cause when nothing has happened for a while: the
// tools' bound on waits for a peer that may never answer. Kick it on every sign of
// progress.
type Watchdog struct {
	t *time.Timer
	d time.Duration
}

// NewWatchdog returns ctx ended with cause after d without a Kick (never for d == 0) and
// a stop function the caller must call.
func NewWatchdog(ctx context.Context, d time.Duration, cause error) (context.Context, *Watchdog, func()) {
	if d <= 0 {
		return ctx, &Watchdog{}, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &Watchdog{d: d, t: time.AfterFunc(d, func() { cancel(cause) })}
	return ctx, w, func() { w.t.Stop(); cancel(nil) }
}

// Kick restarts the watchdog's period.
func (w *Watchdog) Kick() {
	if w.t != nil {
		w.t.Reset(w.d)
	}
}

// IWARPConfig is the MPA configuration of the tools that dial softrnic or siw peers
// (perftest, cmatose, rdma-client): rnic/iwarp's default, MPA rev 2 with the IRD/ORD word
// and peer-to-peer mode with an RTR, but CRC only when asked (siw's default is none).
// The RTR makes the initiator's first FPDU, so that a softrnic responder, which may send
// nothing before it (RFC 5044 §7.1.2 rule 4), can serve protocols whose server speaks
// first; a responder follows the initiator's choice (siw asks for the client-server
// model).
func IWARPConfig(crc bool) *iwarp.Config {
	c := iwarp.DefaultConfig()
	c.MPA.CRC = crc
	return c
}

// NetworkOf names the network a tool runs on: cm.RoCEv2 with roce, else cm.IWARP.
func NetworkOf(roce bool) string {
	if roce {
		return cm.RoCEv2
	}
	return cm.IWARP
}

// OpenCM opens a device on the network for a tool of the rdma_cm examples: over RoCEv2
// the link's address is bind, else the route towards peer, else the host's first IPv4
// address; over iWARP listeners bind bind (every address when "").
func OpenCM(roce bool, bind, peer string) (*rnic.Device, *cm.Transport, error) {
	if !roce {
		local := ""
		if bind != "" {
			a, err := ParseIP("bind address", bind)
			if err != nil {
				return nil, nil, err
			}
			local = a.String()
		}
		return Open(rnic.Config{}, cm.IWARP, local, &cm.Options{IWARP: IWARPConfig(false)})
	}
	local, err := LocalIP("bind address", bind, peer)
	if err != nil {
		return nil, nil, err
	}
	return Open(rnic.Config{}, cm.RoCEv2, local.String(), nil)
}

// SignalContext returns a context that SIGINT ends, for a tool's Main.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

// Cause returns ctx's cancellation cause when ctx has ended (a timeout, an interrupt, a
// watchdog), else err.
func Cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
			return fmt.Errorf("%w (%v)", c, err)
		}
	}
	return err
}
