// Package tool holds what the softrnic test tools (rping, perftest, pingpong, demo, stat)
// share: the process entry that parses arguments and runs a tool under SIGINT, output and
// timeout set-up, duration options, and opening a device with an optional RoCEv2 endpoint.
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

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// DefaultDevice is the name a tool gives the device it opens.
const DefaultDevice = "softrnic0"

// Main is the process entry of a tool: it parses args, printing the error and the usage
// text with exit status 2 when they are bad (status 0 for -h when the parser is a
// flag.FlagSet's); runs the tool on the process's stdout and stderr with SIGINT
// cancelling its context; and prints any error with exit status 1.
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
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			return 1
		}
		return 0
	})
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

// OpenDevice opens the device DefaultDevice for a tool. With useRoCE it takes the local
// address from localAddr, gives it to the device (the RoCEv2 ICRC covers it) and binds a
// RoCEv2 endpoint to it on UDP 4791. On error the device and endpoint made so far are
// still returned, for the caller's cleanup to close.
func OpenDevice(useRoCE bool, localAddr func() (netip.Addr, error)) (*rnic.Device, *rocev2.Endpoint, error) {
	devCfg := rnic.Config{Name: DefaultDevice}
	var laddr netip.Addr
	if useRoCE {
		var err error
		if laddr, err = localAddr(); err != nil {
			return nil, nil, err
		}
		devCfg.LocalAddr = laddr.String()
	}
	dev, err := rnic.Open(devCfg)
	if err != nil {
		return dev, nil, err
	}
	if !useRoCE {
		return dev, nil, nil
	}
	link, err := hostlink.Process().RoCELink(netip.AddrPortFrom(laddr, roce.UDPPort), nil)
	if err != nil {
		return dev, nil, fmt.Errorf("RoCEv2 UDP socket on %v: %w", laddr, err)
	}
	// kernel peers send from entropy ports and listen on 4791: the endpoint answers them
	// there (rnic/rocev2.Addr)
	return dev, rocev2.NewEndpoint(dev, link, nil), nil
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
