// Package stat is "softrnic stat": it reads a running daemon's counters over its control
// socket (get=1, page after page of QPs, see internal/uapi) and prints them as a table or
// JSON, once or every -watch interval.
package stat

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/internal/uapi"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "print a daemon's device and per-QP counters [-sock path] [-json] [-watch 1s]"

// Options are stat's settings.
type Options struct {
	Sock  string        // control socket
	JSON  bool          // print JSON (one object per line with Watch)
	Watch time.Duration // print again every Watch until the context ends (0: once)
}

// ParseArgs builds Options from the command line; flag errors are printed to errOut.
func ParseArgs(args []string, errOut io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	fs.SetOutput(errOut)
	name := fs.String("name", tool.DefaultDevice, "device name (selects the default socket)")
	fs.StringVar(&o.Sock, "sock", "", "control socket (default /run/softrnic/<name>.sock)")
	fs.BoolVar(&o.JSON, "json", false, "print JSON (one object per line with -watch)")
	fs.DurationVar(&o.Watch, "watch", 0, "print again every interval until interrupted")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Watch < 0 {
		return o, fmt.Errorf("-watch %v: must not be negative", o.Watch)
	}
	if o.Sock == "" {
		o.Sock = uapi.SocketPath(*name)
	}
	return o, nil
}

// Main is the "softrnic stat" command: SIGINT and SIGTERM end a -watch loop.
func Main(args []string) int {
	o, err := ParseArgs(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "stat:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stat:", err)
		return 1
	}
	return 0
}

// Run prints the status to w once, or every o.Watch until ctx ends (which is not an error).
func Run(ctx context.Context, o Options, w, _ io.Writer) error {
	w = tool.Output(w)
	for {
		s, err := uapi.GetStatus(ctx, o.Sock) // each request bounded by uapi.RequestTimeout
		if err != nil {
			if o.Watch > 0 && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if o.JSON {
			b, err := json.Marshal(&s)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
				return err
			}
		} else if err := printStatus(w, &s); err != nil {
			return err
		}
		if o.Watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Watch):
		}
		if !o.JSON {
			fmt.Fprintln(w)
		}
	}
}

// printStatus prints the device line and a table with one row per QP and a total row.
func printStatus(w io.Writer, s *uapi.Status) error {
	fmt.Fprintf(w, "device %s", s.Device)
	if len(s.ListenIWARP) > 0 {
		fmt.Fprintf(w, "  iwarp %s", strings.Join(s.ListenIWARP, ","))
	}
	if len(s.ListenRoCEv2) > 0 {
		fmt.Fprintf(w, "  rocev2 %s", strings.Join(s.ListenRoCEv2, ","))
		if s.RoCEv2CMPort != 0 {
			fmt.Fprintf(w, " cm port %d", s.RoCEv2CMPort)
		}
	}
	fmt.Fprintln(w)
	if s.TargetLen > 0 {
		fmt.Fprintf(w, "target addr 0x%x rkey 0x%x len %d\n", s.TargetAddr, s.TargetRKey, s.TargetLen)
	}
	dc := &s.Daemon
	fmt.Fprintf(w, "qps %d  control clients %d (refused %d, idle closed %d, accept errors %d)  listen refused %d  target refused %d  rping sessions %d (refused %d, idle closed %d)\n",
		s.QPCount, dc.CtlClients, dc.CtlRefused, dc.CtlIdleClosed, dc.CtlAcceptErrors, dc.ListenRefused, dc.TargetRefused,
		dc.RpingSessions, dc.RpingRefused, dc.RpingIdleClosed)
	if s.Steering != "" {
		fmt.Fprintf(w, "attached %d (refused %d)  steering %s (steered %d, relay dropped %d)  MADs in %d out %d (dropped %d, refused %d)  QPN refused %d  DREQs for ended processes %d (resent %d, unanswered %d)\n",
			dc.Attached, dc.AttachRefused, s.Steering, dc.Steered, dc.RelayDropped, dc.MADsIn, dc.MADsOut, dc.MADDropped, dc.MADRefused,
			dc.QPNRefused, dc.DREQsSent, dc.DREQRetries, dc.DREQsUnanswered)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QPN\tPID\tCOMM\tTRANSPORT\tSTATE\tPEER\tTX_BYTES\tRX_BYTES\tTX_SEGS\tRX_SEGS\tCRC_ERR\tTERM_TX\tTERM_RX\tRETX\tNAKS\t")
	row := func(qpn, pid, comm, tr, st, peer string, c *uapi.Counters) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", qpn, pid, comm, tr, st, peer,
			c.TxBytes, c.RxBytes, c.TxSegments, c.RxSegments, c.CRCErrors, c.TermSent, c.TermRecv, c.Retransmits, c.NAKs)
	}
	for i := range s.QPs {
		q := &s.QPs[i]
		row(fmt.Sprint(q.QPN), fmt.Sprint(q.PID), dash(q.Comm), dash(q.Transport), q.State, dash(q.Peer), &q.Counters)
	}
	row("device", "-", "-", "-", "-", "-", &s.Counters)
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
