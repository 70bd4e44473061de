// Package cmatose is "softrnic cmatose": rdma-core's ucmatose (librdmacm/examples/
// cmatose.c, rdma-core 44) over iWARP or RoCEv2 (--roce), in either role, so that it
// interoperates with ucmatose on Linux siw and rxe:
//
//   - the client makes -c connections (default 1) to the server's port (default 7471),
//     each with its own QP, CQs and a -S byte buffer (default 100), and posts -C receives
//     (default 10) before connecting; the server accepts up to -c requests, each likewise
//     prepared before it accepts ("cmatose: failing connection request" for more);
//   - once all are connected the server SENDs -C messages on every connection and waits
//     for their completions, then for -C messages back on every connection; the client
//     waits for the -C messages of every connection and answers with -C SENDs;
//   - the server disconnects every connection and waits for each to end; the client
//     answers each disconnect with its own;
//   - both print ucmatose's progress lines and "return status %d".
//
// Over iWARP the server speaks first, and an MPA responder may send nothing before the
// initiator's first FPDU (RFC 5044 §7.1.2): softrnic's client dials in RFC 6581
// peer-to-peer mode, whose RTR is that FPDU; siw's client does not (siw's responder
// ignores the rule), so a softrnic server refuses it with the reason when the engine
// gives up waiting (rnic/iwarp's first-FPDU timeout).
//
// The C tool waits forever for a silent peer; softrnic gives up after --idle (default
// 60 s) without a completion, and --timeout bounds the whole run.
package cmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "rdma-core ucmatose over iWARP or RoCEv2: cmatose [-s server] [-b bind] [-p port] [-c conns] [-C count] [-S size] [--roce]"

// Defaults of ucmatose.
const (
	DefaultPort = 7471
	DefaultIdle = 60 * time.Second
)

// Options are ucmatose's settings and softrnic's own.
type Options struct {
	Server     string // -s: the server to connect to ("" runs the server)
	Bind       string // -b: local address (server: listen address)
	Port       int    // -p
	Conns      int    // -c: connections
	Count      int    // -C: messages each way per connection
	Size       int    // -S: message size
	TOS        int    // -t: type of service (accepted; not applied)
	AckTimeout int    // -a: ACK timeout exponent (accepted; not applied)
	Migrate    bool   // -m: migrate to a new event channel (prints ucmatose's line; no effect)

	RoCE    bool          // --roce: RoCEv2 instead of iWARP
	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up after this long without a completion (0: never)

	// Listening, if set, is called once the server listens.
	Listening func(net.Addr)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are ucmatose's defaults (a server until Server is set).
func DefaultOptions() Options {
	return Options{Port: DefaultPort, Conns: 1, Count: 10, Size: 100, Idle: DefaultIdle}
}

var opts = append([]tool.Opt{
	{Short: 's', Arg: true}, {Short: 'b', Arg: true}, {Short: 'f', Arg: true}, {Short: 'P', Arg: true},
	{Short: 'c', Arg: true}, {Short: 'C', Arg: true}, {Short: 'S', Arg: true}, {Short: 't', Arg: true},
	{Short: 'p', Arg: true}, {Short: 'a', Arg: true}, {Short: 'm'},
	{Long: "roce"}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic cmatose [options]   (ucmatose: the server without -s)
	[-s server_address]
	[-b bind_address]
	[-f address_format]	ip or name
	[-P port_space]		tcp
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]	(accepted)
	[-p port_number]
	[-m(igrate)]		(no effect)
	[-a ack_timeout]	(accepted)
	[--roce]		RoCEv2 (IB CM over UDP 4791, as ucmatose on rxe) instead of iWARP
	[--timeout d]		give up after the duration d
	[--idle d]		give up after d without a completion (default 60s)
`+hostlink.FlagUsage)
}

// ParseArgs parses ucmatose's command line.
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	operands, err := tool.Parse(args, opts, tool.Common{Link: &o.Link, Timeout: &o.Timeout, Idle: &o.Idle}, o.set)
	if err == nil {
		err = tool.NoOperands(operands)
	}
	if err != nil {
		return o, err
	}
	return o, o.check()
}

func (o *Options) set(a tool.Arg) error {
	switch a.Short {
	case 's':
		o.Server = a.Value
	case 'b':
		o.Bind = a.Value
	case 'f':
		if a.Value != "ip" && a.Value != "name" {
			return fmt.Errorf("-f %s: softrnic resolves IP addresses and names only", a.Value)
		}
	case 'P':
		if a.Value != "tcp" {
			return fmt.Errorf("-P %s: only the tcp port space (RDMA_PS_TCP); ib is InfiniBand-only", a.Value)
		}
	case 'c':
		return tool.SetInt(&o.Conns, a)
	case 'C':
		return tool.SetInt(&o.Count, a)
	case 'S':
		return tool.SetInt(&o.Size, a)
	case 't':
		return tool.SetInt(&o.TOS, a)
	case 'p':
		return tool.SetInt(&o.Port, a)
	case 'a':
		return tool.SetInt(&o.AckTimeout, a)
	case 'm':
		o.Migrate = true
	}
	if a.Long == "roce" {
		o.RoCE = true
	}
	return nil
}

// maxConns bounds -c: each connection holds a QP, two CQs and a buffer.
const maxConns = 4096

func (o *Options) check() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case o.Conns < 1 || o.Conns > maxConns:
		return fmt.Errorf("invalid connections %d (1..%d)", o.Conns, maxConns)
	case o.Count < 0 || o.Count > 1<<20 || o.Size < 0 || o.Size > 1<<30:
		return errors.New("invalid message count or size")
	}
	return nil
}

// Main is the "softrnic cmatose" command.
func Main(args []string) int {
	return tool.Main("cmatose", args, ParseArgs, Usage, func(ctx context.Context, o Options, stdout, stderr io.Writer) error {
		return tool.Reported(Run(ctx, o, stdout, stderr)) // Run printed it, as ucmatose does
	})
}

// Run runs the server or the client, printing ucmatose's lines to stdout; an error is
// printed as "cmatose: ..." and the run ends with "return status %d".
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	out := tool.Output(stdout)
	if err := o.check(); err != nil {
		return err
	}
	if o.Size == 0 {
		o.Count = 0
	}
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	t := &test{o: o, out: out}
	var err error
	if o.Server != "" {
		err = t.runClient(ctx)
	} else {
		err = t.runServer(ctx)
	}
	t.close()
	return tool.ReturnStatus(out, "cmatose", err)
}

// test is ucmatose's struct cmatest.
type test struct {
	o     Options
	out   io.Writer
	dev   *rnic.Device
	t     *cm.Transport
	nodes []*node
}

// node is one connection (struct cmatest_node): its QP, send and receive CQs and buffer.
type node struct {
	pd       *rnic.PD
	scq, rcq *rnic.CQ
	qp       *rnic.QP
	buf      []byte
	mr       *rnic.MR
	conn     *cm.Conn
	wc       [8]rnic.Completion
}

func (t *test) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

func (t *test) open(peer string) error {
	var err error
	t.dev, t.t, err = tool.OpenCM(t.o.RoCE, t.o.Bind, peer)
	return err
}

func (t *test) close() {
	for _, n := range t.nodes {
		if n.conn != nil {
			_ = n.conn.Close()
		}
		if n.qp != nil {
			_ = n.qp.Destroy()
		}
	}
	if t.t != nil {
		_ = t.t.Close()
	}
	if t.dev != nil {
		_ = t.dev.Close()
	}
}

// newNode creates a connection's resources and posts its receives (init_node,
// post_recvs): QP and CQs of -C entries, every send signaled.
func (t *test) newNode() (*node, error) {
	o := &t.o
	n := &node{}
	t.nodes = append(t.nodes, n)
	var err error
	if n.pd, err = t.dev.AllocPD(); err != nil {
		return n, err
	}
	cqe := max(o.Count, 1)
	if n.scq, err = t.dev.CreateCQ(cqe); err != nil {
		return n, err
	}
	if n.rcq, err = t.dev.CreateCQ(cqe); err != nil {
		return n, err
	}
	if n.qp, err = t.dev.CreateQP(n.pd, rnic.QPAttr{SendCQ: n.scq, RecvCQ: n.rcq, SignalAll: true,
		Cap: rnic.QPCap{MaxSendWR: cqe, MaxRecvWR: cqe, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return n, fmt.Errorf("unable to create QP: %w", err)
	}
	if o.Count == 0 {
		return n, nil
	}
	n.buf = make([]byte, o.Size)
	if n.mr, err = n.pd.RegMR(n.buf, rnic.AccessLocalWrite); err != nil {
		return n, fmt.Errorf("failed to reg MR: %w", err)
	}
	wr := rnic.RecvWR{SGL: []rnic.SGE{n.mr.SGE(0, o.Size)}}
	for range o.Count {
		if err := n.qp.PostRecv(&wr); err != nil {
			return n, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return n, nil
}

// postSends posts -C SENDs of the buffer (post_sends).
func (n *node) postSends(count, size int) error {
	wr := rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{n.mr.SGE(0, size)}}
	for range count {
		if err := n.qp.PostSend(&wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// poll waits for count completions on every connection's send or receive CQ (poll_cqs).
func (t *test) poll(ctx context.Context, recv bool) error {
	for i, n := range t.nodes {
		if n.conn == nil {
			continue
		}
		cq := n.scq
		if recv {
			cq = n.rcq
		}
		for done := 0; done < t.o.Count; {
			k, err := cq.Wait(ctx, n.wc[:])
			if err != nil {
				return fmt.Errorf("failed polling CQ of connection %d (%d of %d): %w", i, done, t.o.Count, tool.Cause(ctx, err))
			}
			for _, wc := range n.wc[:k] {
				if wc.Status != rnic.StatusSuccess {
					return t.failure(i, n, wc)
				}
			}
			done += k
		}
	}
	return nil
}

// errServerFirst explains why an iWARP server's messages never leave to a siw client.
var errServerFirst = errors.New("the client sent nothing, and an MPA responder may send nothing before the initiator's first FPDU " +
	"(RFC 5044 §7.1.2): siw's client (client-server model, no RFC 6581 RTR) waits for the server's messages; " +
	"run softrnic cmatose as the client over iWARP")

// failure explains a failed completion on connection i.
func (t *test) failure(i int, n *node, wc rnic.Completion) error {
	code, text := tool.IBVStatus(wc.Status)
	select {
	case <-n.qp.Done():
	case <-time.After(time.Second):
	}
	err := n.qp.Err()
	switch {
	case errors.Is(err, iwarp.ErrFirstFPDUTimeout):
		return errServerFirst
	case err != nil:
		return fmt.Errorf("connection %d: %s (%d): %w", i, text, code, err)
	}
	return fmt.Errorf("connection %d: completion with %s (%d)", i, text, code)
}

// watch bounds the completion waits by o.Idle.
func (t *test) watch(ctx context.Context) (context.Context, *tool.Watchdog, func()) {
	return tool.NewWatchdog(ctx, t.o.Idle, fmt.Errorf("no completion for %v", t.o.Idle))
}

func (t *test) runServer(ctx context.Context) error {
	o := &t.o
	if err := t.open(""); err != nil {
		t.printf("cmatose: starting server\n")
		return fmt.Errorf("listen request failed: %w", err)
	}
	host := o.Bind
	if host == "" && !o.RoCE {
		host = "0.0.0.0"
	}
	ln, err := t.t.Listen(net.JoinHostPort(host, strconv.Itoa(o.Port)))
	if err != nil {
		t.printf("cmatose: starting server\n")
		return fmt.Errorf("bind address failed: %w", err)
	}
	defer ln.Close()
	// ucmatose prints this before it listens; softrnic once it does, so that a script
	// may start the client when it sees the line.
	t.printf("cmatose: starting server\n")
	if o.Listening != nil {
		o.Listening(ln.Addr())
	}
	for accepted := 0; accepted < o.Conns; {
		req, err := ln.Accept(ctx)
		if err != nil {
			return fmt.Errorf("waiting for connection requests: %w", tool.Cause(ctx, err))
		}
		n, err := t.newNode()
		if err != nil {
			t.printf("cmatose: failing connection request\n")
			_ = req.Reject(nil)
			return err
		}
		if n.conn, err = req.Accept(n.qp, cm.Param{}); err != nil {
			t.printf("cmatose: failing connection request\n")
			return fmt.Errorf("failure accepting: %w", err)
		}
		accepted++
	}
	_ = ln.Close() // later requests are refused, as once ucmatose stops listening
	wctx, wd, stop := t.watch(ctx)
	defer stop()
	if o.Count > 0 {
		t.printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if err := n.postSends(o.Count, o.Size); err != nil {
				return err
			}
		}
		t.printf("completing sends\n")
		if err := t.poll(wctx, false); err != nil {
			return err
		}
		wd.Kick()
		t.printf("receiving data transfers\n")
		if err := t.poll(wctx, true); err != nil {
			return err
		}
		t.printf("data transfers complete\n")
	}
	if o.Migrate {
		t.printf("migrating to new event channel\n")
	}
	t.printf("cmatose: disconnecting\n")
	for _, n := range t.nodes {
		n.conn.QP().Disconnect()
	}
	for _, n := range t.nodes {
		select {
		case <-n.conn.Done():
		case <-wctx.Done():
			return fmt.Errorf("waiting for the disconnects: %w", context.Cause(wctx))
		}
	}
	t.printf("disconnected\n")
	return nil
}

func (t *test) runClient(ctx context.Context) error {
	o := &t.o
	t.printf("cmatose: starting client\n")
	if err := t.open(o.Server); err != nil {
		return err
	}
	addr := net.JoinHostPort(o.Server, strconv.Itoa(o.Port))
	t.printf("cmatose: connecting\n")
	for range o.Conns {
		n, err := t.newNode()
		if err != nil {
			return err
		}
		// librdmacm's defaults as ucmatose asks: responder resources and initiator depth 1
		if n.conn, err = t.t.Dial(ctx, n.qp, addr, cm.Param{IRD: 1, ORD: 1}); err != nil {
			return fmt.Errorf("event: %s, error: %w", cmEvent(err), err)
		}
	}
	wctx, _, stop := t.watch(ctx)
	defer stop()
	if o.Count > 0 {
		t.printf("receiving data transfers\n")
		if err := t.poll(wctx, true); err != nil {
			return err
		}
		t.printf("sending replies\n")
		for _, n := range t.nodes {
			if err := n.postSends(o.Count, o.Size); err != nil {
				return err
			}
		}
		t.printf("data transfers complete\n")
	}
	if o.Migrate {
		t.printf("migrating to new event channel\n")
	}
	// disconnect_events: each connection ends with the server's disconnect, answered.
	for _, n := range t.nodes {
		select {
		case <-n.conn.Done():
		case <-wctx.Done():
			return fmt.Errorf("waiting for the server's disconnects: %w", context.Cause(wctx))
		}
	}
	return nil
}

// cmEvent names the rdma_cm event a failed connect would have been.
func cmEvent(err error) string {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej), errors.Is(err, cm.ErrRefused):
		return "RDMA_CM_EVENT_REJECTED"
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, cm.ErrTimeout):
		return "RDMA_CM_EVENT_UNREACHABLE"
	}
	return "RDMA_CM_EVENT_CONNECT_ERROR"
}
