package perftest

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic perftest <test> [options]            (server)
       softrnic perftest <test> [options] <server>   (client)
  tests (perftest 4.5 / version 6.06 protocol, either role):
	write, read, send, atomic       ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw
	write_lat, read_lat, send_lat   ib_write_lat, ib_read_lat, ib_send_lat
  perftest's options:
	-R, --rdma_cm		connect the data QPs with rdma_cm (always so over iWARP)
	-z, --comm_rdma_cm	exchange over rdma_cm, data QPs connected by hand (RoCEv2)
	-x, --gid-index n	GID index shown (softrnic has one GID: its IPv4 address)
	-d, --ib-dev name	name of the softrnic device
	-s, --size n		message size (K, M suffixes; default 65536, latency 2, atomic 8)
	-a, --all		run sizes 2 B ... 8 MiB (both sides need it)
	-n, --iters n		iterations per QP (default 5000 for write, else 1000)
	-D, --duration s	run s seconds instead of -n (-f, --margin: warm-up seconds)
	-p, --port n		port (default 18515)
	-q, --qp n		number of QPs (bandwidth tests)
	-b, --bidirectional	bidirectional bandwidth
	-t, --tx-depth n	send queue depth (default 128, latency 1)
	-r, --rx-depth n	receive depth of send tests (default 512)
	-Q, --cq-mod n		completion every n work requests (default 100; 1 above 8 KiB)
	-o, --outs n		outstanding reads/atomics (default 128)
	-A, --atomic_type t	CMP_AND_SWAP or FETCH_AND_ADD (default)
	-m, --mtu n		RoCEv2 MTU: 256 ... 4096
	-u, --qp-timeout n	RoCEv2 ACK timeout exponent (default 14)
	-N, --noPeak		do not compute the peak bandwidth
	-U, -H			latency tests: print every sample unsorted / sorted
	--report_gbits		report Gb/s instead of MB/s
	--retry_count n		transport and RNR retries (default 7)
	-e, --events		latency tests (iWARP): wait for completions blocked instead of
				polling (without it: --wait-drives 10ms --spin 200us unless given)
	-F, -c RC, -i 1, --disable_pcie_relaxed	accepted (no effect)
  softrnic's options:
	--roce			RoCEv2 (IB transport over UDP 4791, as perftest on rxe) instead of iWARP
	--bind addr		server: listen on this address (RoCEv2: the link's address,
				default the host's first IPv4 address)
	--crc			request MPA CRC32c (iWARP; siw follows the request)
	--wait-drives d		a wait for a completion, or write_lat's for the peer's Write,
				reads the socket itself, and keeps it for d between waits
				(rnic.Config.WaitDrivesReceive, QP.DriveReceive; RoCEv2: while
				the test's one QP is the only one on its endpoint)
	--spin d		iWARP, with --wait-drives: a receive busy-polls its empty socket for d
				before it blocks (rnic.Config.ReceiveSpin; a CPU spins meanwhile)
	--timeout d		give up after the duration d (e.g. 60s)
	--idle d		give up after d without a message or data from the peer (default 2m)
`+hostlink.FlagUsage)
}

var opts = append([]tool.Opt{
	{Short: 'p', Long: "port", Arg: true}, {Short: 'd', Long: "ib-dev", Arg: true}, {Short: 'i', Long: "ib-port", Arg: true},
	{Short: 'm', Long: "mtu", Arg: true}, {Short: 's', Long: "size", Arg: true}, {Short: 'n', Long: "iters", Arg: true},
	{Short: 't', Long: "tx-depth", Arg: true}, {Short: 'u', Long: "qp-timeout", Arg: true}, {Short: 'S', Long: "sl", Arg: true},
	{Short: 'x', Long: "gid-index", Arg: true}, {Short: 'a', Long: "all"}, {Short: 'F', Long: "CPU-freq"},
	{Short: 'c', Long: "connection", Arg: true}, {Short: 'q', Long: "qp", Arg: true}, {Short: 'e', Long: "events"},
	{Short: 'o', Long: "outs", Arg: true}, {Short: 'z', Long: "comm_rdma_cm"}, {Short: 'R', Long: "rdma_cm"},
	{Short: 'r', Long: "rx-depth", Arg: true}, {Short: 'b', Long: "bidirectional"}, {Short: 'Q', Long: "cq-mod", Arg: true},
	{Short: 'N', Long: "noPeak"}, {Short: 'V', Long: "version"}, {Short: 'C', Long: "report-cycles"},
	{Short: 'H', Long: "report-histogrm"}, {Short: 'U', Long: "report-unsorted"}, {Short: 'A', Long: "atomic_type", Arg: true},
	{Short: 'D', Long: "duration", Arg: true}, {Short: 'f', Long: "margin", Arg: true}, {Short: 'h', Long: "help"},
	{Short: 'I', Long: "inline_size", Arg: true}, {Short: 'l', Long: "post_list", Arg: true},
	{Long: "report_gbits"}, {Long: "retry_count", Arg: true}, {Long: "disable_pcie_relaxed"}, {Long: "dont_xchg_versions"},
	{Long: "use-srq"}, {Long: "run_infinitely"}, {Long: "ipv6"},
	{Long: "roce"}, {Long: "bind", Arg: true}, {Long: "crc"}, {Long: "wait-drives", Arg: true}, {Long: "spin", Arg: true}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, tool.LinkOpts...)

// errHelp and errVersion ask Main to print the usage or the version (-h, -V).
var (
	errHelp    = errors.New("usage")
	errVersion = errors.New("version")
)

// ParseArgs parses perftest's command line: the test first, then getopt_long options and,
// for a client, the server's address, in any order.
func ParseArgs(args []string) (Options, error) {
	if len(args) == 0 {
		return Options{}, errors.New("missing test: write, read, send, atomic, write_lat, read_lat or send_lat")
	}
	var (
		v   Verb
		lat bool
	)
	switch strings.TrimPrefix(args[0], "ib_") {
	case "write", "write_bw":
		v = Write
	case "read", "read_bw":
		v = Read
	case "send", "send_bw":
		v = Send
	case "atomic", "atomic_bw":
		v = Atomic
	case "write_lat":
		v, lat = Write, true
	case "read_lat":
		v, lat = Read, true
	case "send_lat":
		v, lat = Send, true
	case "atomic_lat":
		return Options{}, errors.New("atomic_lat is not supported (atomic bandwidth is: atomic)")
	default:
		return Options{}, fmt.Errorf("unknown test %q (want write, read, send, atomic, write_lat, read_lat or send_lat)", args[0])
	}
	o := Defaults(v, lat)
	operands, err := tool.Parse(args[1:], opts, tool.Common{Link: &o.Link, Timeout: &o.Timeout, Idle: &o.Idle}, o.set)
	if err != nil {
		return o, err
	}
	switch len(operands) {
	case 0:
	case 1:
		o.Peer = operands[0]
	default:
		return o, fmt.Errorf("unexpected argument %q", operands[1])
	}
	o.pollDefaults()
	o.parsing = true
	err = o.normalize()
	o.parsing = false
	return o, err
}

func (o *Options) set(a tool.Arg) error {
	inRange := func(p *int, lo, hi int, what string) error {
		n, err := tool.Int(a)
		if err != nil {
			return err
		}
		if n < lo || n > hi {
			return fmt.Errorf("%s should be between %d and %d", what, lo, hi)
		}
		*p = n
		return nil
	}
	switch a.Short {
	case 'p':
		return inRange(&o.Port, 0, 65535, "port")
	case 'd':
		o.Dev = a.Value
	case 'i':
		if n, err := tool.Int(a); err != nil || n != 1 {
			return errors.New("softrnic devices have one port: -i 1")
		}
	case 'm':
		return inRange(&o.MTU, 256, 4096, "MTU")
	case 's':
		return o.setSize(a)
	case 'n':
		return inRange(&o.Iters, MinIters, MaxIters, "Iteration num")
	case 't':
		return inRange(&o.TxDepth, 1, 15000, "Tx depth")
	case 'u':
		return inRange(&o.Timeout8, 0, 31, "QP Timeout")
	case 'S':
		return inRange(new(int), 0, 15, "Service Level")
	case 'x':
		return inRange(&o.GIDIndex, 0, 64, "Gid index")
	case 'a':
		o.All = true
	case 'e':
		o.Events = true
	case 'F':
	case 'c':
		if a.Value != "RC" {
			return fmt.Errorf("connection type %s is not supported (only RC)", a.Value)
		}
	case 'q':
		if o.Latency {
			return errors.New("Multiple QPs only available on bw tests")
		}
		return inRange(&o.QPs, 1, MaxQPs, "num of Qps")
	case 'o':
		if o.Verb != Read && o.Verb != Atomic {
			return errors.New("Setting Outstanding reads only available on READ verb")
		}
		return inRange(&o.OutReads, 1, 1<<30, "Outstanding Reads")
	case 'z':
		o.CommCM = true
	case 'R':
		o.RDMACM = true
	case 'r':
		if err := inRange(&o.RxDepth, 1, 16384, "Rx depth"); err != nil {
			return err
		}
		if o.Verb != Send && o.RxDepth > 1 {
			return errors.New("On RDMA verbs rx depth can be only 1")
		}
	case 'b':
		if o.Latency {
			return errors.New("Bidirectional is only available in BW test")
		}
		o.Bidir = true
	case 'Q':
		o.cqModSet = true
		return inRange(&o.CQMod, 1, 1024, "CQ moderation")
	case 'N':
		if o.Latency {
			return errors.New("NoPeak only valid for BW tests")
		}
		o.NoPeak = true
	case 'V':
		return errVersion
	case 'C':
		return errors.New("-C (report cycles) is not supported: softrnic reports in microseconds")
	case 'H':
		o.Histo = true
	case 'U':
		o.Unsorted = true
	case 'A':
		if o.Verb != Atomic {
			return errors.New("You are not running the atomic_lat/bw test! To change the atomic action type, you must run one of the atomic tests")
		}
		switch a.Value {
		case "CMP_AND_SWAP":
			o.Atomic = CmpSwap
		case "FETCH_AND_ADD":
			o.Atomic = FetchAdd
		default:
			return errors.New("Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}")
		}
	case 'D':
		return inRange(&o.Duration, 1, 1<<30, "Duration period")
	case 'f':
		return inRange(&o.Margin, 0, 1<<30, "Margin")
	case 'h':
		return errHelp
	case 'I', 'l':
		return fmt.Errorf("%s is not supported", a.Name())
	}
	switch a.Long {
	case "report_gbits":
		o.Gbits = true
	case "retry_count":
		return inRange(&o.Retry, 0, 7, "retry count")
	case "disable_pcie_relaxed":
		o.NoPCIeRO = true
	case "dont_xchg_versions":
		// perftest 4.5 then reads an empty peer version and always exits
		return errors.New("--dont_xchg_versions: perftest 4.5 cannot run without the version exchange")
	case "use-srq", "run_infinitely", "ipv6":
		return fmt.Errorf("--%s is not supported", a.Long)
	case "roce":
		o.RoCE = true
	case "crc":
		o.CRC = true
	case "wait-drives":
		d, err := tool.ParseDuration(a.Long, a.Value)
		if err != nil {
			return err
		}
		o.WaitDrives, o.driveSet = d, true
	case "spin":
		d, err := tool.ParseDuration(a.Long, a.Value)
		if err != nil {
			return err
		}
		o.Spin, o.spinSet = d, true
	case "bind":
		o.Bind = a.Value
	}
	return nil
}

// pollDefaults makes an iWARP latency test run without -e poll as perftest does
// (PollHold, PollSpin), keeping what --wait-drives and --spin gave. RoCEv2 tests and
// bandwidth tests wait as with -e: a RoCEv2 wait that runs the receive defers its ACKs
// (rnic.Config.WaitDrivesReceive), and a bandwidth test's completions mostly come from
// its sender, which a wait running the receive would have to be kicked out of the socket
// for.
func (o *Options) pollDefaults() {
	if !o.Latency || o.Events || o.RoCE {
		return
	}
	if !o.driveSet {
		o.WaitDrives = PollHold
	}
	if !o.spinSet {
		o.Spin = PollSpin
	}
}

// setSize parses -s: a number with an optional K or M suffix.
func (o *Options) setSize(a tool.Arg) error {
	v, factor := a.Value, 1
	switch {
	case strings.HasSuffix(v, "K"):
		v, factor = v[:len(v)-1], 1024
	case strings.HasSuffix(v, "M"):
		v, factor = v[:len(v)-1], 1024*1024
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil || n < 1 || n*int64(factor) > MaxSize-1 {
		return fmt.Errorf("Message Size should be between 1 and %d", MaxSize-1)
	}
	o.Size, o.sizeSet = int(n)*factor, true
	return nil
}

// normalize applies perftest's force_dependecies and refuses what softrnic or the
// protocol cannot do, each with a one-line reason. Applying it twice changes nothing.
func (o *Options) normalize() error {
	switch {
	case o.Verb < Write || o.Verb > Atomic:
		return fmt.Errorf("unknown verb %d", o.Verb)
	case o.Size < 1 || o.Size > MaxSize-1:
		return fmt.Errorf("Message Size should be between 1 and %d", MaxSize-1)
	case o.Duration == 0 && (o.Iters < MinIters || o.Iters > MaxIters):
		return fmt.Errorf("Iteration num should be between %d and %d", MinIters, int(MaxIters))
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case o.QPs < 1 || o.QPs > MaxQPs:
		return fmt.Errorf("num of Qps should be between 1 and %d", MaxQPs)
	case o.Latency && o.QPs > 1:
		return errors.New("Multiple QPs only available on bw tests")
	case o.Latency && o.Bidir:
		return errors.New("Bidirectional is only available in BW test")
	case o.TxDepth < 1 || o.RxDepth < 1 || o.CQMod < 1:
		return errors.New("queue depths and CQ moderation must be positive")
	case o.Verb == Atomic && (o.All || o.Size != defSizeAtomic):
		return errors.New("Message size cannot be changed for Atomic tests")
	case o.Duration > 0 && o.All:
		return errors.New("Duration mode currently doesn't support running on all sizes.")
	}
	if !o.parsing {
		if err := o.supported(); err != nil {
			return err
		}
	}
	if o.MTU != 0 && o.MTU&(o.MTU-1) != 0 {
		return fmt.Errorf("invalid MTU %d (256, 512, 1024, 2048 or 4096)", o.MTU)
	}
	if !o.RoCE {
		o.RDMACM = true // iWARP QPs connect through rdma_cm only
	}
	if o.Duration == 0 {
		o.TxDepth = min(o.TxDepth, o.Iters)
		if o.Verb == Send {
			o.RxDepth = min(o.RxDepth, o.Iters)
		}
	}
	if o.Size > cqModLimit && !o.All && !o.cqModSet {
		o.CQMod = 1
	}
	o.CQMod = min(o.CQMod, o.TxDepth)
	if o.Verb == Send && o.RxDepth%2 == 1 && !o.All {
		o.RxDepth++ // perftest's workaround for odd receive depths
	}
	if o.Verb == Read || o.Verb == Atomic {
		if o.OutReads == 0 || o.OutReads > deviceMaxReads {
			o.OutReads = deviceMaxReads
		}
	} else {
		o.OutReads = 1
	}
	if o.Duration > 0 {
		if o.Margin < 0 {
			o.Margin = o.Duration / 4
		}
		if o.Duration <= 2*o.Margin {
			return errors.New("please check that DURATION > 2*MARGIN")
		}
	}
	return nil
}

// supported refuses, with a one-line reason, what the network cannot do. ParseArgs leaves
// it to Run, so that the command exits 1 with the reason alone (not a usage error).
func (o *Options) supported() error {
	switch {
	case o.Verb == Atomic && !o.RoCE:
		return errors.New("atomic: iWARP has no atomics (siw implements none; use --roce)")
	case o.RoCE && o.CRC:
		return errors.New("--crc is an MPA (iWARP) option")
	case o.RoCE && o.Spin > 0:
		return errors.New("--spin is an iWARP option (a RoCEv2 receive does not busy-poll)")
	case o.Spin > 0 && o.WaitDrives <= 0:
		// the connection's goroutine would spin and still have to wake the waiting one
		return errors.New("--spin needs --wait-drives (iWARP)")
	case !o.RoCE && o.MTU != 0:
		return errors.New("-m: the MTU of iWARP is the TCP connection's")
	case o.Verb == Send && !o.RoCE && o.RxDepth < 3:
		// iWARP Send tests grant credits every rx_depth/3 receives: perftest divides by zero
		return errors.New("Send over iWARP needs -r 3 or more (perftest's credits are sent every rx-depth/3 receives)")
	}
	return nil
}

// noPeak reports whether the peak bandwidth is not computed (and printed as 0.00): -N,
// -D, a Send server (not bidirectional), or more than 20000 iterations.
func (o *Options) noPeak() bool {
	return o.NoPeak || o.Duration > 0 || (o.Verb == Send && o.Peer == "" && !o.Bidir) ||
		(o.Duration == 0 && o.Iters > noPeakIters && !o.Latency)
}

// iwarp reports whether the test runs over iWARP.
func (o *Options) iwarp() bool { return !o.RoCE }

// commCM reports whether the exchange runs over an rdma_cm connection (-R or -z).
func (o *Options) commCM() bool { return o.RDMACM || o.CommCM }
