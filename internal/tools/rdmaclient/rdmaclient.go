// Package rdmaclient is "softrnic rdma-client": rdma-core's rdma_client
// (librdmacm/examples/rdma_client.c, rdma-core 44) over iWARP or RoCEv2 (--roce): it
// connects to -s (default 127.0.0.1) port -p (default 7471) with a receive of 16 bytes
// posted, SENDs 16 zero bytes, waits for the send's completion and the server's 16-byte
// answer, and disconnects. It prints "rdma_client: start" and "rdma_client: end %d" (0 on
// success) as rdma_client does.
//
// Where rdma_client would wait forever (a server that accepts and never answers, as the
// daemon's memory target does), softrnic gives up after --idle (default 60 s); --timeout
// bounds the whole run.
package rdmaclient

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
const Summary = "rdma-core rdma_client over iWARP or RoCEv2: rdma-client [-s server] [-p port] [--roce]"

// MsgLen is the size of the messages (send_msg, recv_msg).
const MsgLen = 16

// Options are rdma_client's settings and softrnic's own.
type Options struct {
	Server  string        // -s: the server (default 127.0.0.1)
	Port    int           // -p (default 7471)
	RoCE    bool          // --roce: RoCEv2 instead of iWARP
	Bind    string        // --bind: RoCEv2: the local link address (default: the route to the server)
	Timeout time.Duration // --timeout: bound on the whole run (0: none)
	Idle    time.Duration // --idle: give up after this long without the server's answer (0: never)

	Link hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultOptions are rdma_client's defaults.
func DefaultOptions() Options {
	return Options{Server: "127.0.0.1", Port: 7471, Idle: 60 * time.Second}
}

var opts = append([]tool.Opt{{Short: 's', Arg: true}, {Short: 'p', Arg: true},
	{Long: "roce"}, {Long: "bind", Arg: true}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, tool.LinkOpts...)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, "usage: softrnic rdma-client\n\t[-s server_address]\n\t[-p port_number]\n"+
		"\t[--roce]\t\tRoCEv2 (IB CM over UDP 4791) instead of iWARP\n\t[--bind addr]\t\tRoCEv2: local address\n"+
		"\t[--timeout d]\t\tgive up after d\n\t[--idle d]\t\tgive up after d without the server's answer (default 60s)\n"+hostlink.FlagUsage)
}

// ParseArgs parses rdma_client's command line.
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	operands, err := tool.Parse(args, opts, tool.Common{Link: &o.Link, Timeout: &o.Timeout, Idle: &o.Idle}, func(a tool.Arg) error {
		switch {
		case a.Short == 's':
			o.Server = a.Value
		case a.Short == 'p':
			p, err := strconv.ParseUint(a.Value, 10, 16)
			if err != nil {
				return fmt.Errorf("invalid port %q", a.Value)
			}
			o.Port = int(p)
		case a.Long == "roce":
			o.RoCE = true
		case a.Long == "bind":
			o.Bind = a.Value
		}
		return nil
	})
	if err == nil {
		err = tool.NoOperands(operands)
	}
	return o, err
}

// Main is the "softrnic rdma-client" command.
func Main(args []string) int {
	return tool.Main("rdma-client", args, ParseArgs, Usage, func(ctx context.Context, o Options, stdout, stderr io.Writer) error {
		return tool.Reported(Run(ctx, o, stdout, stderr)) // Run printed it, as rdma_client does
	})
}

// Run makes one exchange, printing rdma_client's lines to stdout and errors to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	out, errOut := tool.Output(stdout), tool.Output(stderr)
	fmt.Fprintf(out, "rdma_client: start\n")
	ctx, cancel := tool.WithTimeout(ctx, o.Timeout)
	defer cancel()
	err := run(ctx, &o)
	ret := 0
	if err != nil {
		fmt.Fprintf(errOut, "rdma_client: %v\n", err)
		ret = -1
	}
	fmt.Fprintf(out, "rdma_client: end %d\n", ret)
	return err
}

func run(ctx context.Context, o *Options) error {
	dev, t, err := tool.OpenCM(o.RoCE, o.Bind, o.Server)
	if dev != nil {
		defer dev.Close()
	}
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer t.Close()
	c, err := tool.NewMsgQP(dev, MsgLen)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.PostRecv(); err != nil {
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	// rdma_connect(id, NULL): librdmacm offers the device's maximum Read depths
	conn, err := t.Dial(ctx, c.QP, net.JoinHostPort(o.Server, strconv.Itoa(o.Port)),
		cm.Param{IRD: dev.Config().MaxIRD, ORD: dev.Config().MaxORD})
	if err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	defer conn.Close()
	wctx, _, stop := tool.NewWatchdog(ctx, o.Idle, fmt.Errorf("no answer from the server for %v", o.Idle))
	defer stop()
	if err := c.PostSend(); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	if err := c.Wait(wctx, rnic.WCSend); err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	if err := c.Wait(wctx, rnic.WCRecv); err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	_ = conn.Disconnect(dctx)
	return nil
}
