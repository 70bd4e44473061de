package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// runTool is the process entry shared by the test tools (rping, perftest): it parses args,
// printing the error and the usage text with exit status 2 when they are bad; points the
// options at the process's stdout and stderr with setOut; and runs the tool with SIGINT
// cancelling its context, printing any error with exit status 1.
func runTool[O any](name string, args []string, parse func([]string) (O, error), usage func(io.Writer), setOut func(*O), run func(context.Context, O) error) int {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		usage(os.Stderr)
		return 2
	}
	setOut(&o)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// toolContext sets a nil *stdout or *stderr to io.Discard and, when timeout is positive,
// bounds ctx by it. The caller must call the returned cancel function.
func toolContext(ctx context.Context, stdout, stderr *io.Writer, timeout time.Duration) (context.Context, context.CancelFunc) {
	if *stdout == nil {
		*stdout = io.Discard
	}
	if *stderr == nil {
		*stderr = io.Discard
	}
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// parseDurationOpt parses the value v of the duration option --name; negative durations
// are rejected.
func parseDurationOpt(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid --%s %q", name, v)
	}
	return d, nil
}

// openToolDevice opens the device "softrnic0" for a tool. With useRoCE it takes the local
// address from localAddr, gives it to the device (the RoCEv2 ICRC covers it) and binds a
// RoCEv2 endpoint to it on UDP 4791. On error the device and endpoint made so far are
// still returned, for the caller's cleanup to close.
func openToolDevice(useRoCE bool, localAddr func() (netip.Addr, error)) (*rnic.Device, *rocev2.Endpoint, error) {
	devCfg := rnic.Config{Name: "softrnic0"}
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
	link, err := rocev2.ListenUDP(netip.AddrPortFrom(laddr, roce.UDPPort), nil)
	if err != nil {
		return dev, nil, fmt.Errorf("RoCEv2 UDP socket on %v: %w", laddr, err)
	}
	cfg := rocev2.DefaultConfig()
	cfg.PeerPort = roce.UDPPort // kernel peers listen on 4791 whatever their source port
	return dev, rocev2.NewEndpoint(dev, link, cfg), nil
}
