package main

// softrnic stat reads a running daemon's counters over its control socket (get=1, see
// internal/uapi) and prints them as a table or JSON, once or every -watch interval.

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

	"github.com/softrnic/softrnic/internal/uapi"
)

func init() {
	register(command{name: "stat", usage: "print a daemon's device and per-QP counters [-sock path] [-json] [-watch 1s]", run: runStat})
}

type statOpts struct {
	sock  string
	json  bool
	watch time.Duration
}

func parseStatArgs(args []string, errOut io.Writer) (statOpts, error) {
	var o statOpts
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	fs.SetOutput(errOut)
	name := fs.String("name", daemonDefName, "device name (selects the default socket)")
	fs.StringVar(&o.sock, "sock", "", "control socket (default /run/softrnic/<name>.sock)")
	fs.BoolVar(&o.json, "json", false, "print JSON (one object per line with -watch)")
	fs.DurationVar(&o.watch, "watch", 0, "print again every interval until interrupted")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.watch < 0 {
		return o, fmt.Errorf("-watch %v: must not be negative", o.watch)
	}
	if o.sock == "" {
		o.sock = sockPath(*name)
	}
	return o, nil
}

func runStat(args []string) int {
	o, err := parseStatArgs(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "stat:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := statLoop(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stat:", err)
		return 1
	}
	return 0
}

// statLoop prints the status once, or every o.watch until ctx ends (which is not an error).
func statLoop(ctx context.Context, o statOpts, w io.Writer) error {
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := uapi.GetStatus(qctx, o.sock)
		cancel()
		if err != nil {
			if o.watch > 0 && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if o.json {
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
		if o.watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.watch):
		}
		if !o.json {
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
		fmt.Fprintf(w, "  rocev2 %s cm port %d", strings.Join(s.ListenRoCEv2, ","), s.RoCEv2CMPort)
	}
	fmt.Fprintln(w)
	if s.TargetLen > 0 {
		fmt.Fprintf(w, "target addr 0x%x rkey 0x%x len %d\n", s.TargetAddr, s.TargetRKey, s.TargetLen)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QPN\tTRANSPORT\tSTATE\tPEER\tTX_BYTES\tRX_BYTES\tTX_SEGS\tRX_SEGS\tCRC_ERR\tTERM_TX\tTERM_RX\tRETX\tNAKS\t")
	row := func(qpn, tr, st, peer string, c *uapi.Counters) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", qpn, tr, st, peer,
			c.TxBytes, c.RxBytes, c.TxSegments, c.RxSegments, c.CRCErrors, c.TermSent, c.TermRecv, c.Retransmits, c.NAKs)
	}
	for i := range s.QPs {
		q := &s.QPs[i]
		row(fmt.Sprint(q.QPN), q.Transport, q.State, q.Peer, &q.Counters)
	}
	row("device", "-", "-", "-", &s.Counters)
	return tw.Flush()
}
