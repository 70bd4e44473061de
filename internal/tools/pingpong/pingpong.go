package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/roce"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "ibv_{rc,uc,ud,srq}_pingpong over RoCEv2 ([--uc|--ud|--srq] [-p port] [-g gid] [-s size] [-n iters] [host])"

// Mode is the example a run speaks.
type Mode int

// The examples.
const (
	RC  Mode = iota // ibv_rc_pingpong
	UC              // ibv_uc_pingpong
	UD              // ibv_ud_pingpong
	SRQ             // ibv_srq_pingpong
)

// String is the example's name.
func (m Mode) String() string {
	switch m {
	case UC:
		return "ibv_uc_pingpong"
	case UD:
		return "ibv_ud_pingpong"
	case SRQ:
		return "ibv_srq_pingpong"
	}
	return "ibv_rc_pingpong"
}

const (
	recvWRID = 1
	sendWRID = 2

	// DefaultPort is the examples' TCP port of the address exchange.
	DefaultPort = 18515
	// DefaultIdle is how long a run waits for a completion before it gives up.
	DefaultIdle = 60 * time.Second

	udQKey  = 0x11111111 // ud_pingpong's Q_Key
	maxQP   = 256        // srq_pingpong's MAX_QP: address messages each way
	defSize = 4096       // rc/uc/srq; ud: 1024
)

// Options are the examples' settings and softrnic's own (-a, -u, --timeout, --idle).
type Options struct {
	Mode     Mode
	Port     int    // -p: TCP port of the address exchange
	Dev      string // -d: a device a running softrnic daemon serves, attached to (tool.Open); "": an in-process device
	IBPort   int    // -i: port of the device (only 1)
	Size     int    // -s: message size
	MTU      int    // -m: path MTU in bytes (rc, uc, srq)
	RxDepth  int    // -r: receives posted at a time
	Iters    int    // -n: exchanges
	NumQP    int    // -q: QPs (srq)
	SL       int    // -l: service level (ignored)
	Events   bool   // -e: sleep on CQ events (softrnic always does)
	GIDIdx   int    // -g: local GID index (-1: none)
	Validate bool   // -c: validate the received buffer
	Peer     string // host to connect to; "" runs the server

	Local   string        // -a: local IP address of the RoCE link
	UDPPort int           // -u: UDP port of both ends (4791)
	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up without a completion for this long (0: never)

	// Listening, if set, is called once the server listens for the exchange.
	Listening func(net.Addr)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are the examples' defaults for mode m.
func DefaultOptions(m Mode) Options {
	o := Options{Mode: m, Port: DefaultPort, IBPort: 1, Size: defSize, MTU: 1024, RxDepth: 500,
		Iters: 1000, NumQP: 16, GIDIdx: -1, UDPPort: roce.UDPPort, Idle: DefaultIdle}
	if m == UD {
		o.Size = 1024
	}
	return o
}

var opts = append([]tool.Opt{
	{Short: 'p', Long: "port", Arg: true}, {Short: 'd', Long: "ib-dev", Arg: true}, {Short: 'i', Long: "ib-port", Arg: true},
	{Short: 's', Long: "size", Arg: true}, {Short: 'm', Long: "mtu", Arg: true}, {Short: 'r', Long: "rx-depth", Arg: true},
	{Short: 'n', Long: "iters", Arg: true}, {Short: 'l', Long: "sl", Arg: true}, {Short: 'e', Long: "events"},
	{Short: 'g', Long: "gid-idx", Arg: true}, {Short: 'c', Long: "chk"}, {Short: 'q', Long: "num-qp", Arg: true},
	{Short: 'o', Long: "odp"}, {Short: 'O', Long: "iodp"}, {Short: 'P', Long: "prefetch"},
	{Short: 'a', Arg: true}, {Short: 'u', Arg: true},
	{Long: "uc"}, {Long: "ud"}, {Long: "srq"}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true},
	{Short: 'h', Long: "help"}}, tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic pingpong [--uc|--ud|--srq] [options]          start a server and wait for connection
       softrnic pingpong [--uc|--ud|--srq] [options] <host>   connect to server at <host>
  as ibv_rc_pingpong (default), ibv_uc_pingpong (--uc), ibv_ud_pingpong (--ud) or
  ibv_srq_pingpong (--srq) over RoCEv2:
	-p, --port=<port>	listen on/connect to port <port> (default 18515)
	-d, --ib-dev=<dev>	name of the softrnic device
	-i, --ib-port=<port>	port of the device (only 1)
	-s, --size=<size>	size of message to exchange (default 4096; --ud 1024, at most the MTU)
	-m, --mtu=<size>	path MTU (default 1024; not --ud)
	-r, --rx-depth=<dep>	number of receives to post at a time (default 500)
	-n, --iters=<iters>	number of exchanges (default 1000; --srq: in total)
	-q, --num-qp=<num>	--srq: number of QPs (default 16, < 256; both sides the same)
	-l, --sl=<SL>		service level (ignored)
	-e, --events		sleep on CQ events (softrnic always does)
	-g, --gid-idx=<idx>	local port GID index: any index is the IPv4 GID of the local address
	-c, --chk		validate received buffer
	-o, -O, -P		on-demand paging options (accepted, no effect)
  softrnic:
	-a <ip>			local IP address of the RoCE link (default: the route to <host>)
	-u <port>		UDP port of the RoCE link at both ends (default 4791)
	--timeout <d>		give up after the duration d (default: never)
	--idle <d>		give up when no completion arrives for d (default 60s; 0: never)
`+hostlink.FlagUsage)
}

// ParseArgs builds Options from the examples' command line (getopt_long: options and the
// host in any order, long options, grouped flags).
func ParseArgs(args []string) (Options, error) {
	found, operands, err := tool.Getopt(args, opts)
	if err != nil {
		return Options{}, err
	}
	mode := RC
	for _, a := range found {
		switch a.Long {
		case "uc":
			mode = UC
		case "ud":
			mode = UD
		case "srq":
			mode = SRQ
		}
	}
	o := DefaultOptions(mode)
	for _, a := range found {
		if ok, err := tool.SetLink(&o.Link, a); ok { // --xdp, --pcap
			if err != nil {
				return o, err
			}
			continue
		}
		if err := o.set(a); err != nil {
			return o, err
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		o.Peer = operands[0]
	default:
		return o, fmt.Errorf("unexpected argument %q", operands[1])
	}
	return o, o.check()
}

func (o *Options) set(a tool.Arg) error {
	switch a.Short {
	case 'p':
		return tool.SetInt(&o.Port, a)
	case 'd':
		o.Dev = a.Value
	case 'i':
		return tool.SetInt(&o.IBPort, a)
	case 's':
		return tool.SetInt(&o.Size, a)
	case 'm':
		return tool.SetInt(&o.MTU, a)
	case 'r':
		return tool.SetInt(&o.RxDepth, a)
	case 'n':
		return tool.SetInt(&o.Iters, a)
	case 'q':
		return tool.SetInt(&o.NumQP, a)
	case 'l':
		return tool.SetInt(&o.SL, a)
	case 'e':
		o.Events = true
	case 'g':
		return tool.SetInt(&o.GIDIdx, a)
	case 'c':
		o.Validate = true
	case 'a':
		o.Local = a.Value
	case 'u':
		return tool.SetInt(&o.UDPPort, a)
	case 'h':
		return errHelp
	}
	switch a.Long {
	case "timeout", "idle":
		d, err := tool.ParseDuration(a.Long, a.Value)
		if err != nil {
			return err
		}
		if a.Long == "idle" {
			o.Idle = d
		} else {
			o.Timeout = d
		}
	}
	return nil
}

var errHelp = errors.New("help requested")

func (o *Options) check() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case o.IBPort != 1:
		return fmt.Errorf("invalid IB port %d: softrnic devices have port 1 only", o.IBPort)
	case o.Size < 1:
		return fmt.Errorf("invalid size %d", o.Size)
	case o.RxDepth < 1 || o.Iters < 1:
		return errors.New("rx depth and iterations must be positive")
	case o.UDPPort < 1 || o.UDPPort > 65535:
		return fmt.Errorf("invalid UDP port %d", o.UDPPort)
	case o.Mode == SRQ && o.NumQP >= maxQP:
		return fmt.Errorf("num_qp %d must be less than %d", o.NumQP, maxQP)
	case o.Mode == SRQ && o.NumQP < 1:
		return fmt.Errorf("invalid num_qp %d", o.NumQP)
	case o.Mode == SRQ && o.NumQP > o.RxDepth:
		return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", o.RxDepth, o.NumQP)
	}
	if m := roce.MTUFromBytes(o.MTU); !m.Valid() || m.Bytes() != o.MTU {
		return fmt.Errorf("invalid MTU %d (256, 512, 1024, 2048 or 4096)", o.MTU)
	}
	return nil
}

// Main is the "softrnic pingpong" command; like the examples it exits with status 1 on
// bad arguments too.
func Main(args []string) int {
	o, err := ParseArgs(args)
	if err != nil {
		if errors.Is(err, errHelp) {
			Usage(os.Stdout)
			return 0
		}
		fmt.Fprintf(os.Stderr, "pingpong: %v\n", err)
		Usage(os.Stderr)
		return 1
	}
	return hostlink.Main("pingpong", o.Link, os.Stderr, func() int { // --xdp, --pcap
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := Run(ctx, o, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	})
}

// Run runs one ping-pong in the role the options select, printing the addresses and the
// results to stdout.
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	r, err := newRun(&o, tool.Output(stdout))
	if err != nil {
		if r != nil {
			r.close()
		}
		return err
	}
	err = r.run(ctx)
	r.close()
	if err == nil && o.Peer == "" && o.Validate {
		r.checkPages()
	}
	return err
}
