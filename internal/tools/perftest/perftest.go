package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "perftest ib_{write,read,send,atomic}_bw and ib_{write,read,send}_lat over iWARP or RoCEv2: perftest <test> [options] [server]"

// Verb is the operation a test measures (perftest's VerbType).
type Verb int

// The verbs.
const (
	Write Verb = iota
	Read
	Send
	Atomic
)

// String is perftest's name of the verb (testsStr).
func (v Verb) String() string {
	switch v {
	case Write:
		return "RDMA_Write"
	case Read:
		return "RDMA_Read"
	case Atomic:
		return "Atomic"
	}
	return "Send"
}

// AtomicType is ib_atomic_bw's -A.
type AtomicType int

// The atomic operations (perftest's atomicTypesStr order).
const (
	CmpSwap  AtomicType = iota // CMP_AND_SWAP: compare 0, swap 0
	FetchAdd                   // FETCH_AND_ADD: add 1 (the default)
)

// String is perftest's name of the operation.
func (a AtomicType) String() string {
	if a == CmpSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// perftest 4.5's defaults and limits (perftest_parameters.h).
const (
	DefaultPort = 18515   // DEF_PORT
	DefaultSize = 65536   // DEF_SIZE_BW
	MinIters    = 5       // MIN_ITER
	MaxIters    = 1e8     // MAX_ITER
	MaxSize     = 1 << 31 // -s is limited to UINT_MAX/2
	MaxQPs      = 16384   // MAX_QP_NUM
	AllMaxSize  = 1 << 23 // -a: 2 B … 8 MiB (MAX_SIZE)
	DefaultIdle = 2 * time.Minute

	defSizeLat    = 2    // DEF_SIZE_LAT
	defSizeAtomic = 8    // DEF_SIZE_ATOMIC
	defIters      = 1000 // DEF_ITERS
	defItersWB    = 5000 // DEF_ITERS_WB (write BW)
	defTxBW       = 128  // DEF_TX_BW
	defTxLat      = 1    // DEF_TX_LAT
	defRxSend     = 512  // DEF_RX_SEND
	defCQMod      = 100  // DEF_CQ_MOD
	defRetryCount = 7    // DEF_RETRY_COUNT
	defQPTimeout  = 14   // DEF_QP_TIME
	cqModLimit    = 8192 // MSG_SIZE_CQ_MOD_LIMIT: larger messages disable CQ moderation
	noPeakIters   = 20000
)

// Options are a test's settings. Start from Defaults (the command line's defaults for a
// test); Run applies perftest's dependencies between them (force_dependecies).
type Options struct {
	Verb     Verb
	Latency  bool       // a latency test (ib_*_lat) instead of a bandwidth test
	Atomic   AtomicType // -A
	Peer     string     // client: the server's address; "" runs the server
	Bind     string     // server: local address to listen on (RoCEv2: the link's address)
	Port     int        // -p (0: any free port, for a server)
	Size     int        // -s: message size
	Iters    int        // -n (per QP)
	Duration int        // -D: seconds to run instead of -n
	Margin   int        // -f: -D's warm-up and cool-down, seconds (-1: Duration/4)
	All      bool       // -a: every size from 2 B to 8 MiB
	Bidir    bool       // -b
	QPs      int        // -q
	TxDepth  int        // -t
	RxDepth  int        // -r (Send tests)
	CQMod    int        // -Q
	OutReads int        // -o (0: the device's maximum)
	GIDIndex int        // -x (-1: default)
	MTU      int        // -m: MTU in bytes (0: the port's)
	NoPeak   bool       // -N
	Unsorted bool       // -U: latency tests print every sample
	Histo    bool       // -H: latency tests print the sorted samples
	Gbits    bool       // --report_gbits
	Retry    int        // --retry_count
	Timeout8 int        // -u: QP ACK timeout exponent
	Dev      string     // -d: a device a running softrnic daemon serves, attached to (tool.Open); "": an in-process device
	NoPCIeRO bool       // --disable_pcie_relaxed (printed only)

	RDMACM bool // -R: data connections with rdma_cm (always on over iWARP)
	CommCM bool // -z: the exchange over rdma_cm, data QPs connected by hand (RoCEv2)
	RoCE   bool // --roce: RoCEv2 (IB transport over UDP 4791) instead of iWARP
	CRC    bool // --crc: request MPA CRC32c (iWARP)

	// WaitDrives (--wait-drives d): the waits on the CQ read the socket themselves
	// (rnic.Config.WaitDrivesReceive = d; in-process device). 0: off. ParseArgs sets
	// PollHold for an iWARP latency test without -e.
	WaitDrives time.Duration
	// Spin (--spin d, with WaitDrives): a receive that finds the socket empty reads it
	// again for d before it blocks (rnic.Config.ReceiveSpin). 0: never spins. ParseArgs
	// sets PollSpin for an iWARP latency test without -e.
	Spin time.Duration
	// Events (-e): a latency test waits for its completions blocked, leaving each receive
	// to the connection's goroutine, as perftest's -e waits for completion events; without
	// it an iWARP latency test polls (the WaitDrives and Spin defaults above).
	Events bool

	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up after this long without a message or data from the peer (0: never)

	// Listening, if set, is called once the server listens, with its address.
	Listening func(net.Addr)

	parsing    bool                // normalize called by ParseArgs
	cqModSet   bool                // -Q given
	driveSet   bool                // --wait-drives given
	spinSet    bool                // --spin given
	sizeSet    bool                // -s given
	gotReport  func(bwReport)      // tests: each bandwidth report printed
	gotLat     func(latReport)     // tests: each latency report printed
	gotStats   func(rnic.Stats)    // tests: the device's counters at the end of the run
	testCredit func(uint32) uint32 // tests: rewrite the credit the server sends

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// PollHold and PollSpin are what an iWARP latency test run without -e polls with: its
// waits read the socket themselves (Options.WaitDrives) and busy-poll it for PollSpin
// before they block (Options.Spin), the nearest softrnic has to perftest's busy-polling
// of a hardware CQ, which perftest does unless -e is given (bench/README.md has what it
// is worth between two processes). A spinning receive keeps a CPU busy for up to PollSpin
// each time it finds its socket empty.
const (
	PollHold = 10 * time.Millisecond
	PollSpin = 200 * time.Microsecond
)

// Defaults are the command line's defaults for the test of verb v (a bandwidth test, or
// a latency test with lat), as a server until Peer is set.
func Defaults(v Verb, lat bool) Options {
	o := Options{Verb: v, Latency: lat, Atomic: FetchAdd, Port: DefaultPort, Size: DefaultSize, Iters: defIters,
		QPs: 1, TxDepth: defTxBW, RxDepth: 1, CQMod: defCQMod, GIDIndex: -1, Margin: -1, Retry: defRetryCount,
		Timeout8: defQPTimeout, Idle: DefaultIdle}
	if lat {
		o.Size, o.TxDepth = defSizeLat, defTxLat
	} else if v == Write {
		o.Iters = defItersWB
	}
	if v == Send {
		o.RxDepth = defRxSend
	}
	if v == Atomic {
		o.Size = defSizeAtomic
	}
	return o
}

// DefaultOptions are the defaults of the bandwidth test of verb v.
func DefaultOptions(v Verb) Options { return Defaults(v, false) }

// Main is the "softrnic perftest" command.
func Main(args []string) int {
	if _, err := ParseArgs(args); errors.Is(err, errHelp) {
		Usage(os.Stdout)
		return 0
	} else if errors.Is(err, errVersion) {
		fmt.Printf("Version: %s\n", version)
		return 0
	}
	return tool.Main("perftest", args, ParseArgs, Usage, Run)
}

// Run runs one test in the role the options select, printing perftest's output to
// stdout.
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	if err := o.normalize(); err != nil {
		return err
	}
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := newSession(o, tool.Output(stdout))
	if err != nil {
		if s != nil {
			s.close()
		}
		return err
	}
	defer s.close()
	err = s.run(ctx)
	if s.o.gotStats != nil && s.dev != nil {
		s.o.gotStats(s.dev.Counters().Snapshot())
	}
	return err
}
