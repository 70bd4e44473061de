package perftest

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "perftest ib_{write,read,send}_bw -R over iWARP: perftest write|read|send [-s size] [-n iters] [-p port] [server]"

// Verb is the test: RDMA Write, RDMA Read or Send bandwidth.
type Verb int

const (
	Write Verb = iota
	Read
	Send
)

// String is perftest's name of the verb (testsStr).
func (v Verb) String() string {
	switch v {
	case Write:
		return "RDMA_Write"
	case Read:
		return "RDMA_Read"
	}
	return "Send"
}

// perftest defaults (perftest_parameters.h).
// perftest defaults (perftest_parameters.h).
const (
	DefaultPort = 18515 // DEF_PORT
	DefaultSize = 65536 // DEF_SIZE_BW
	MinIters    = 5     // MIN_ITER
	MaxSize     = 1 << 30

	defIters   = 1000 // DEF_ITERS
	defItersWB = 5000 // DEF_ITERS_WB (write BW)
	defTx      = 128  // DEF_TX_BW
	defRxSend  = 512  // DEF_RX_SEND
	defCQMod   = 100  // DEF_CQ_MOD
	defOuts    = 128  // outstanding reads
	commRecvs  = 4    // receives kept posted on the communication QP
	commSlot   = 64   // bytes per communication receive buffer (messages are ≤ 56)
)

// Options are a test's settings. Start from DefaultOptions (the command line's defaults
// for the verb); Run applies perftest's dependencies between them (force_dependecies).
type Options struct {
	Verb     Verb
	Peer     string           // client: the server's address; "" runs the server
	Bind     string           // server: local address to listen on ("" all; required for RoCE)
	Port     int              // -p (0: any free port, for a server)
	Size     int              // -s: message size
	Iters    int              // -n
	Duration time.Duration    // -D: client Write/Read tests run this long instead of -n
	TxDepth  int              // -t
	RxDepth  int              // -r (Send tests)
	CQMod    int              // -Q
	OutReads int              // -o
	Gbits    bool             // --report_gbits
	CRC      bool             // --crc: request MPA CRC32c
	RoCE     bool             // --roce: RoCEv2 with the IB CM instead of iWARP
	Timeout  time.Duration    // --timeout: bound on the whole run (0: none)
	Linger   time.Duration    // client: wait for the server to close before disconnecting
	Link     hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)

	// Listening, if set, is called once the server listens, with its address (a
	// *net.TCPAddr, or a *net.UDPAddr with the RDMA-CM port for RoCEv2).
	Listening func(net.Addr)

	gotReport  func(bwReport)      // tests: the report printed at the end
	testCredit func(uint32) uint32 // tests: rewrite the credit the server sends
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are the command line's defaults for a test of verb v (a server until
// Peer is set).
func DefaultOptions(v Verb) Options {
	o := Options{Verb: v, Port: DefaultPort, Size: DefaultSize, Iters: defIters, TxDepth: defTx, RxDepth: 1,
		CQMod: defCQMod, OutReads: defOuts, Linger: time.Second}
	if v == Write {
		o.Iters = defItersWB
	}
	if v == Send {
		o.RxDepth = defRxSend
	}
	return o
}

// Main is the "softrnic perftest" command.
func Main(args []string) int { return tool.Main("perftest", args, ParseArgs, Usage, Run) }

// Run runs one test in the role the options select, printing perftest's output to
// stdout.
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	o.normalize()
	if err := o.check(); err != nil {
		return err
	}
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	s, err := newSession(o, tool.Output(stdout))
	if err != nil {
		return err
	}
	defer s.close()
	return s.run(ctx)
}
