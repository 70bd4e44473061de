// Package udaddy is "softrnic udaddy": rdma-core's udaddy (librdmacm/examples/udaddy.c,
// rdma-core 44), UD datagrams over rdma_cm, on RoCEv2 (UD does not exist on iWARP), in
// either role, so that it interoperates with udaddy on Linux rxe:
//
//   - the client resolves each of its -c "connections" (default 1) to the server's port
//     (7174, as udaddy; RDMA_PS_UDP) with an IB CM SIDR_REQ (rnic/rocev2's ResolveUD),
//     each with its own UD QP (Q_Key 0x01234567) and -C receives (default 10) of -S bytes
//     (default 100, at most the MTU) plus the 40-byte GRH posted before; the server
//     answers each with a SIDR_REP naming its QP and Q_Key;
//   - the client sends -C SEND_WITH_IMMs (the immediate: its QPN) on every connection,
//     unsignaled, and waits for -C replies; the server waits for -C datagrams on every
//     connection, addresses its replies to the source of the first one (its link address
//     and, from the immediate, its QPN) with its own Q_Key, and sends -C replies;
//   - both print udaddy's progress lines and "return status %d"; there is no disconnect.
//
// The C tool waits forever for a lost datagram or a silent peer; softrnic gives up after
// --idle (default 60 s) without a completion, and --timeout bounds the whole run.
package udaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "rdma-core udaddy (UD over rdma_cm, SIDR) over RoCEv2: udaddy [-s server] [-b bind] [-c conns] [-C count] [-S size]"

// Defaults of udaddy.
const (
	DefaultPort = 7174
	DefaultIdle = 60 * time.Second
	portSpaceUD = roce.PortSpaceUDP // RDMA_PS_UDP, udaddy's default port space
)

// Options are udaddy's settings and softrnic's own.
type Options struct {
	Server string // -s: the server to resolve ("" runs the server)
	Bind   string // -b: local address (the RoCE link's; default: the route to the server, or the host's first IPv4 address)
	Conns  int    // -c
	Count  int    // -C: datagrams each way per connection
	Size   int    // -S
	TOS    int    // -t (accepted; not applied)

	Port    int           // --port: the RDMA-CM port (udaddy's is always 7174)
	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up after this long without a completion (0: never)

	// Listening, if set, is called once the server listens.
	Listening func(net.Addr)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are udaddy's defaults (a server until Server is set).
func DefaultOptions() Options {
	return Options{Conns: 1, Count: 10, Size: 100, Port: DefaultPort, Idle: DefaultIdle}
}

var opts = append([]tool.Opt{
	{Short: 's', Arg: true}, {Short: 'b', Arg: true}, {Short: 'c', Arg: true}, {Short: 'C', Arg: true},
	{Short: 'S', Arg: true}, {Short: 't', Arg: true}, {Short: 'p', Arg: true}, {Short: 'P', Arg: true}, {Short: 'f', Arg: true},
	{Long: "roce"}, {Long: "port", Arg: true}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic udaddy [options]   (udaddy over RoCEv2: the server without -s)
	[-s server_address]
	[-b bind_address]
	[-f address_format]	ip or name
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]	(accepted)
	[-P port_space]		udp (RDMA_PS_UDP; -p 0x111 likewise)
	[--port n]		RDMA-CM port (udaddy's is always 7174)
	[--roce]		accepted: udaddy runs over RoCEv2 only (no UD on iWARP)
	[--timeout d]		give up after the duration d
	[--idle d]		give up after d without a completion (default 60s)
`+hostlink.FlagUsage)
}

// ParseArgs parses udaddy's command line.
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
	case 'c':
		return tool.SetInt(&o.Conns, a)
	case 'C':
		return tool.SetInt(&o.Count, a)
	case 'S':
		return tool.SetInt(&o.Size, a)
	case 't':
		return tool.SetInt(&o.TOS, a)
	case 'p':
		var ps int
		if err := tool.SetInt(&ps, a); err != nil {
			return err
		}
		if ps != portSpaceUD {
			return fmt.Errorf("-p %s: only the UDP port space (%#x)", a.Value, portSpaceUD)
		}
	case 'P':
		if a.Value != "udp" {
			return fmt.Errorf("-P %s: only udp (ipoib is InfiniBand-only)", a.Value)
		}
	case 'f':
		if a.Value != "ip" && a.Value != "name" {
			return fmt.Errorf("-f %s: softrnic resolves IP addresses and names only", a.Value)
		}
	}
	if a.Long == "port" {
		return tool.SetInt(&o.Port, a)
	}
	return nil
}

const maxConns = 4096

func (o *Options) check() error {
	switch {
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case o.Conns < 1 || o.Conns > maxConns:
		return fmt.Errorf("invalid connections %d (1..%d)", o.Conns, maxConns)
	case o.Count < 0 || o.Count > 1<<20 || o.Size < 0:
		return errors.New("invalid message count or size")
	}
	return nil
}

// Main is the "softrnic udaddy" command.
func Main(args []string) int {
	return tool.Main("udaddy", args, ParseArgs, Usage, func(ctx context.Context, o Options, stdout, stderr io.Writer) error {
		return tool.Reported(Run(ctx, o, stdout, stderr)) // Run printed it, as udaddy does
	})
}

// Run runs the server or the client, printing udaddy's lines to stdout; an error is
// printed as "udaddy: ..." and the run ends with "return status %d".
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
	return tool.ReturnStatus(out, "udaddy", err)
}

// test is udaddy's struct cmatest.
type test struct {
	o     Options
	out   io.Writer
	dev   *rnic.Device
	t     *cm.Transport
	ep    *rocev2.Endpoint
	nodes []*node
}

// node is one "connection" (struct cmatest_node): a UD QP, its CQ, the buffer (40-byte
// GRH area then the message) and where its datagrams go.
type node struct {
	pd        *rnic.PD
	cq        *rnic.CQ
	qp        *rnic.QP
	ud        *rocev2.UDQP
	buf       []byte
	mr        *rnic.MR
	ah        rocev2.AH
	connected bool
	wc        [8]rnic.Completion
}

func (t *test) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }

func (t *test) close() {
	for _, n := range t.nodes {
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

func (t *test) open(peer string) error {
	var err error
	if t.dev, t.t, err = tool.OpenCM(true, t.o.Bind, peer); err != nil {
		return err
	}
	t.ep = t.t.Endpoint()
	return nil
}

// newNode creates a connection's UD QP (Q_Key RDMA_UDP_QKEY), CQ of 2·-C entries and
// buffer, and posts -C receives of the whole buffer (verify_test_params, init_node,
// post_recvs).
func (t *test) newNode() (*node, error) {
	o := &t.o
	if mtu := t.ep.Config().MTU.Bytes(); o.Count > 0 && o.Size > mtu {
		return nil, fmt.Errorf("message_size %d is larger than active mtu %d", o.Size, mtu)
	}
	n := &node{}
	t.nodes = append(t.nodes, n)
	var err error
	if n.pd, err = t.dev.AllocPD(); err != nil {
		return n, err
	}
	cqe := max(2*o.Count, 2)
	if n.cq, err = t.dev.CreateCQ(cqe); err != nil {
		return n, fmt.Errorf("unable to create CQ: %w", err)
	}
	wr := max(o.Count, 1)
	if n.qp, err = t.dev.CreateQP(n.pd, rnic.QPAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: rnic.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return n, fmt.Errorf("unable to create QP: %w", err)
	}
	if n.ud, err = t.ep.CreateUD(n.qp, rocev2.UDPQKey); err != nil {
		return n, fmt.Errorf("unable to create QP: %w", err)
	}
	if o.Count == 0 {
		return n, nil
	}
	n.buf = make([]byte, o.Size+rocev2.GRHLen)
	if n.mr, err = n.pd.RegMR(n.buf, rnic.AccessLocalWrite); err != nil {
		return n, fmt.Errorf("failed to reg MR: %w", err)
	}
	rwr := rnic.RecvWR{SGL: []rnic.SGE{n.mr.SGE(0, len(n.buf))}}
	for range o.Count {
		if err := n.qp.PostRecv(&rwr); err != nil {
			return n, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return n, nil
}

// postSends sends -C SEND_WITH_IMMs from the buffer's start, the immediate being the
// QPN (post_sends).
func (t *test) postSends(n *node, signaled bool) error {
	wr := rnic.SendWR{Opcode: rnic.OpSendImm, Imm: n.qp.Num(), SGL: []rnic.SGE{n.mr.SGE(0, t.o.Size)}}
	if signaled {
		wr.Flags = rnic.Signaled
	}
	for range t.o.Count {
		if err := n.ud.PostSend(n.ah, &wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// poll waits for -C completions on every connection (poll_cqs); a server's connection
// without an address handle takes it from its first datagram (create_reply_ah: the
// sender's link address, its QPN from the immediate, our own Q_Key).
func (t *test) poll(ctx context.Context) error {
	for i, n := range t.nodes {
		if !n.connected {
			continue
		}
		for done := 0; done < t.o.Count; {
			k, err := n.cq.Wait(ctx, n.wc[:])
			if err != nil {
				return fmt.Errorf("failed polling CQ of connection %d (%d of %d): %w", i, done, t.o.Count, tool.Cause(ctx, err))
			}
			for _, wc := range n.wc[:k] {
				if wc.Status != rnic.StatusSuccess {
					code, text := tool.IBVStatus(wc.Status)
					return fmt.Errorf("connection %d: %v completion: %s (%d)", i, wc.Opcode, text, code)
				}
				if n.ah.QPN == 0 && wc.Opcode == rnic.WCRecv {
					if wc.Flags&rnic.WCWithImm == 0 {
						return fmt.Errorf("connection %d: a datagram without immediate data: no QPN to reply to", i)
					}
					from, _ := n.ud.LastSource()
					n.ah = rocev2.AH{Addr: t.replyAddr(from), QPN: wc.Imm & roce.QPNMask, QKey: rocev2.UDPQKey}
				}
			}
			done += k
		}
	}
	return nil
}

// replyAddr is where a datagram's sender listens: as the endpoint answers any peer, UDP
// 4791 for a source port in the entropy range (kernel and hardware RoCEv2), else the
// source port itself (a softrnic endpoint), unless the endpoint forces one.
func (t *test) replyAddr(from netip.AddrPort) netip.AddrPort {
	p := from.Port()
	switch {
	case t.ep.Config().PeerPort != 0:
		p = t.ep.Config().PeerPort
	case roce.IsEntropyPort(p):
		p = roce.UDPPort
	}
	return netip.AddrPortFrom(from.Addr().Unmap(), p)
}

func (t *test) watch(ctx context.Context) (context.Context, *tool.Watchdog, func()) {
	return tool.NewWatchdog(ctx, t.o.Idle, fmt.Errorf("no completion for %v", t.o.Idle))
}

func (t *test) runServer(ctx context.Context) error {
	o := &t.o
	if err := t.open(""); err != nil {
		t.printf("udaddy: starting server\n")
		return fmt.Errorf("listen request failed: %w", err)
	}
	ln, err := rocev2.ListenUD(t.ep, ":"+strconv.Itoa(o.Port), nil)
	if err != nil {
		t.printf("udaddy: starting server\n")
		return fmt.Errorf("bind address failed: %w", err)
	}
	defer ln.Close()
	// udaddy prints this before it listens; softrnic once it does, so that a script may
	// start the client when it sees the line.
	t.printf("udaddy: starting server\n")
	if o.Listening != nil {
		o.Listening(ln.Addr())
	}
	for len(t.nodes) < o.Conns {
		req, err := ln.Accept(ctx)
		if err != nil {
			return fmt.Errorf("waiting for connection requests: %w", tool.Cause(ctx, err))
		}
		n, err := t.newNode()
		if err != nil {
			t.printf("udaddy: failing connection request\n")
			_ = req.Reject(nil)
			return err
		}
		if err := req.Accept(n.qp.Num(), rocev2.UDPQKey, nil); err != nil {
			return fmt.Errorf("failure accepting: %w", err)
		}
		n.connected = true
	}
	_ = ln.Close()
	if o.Count == 0 {
		return nil
	}
	wctx, wd, stop := t.watch(ctx)
	defer stop()
	t.printf("receiving data transfers\n")
	if err := t.poll(wctx); err != nil {
		return err
	}
	wd.Kick()
	t.printf("sending replies\n")
	for _, n := range t.nodes {
		if err := t.postSends(n, true); err != nil {
			return err
		}
	}
	if err := t.poll(wctx); err != nil {
		return err
	}
	t.printf("data transfers complete\n")
	return nil
}

func (t *test) runClient(ctx context.Context) error {
	o := &t.o
	t.printf("udaddy: starting client\n")
	if err := t.open(o.Server); err != nil {
		return err
	}
	addr := net.JoinHostPort(o.Server, strconv.Itoa(o.Port))
	t.printf("udaddy: connecting\n")
	for range o.Conns {
		n, err := t.newNode()
		if err != nil {
			return err
		}
		peer, err := rocev2.ResolveUD(ctx, t.ep, addr, nil, nil)
		if err != nil {
			return fmt.Errorf("event: RDMA_CM_EVENT_UNREACHABLE, error: %w", tool.Cause(ctx, err))
		}
		if peer.QKey != rocev2.UDPQKey {
			// RDMA-CM's cma_set_qkey: a UDP-port-space id's Q_Key is fixed
			return fmt.Errorf("event: RDMA_CM_EVENT_ADDR_ERROR, error: the server's Q_Key %#x is not %#x", peer.QKey, rocev2.UDPQKey)
		}
		n.ah = rocev2.AH{Addr: peer.Addr, QPN: peer.QPN, QKey: peer.QKey}
		n.connected = true
	}
	if o.Count == 0 {
		return nil
	}
	wctx, _, stop := t.watch(ctx)
	defer stop()
	t.printf("initiating data transfers\n")
	for _, n := range t.nodes {
		if err := t.postSends(n, false); err != nil {
			return err
		}
	}
	t.printf("receiving data transfers\n")
	if err := t.poll(wctx); err != nil {
		return err
	}
	t.printf("data transfers complete\n")
	return nil
}
