// Package rdmaserver is "softrnic rdma-server": rdma-core's rdma_server
// (librdmacm/examples/rdma_server.c, rdma-core 44) over iWARP or RoCEv2 (--roce): it
// listens on -s (default every address; RoCEv2: the host's first IPv4 address) port -p
// (default 7471), accepts one connection with a receive of 16 bytes posted, waits for the
// client's 16-byte SEND, answers with 16 zero bytes, and disconnects. It prints
// "rdma_server: start" and "rdma_server: end %d" (0 on success) as rdma_server does.
//
// Where rdma_server would wait forever (a client that connects and sends nothing),
// softrnic gives up after --idle (default 60 s); --timeout bounds the whole run.
package rdmaserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "rdma-core rdma_server over iWARP or RoCEv2: rdma-server [-s addr] [-p port] [--roce]"

// MsgLen is the size of the messages (send_msg, recv_msg).
const MsgLen = 16

// Options are rdma_server's settings and softrnic's own.
type Options struct {
	Addr    string        // -s: listen address ("" every address)
	Port    int           // -p (default 7471; 0: any free port)
	RoCE    bool          // --roce: RoCEv2 instead of iWARP
	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up after this long without the client's message (0: never)

	// Listening, if set, is called once the server listens.
	Listening func(net.Addr)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are rdma_server's defaults.
func DefaultOptions() Options { return Options{Port: 7471, Idle: 60 * time.Second} }

var opts = append([]tool.Opt{{Short: 's', Arg: true}, {Short: 'p', Arg: true},
	{Long: "roce"}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, "usage: softrnic rdma-server\n\t[-s server_address]\n\t[-p port_number]\n"+
		"\t[--roce]\t\tRoCEv2 (IB CM over UDP 4791) instead of iWARP\n\t[--timeout d]\t\tgive up after d\n"+
		"\t[--idle d]\t\tgive up after d without the client's message (default 60s)\n"+hostlink.FlagUsage)
}

// ParseArgs parses rdma_server's command line.
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	operands, err := tool.Parse(args, opts, tool.Common{Link: &o.Link, Timeout: &o.Timeout, Idle: &o.Idle}, func(a tool.Arg) error {
		switch {
		case a.Short == 's':
			o.Addr = a.Value
		case a.Short == 'p':
			p, err := strconv.ParseUint(a.Value, 10, 16)
			if err != nil {
				return fmt.Errorf("invalid port %q", a.Value)
			}
			o.Port = int(p)
		case a.Long == "roce":
			o.RoCE = true
		}
		return nil
	})
	if err == nil {
		err = tool.NoOperands(operands)
	}
	return o, err
}

// Main is the "softrnic rdma-server" command.
func Main(args []string) int {
	return tool.Main("rdma-server", args, ParseArgs, Usage, func(ctx context.Context, o Options, stdout, stderr io.Writer) error {
		return tool.Reported(Run(ctx, o, stdout, stderr)) // Run printed it, as rdma_server does
	})
}

// Run serves one client, printing rdma_server's lines to stdout and errors to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	out, errOut := tool.Output(stdout), tool.Output(stderr)
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// rdma_server prints its start line before it listens; softrnic once it does, so
	// that a script may start the client when it sees the line.
	started := false
	start := func() {
		if !started {
			started = true
			fmt.Fprintf(out, "rdma_server: start\n")
		}
	}
	err := run(ctx, &o, start)
	start()
	ret := 0
	if err != nil {
		fmt.Fprintf(errOut, "rdma_server: %v\n", err)
		ret = -1
	}
	fmt.Fprintf(out, "rdma_server: end %d\n", ret)
	return err
}

func run(ctx context.Context, o *Options, listening func()) error {
	dev, t, err := tool.OpenCM(o.RoCE, o.Addr, "")
	if dev != nil {
		defer dev.Close()
	}
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer t.Close()
	host := o.Addr
	if host == "" && !o.RoCE {
		host = "0.0.0.0"
	}
	ln, err := t.Listen(net.JoinHostPort(host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer ln.Close()
	listening()
	if o.Listening != nil {
		o.Listening(ln.Addr())
	}
	req, err := ln.Accept(ctx)
	if err != nil {
		return fmt.Errorf("rdma_get_request: %w", tool.Cause(ctx, err))
	}
	_ = ln.Close()
	s, err := tool.NewMsgQP(dev, MsgLen)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	defer s.Close()
	if err := s.PostRecv(); err != nil {
		_ = req.Reject(nil)
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	c, err := req.Accept(s.QP, cm.Param{})
	if err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer c.Close()
	wctx, _, stop := tool.NewWatchdog(ctx, o.Idle, fmt.Errorf("no message from the client for %v", o.Idle))
	defer stop()
	if err := s.Wait(wctx, rnic.WCRecv); err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	if err := s.PostSend(); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	if err := s.Wait(wctx, rnic.WCSend); err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	_ = c.Disconnect(dctx)
	return nil
}
