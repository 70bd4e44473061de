package rping

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "rdma-core rping over iWARP or RoCEv2 (-s | -c -a addr) [-p port] [-C n] [-S size] [-vVd] [--roce]"

// rping constants (rping.c): default port and size, the message prefix, and the size range.
const (
	DefaultPort = 7174
	DefaultSize = 64
	MinSize     = 11 + 15 // sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	MaxSize     = 64*1024 - 1

	msgFmt     = "rdma-ping-%d: "
	infoLen    = 16 // struct rping_rdma_info
	firstChar  = 'A'
	lastChar   = 'z'
	recvDepth  = 2
	sendDepth  = 16
	cqDepth    = 2 * sendDepth
	goAheadLen = infoLen

	// DefaultMaxSessions bounds a persistent server's concurrent sessions.
	DefaultMaxSessions = 64
)

// Fault is a deliberate protocol fault for error tests (--fault).
type Fault string

// Faults that --fault can inject (for interop error tests).
const (
	FaultWriteBadSTag Fault = "write-bad-stag" // server: RDMA WRITE with a corrupted remote STag
	FaultReadBadSTag  Fault = "read-bad-stag"  // server: RDMA READ with a corrupted remote STag
	FaultSinkOOB      Fault = "sink-oob"       // client: advertise the sink half a buffer past its start, so the server's Write overruns it
)

// Options are rping's settings. DefaultOptions gives the command line's defaults; the
// zero Size is DefaultSize.
type Options struct {
	Server   bool   // -s (else -c, the client)
	Addr     string // -a: the server's address (server: the address to listen on, "" all)
	Port     int    // -p (0: any free port, for a server)
	Count    int    // -C: client pings (0: forever)
	Size     int    // -S: ping data size, MinSize..MaxSize
	Verbose  bool   // -v: print ping data
	Validate bool   // -V: client: compare what came back with what was sent
	Debug    bool   // -d: debug lines on stdout
	Dev      string // -d NAME, --dev NAME: a device a running softrnic daemon serves, attached to (tool.Open); "": in-process

	CRC     bool             // --crc: request MPA CRC (C bit)
	Timeout time.Duration    // --timeout: bound on the whole run (0: none)
	Fault   Fault            // --fault
	RoCE    bool             // --roce: RoCEv2 with the IB CM instead of iWARP
	Local   string           // --local: client's local IP address for RoCEv2
	Link    hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)

	// Server only.
	Persistent  bool          // -P: serve every client, concurrently, until the context ends
	MaxSessions int           // --max-sessions: -P: sessions at once (0: DefaultMaxSessions); more clients are rejected
	IdleTimeout time.Duration // --idle: end a session whose client sends nothing for this long (0: never)
	// SessionEnd, if set, is called as each session of a persistent server ends, with the
	// client's address and the session's error (nil when the client disconnected).
	SessionEnd func(peer string, err error)

	// Listening, if set, is called once the server listens, with its address (a
	// *net.TCPAddr, or a *net.UDPAddr with the RDMA-CM port for RoCEv2).
	Listening func(net.Addr)

	collectCounters func(*rnic.Counters) // tests: a session's QP counters at its end
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are the command line's defaults (a client until Server is set).
func DefaultOptions() Options {
	return Options{Port: DefaultPort, Size: DefaultSize}
}

// Main is the "softrnic rping" command.
func Main(args []string) int { return tool.Main("rping", args, ParseArgs, Usage, Run) }

// Run runs a server (one connection, or with Persistent every client's until ctx ends)
// or one client session; stdout gets what rping prints (ping data, debug lines), stderr
// its DISCONNECT events.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if err := o.check(); err != nil {
		return err
	}
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	out := output{stdout: tool.Output(stdout), stderr: tool.Output(stderr), debug: o.Debug}
	if o.Server {
		srv, err := listenServer(o, out)
		if err != nil {
			return err
		}
		defer srv.Close()
		return srv.Serve(ctx)
	}
	return runClient(ctx, o, out)
}
