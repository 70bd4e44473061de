// Package target is "softrnic target": a memory target as a process of its own — one
// registered region that peers RDMA READ and WRITE, on a device it opens with -d NAME
// (attached to the softrnic daemon serving it: its QPs numbered, steered and listed by the
// daemon, its RoCEv2 listener claimed there) or in-process without a daemon.
//
// It listens on -s (RoCEv2: the link's address; with -d, the device's) port -p (default
// 7471) and accepts every connection request with the region's 16-byte advertisement
// (rnic.RemoteBuffer, rping's struct rping_rdma_info) as the accept's private data, and an
// IRD of the initiator's ORD. It posts no receives: a peer that Sends gets a Terminate
// (iWARP) or RNR NAKs (RoCEv2). A connection's QP is destroyed when the connection ends.
// At most --max-conns connections at once; more are rejected and counted. Its accept
// loop, Server, is the daemon's built-in target (-target-mib) too. It prints one line when it listens ("target: listening on ADDR addr 0x…
// rkey 0x… len N") and, at the end (SIGINT, SIGTERM, --timeout), how many connections it
// served and refused.
package target

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "a memory target peers RDMA READ and WRITE, on a daemon's device or in-process: target [-d dev] [-s addr] [-p port] [--mib n] [--roce]"

// Defaults and bounds.
const (
	DefaultPort     = 7471
	DefaultMiB      = 16
	MaxMiB          = 4095 // the advertisement's length is 32 bits
	DefaultMaxConns = 1024
)

// Options are the target's settings.
type Options struct {
	Device   string        // -d: a daemon's device to attach to ("" in-process)
	Addr     string        // -s: listen address (RoCEv2 in-process: required, the link's)
	Port     int           // -p (0: any free port)
	RoCE     bool          // --roce: RoCEv2 instead of iWARP
	MiB      int           // --mib: region size
	MaxConns int           // --max-conns: connections at once
	CRC      bool          // --crc: iWARP: request MPA CRC32c
	Timeout  time.Duration // --timeout: serve this long (0: until interrupted)

	// Listening, if set, is called once the target listens, with its address and
	// advertisement.
	Listening func(net.Addr, rnic.RemoteBuffer)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are the target's defaults.
func DefaultOptions() Options {
	return Options{Port: DefaultPort, MiB: DefaultMiB, MaxConns: DefaultMaxConns}
}

var opts = append([]tool.Opt{{Short: 'd', Arg: true}, {Long: "dev", Arg: true}, {Short: 's', Arg: true}, {Short: 'p', Arg: true},
	{Long: "roce"}, {Long: "mib", Arg: true}, {Long: "max-conns", Arg: true}, {Long: "crc"}, {Long: "timeout", Arg: true}},
	tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, "usage: softrnic target\n\t[-d device]\t\tattach to the softrnic daemon serving the device (default: in-process)\n"+
		"\t[-s address]\t\tlisten address (RoCEv2 in-process: the link's IP)\n\t[-p port]\t\tport (default 7471)\n"+
		"\t[--roce]\t\tRoCEv2 (IB CM over UDP) instead of iWARP\n\t[--mib n]\t\tregion size in MiB (default 16)\n"+
		"\t[--max-conns n]\t\tconnections at once (default 1024; more are rejected)\n\t[--crc]\t\t\tiWARP: request MPA CRC32c\n"+
		"\t[--timeout d]\t\tserve for d (default: until interrupted)\n"+hostlink.FlagUsage)
}

// ParseArgs parses the command line.
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	num := func(a tool.Arg, lo, hi int) (int, error) {
		n, err := strconv.Atoi(a.Value)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("invalid %s %q (%d..%d)", a.Name(), a.Value, lo, hi)
		}
		return n, nil
	}
	operands, err := tool.Parse(args, opts, tool.Common{Link: &o.Link, Timeout: &o.Timeout}, func(a tool.Arg) (err error) {
		switch {
		case a.Short == 'd' || a.Long == "dev":
			o.Device = a.Value
		case a.Short == 's':
			o.Addr = a.Value
		case a.Short == 'p':
			o.Port, err = num(a, 0, 65535)
		case a.Long == "roce":
			o.RoCE = true
		case a.Long == "crc":
			o.CRC = true
		case a.Long == "mib":
			o.MiB, err = num(a, 1, MaxMiB)
		case a.Long == "max-conns":
			o.MaxConns, err = num(a, 1, 1<<20)
		}
		return err
	})
	if err == nil {
		err = tool.NoOperands(operands)
	}
	return o, err
}

// Main is the "softrnic target" command. Besides SIGINT, SIGTERM ends it (it is a
// service) with its closing line.
func Main(args []string) int {
	return tool.Main("target", args, ParseArgs, Usage, func(ctx context.Context, o Options, stdout, _ io.Writer) error {
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
		defer stop()
		return Run(ctx, o, stdout)
	})
}

// Stats are what a run did.
type Stats struct {
	Served, Refused, Failed uint64
}

// Run serves until ctx ends (or --timeout), printing its lines to stdout.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	out := tool.Output(stdout)
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	if o.MiB <= 0 {
		o.MiB = DefaultMiB
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	network := tool.NetworkOf(o.RoCE)
	var copts *cm.Options
	if !o.RoCE {
		copts = &cm.Options{IWARP: tool.IWARPConfig(o.CRC)}
	}
	dev, t, err := tool.Open(rnic.Config{Name: o.Device}, network, o.Addr, copts)
	if dev != nil {
		defer dev.Close()
	}
	if err != nil {
		return err
	}
	defer t.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(make([]byte, o.MiB<<20), rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	if err != nil {
		return err
	}
	s, err := NewServer(pd, mr, ServerConfig{MaxConns: o.MaxConns})
	if err != nil {
		return err
	}
	host := o.Addr // iWARP: the listen address, every address when ""
	if o.RoCE {
		host = "" // the transport's address (the link's, or the daemon device's)
	} else if host == "" {
		host = "0.0.0.0"
	}
	ln, err := t.Listen(net.JoinHostPort(host, strconv.Itoa(o.Port)))
	if err != nil {
		return err
	}
	adv := mr.RemoteBuffer(0, mr.Len())
	fmt.Fprintf(out, "target: listening on %s (%s) addr %#x rkey %#x len %d\n", ln.Addr(), network, adv.Addr, adv.RKey, adv.Len)
	if o.Listening != nil {
		o.Listening(ln.Addr(), adv)
	}
	_ = s.Serve(ctx, ln) // until ctx ends
	_ = ln.Close()
	s.Close()
	st := s.Stats()
	fmt.Fprintf(out, "target: %d connections served, %d refused, %d failed\n", st.Served, st.Refused, st.Failed)
	return nil
}
