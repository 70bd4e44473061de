// Package res is "softrnic res show qp|cq|mr|pd" and "softrnic dev": the resources of a softrnic
// daemon's device across every process attached to it, in the manner of iproute2's
// "rdma res show qp" and "rdma dev" (-j prints JSON). They read the daemon's control
// socket (internal/uapi), paging through the QPs.
package res

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/internal/uapi"
)

// Summaries "softrnic help" prints.
const (
	Summary    = "list a daemon device's QPs, CQs, MRs or PDs across its processes: res show qp|cq|mr|pd [-j] [-sock path]"
	DevSummary = "show a daemon's device: address, steering, attached processes [-j] [-sock path]"
)

// Options are the commands' settings.
type Options struct {
	Sock string // control socket
	JSON bool   // -j
}

func parse(name string, args []string, errOut io.Writer) (Options, []string, error) {
	var o Options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	dev := fs.String("d", tool.DefaultDevice, "device name (selects the default socket)")
	fs.StringVar(&o.Sock, "sock", "", "control socket (default $SOFTRNIC_SOCK, else /run/softrnic/<name>.sock)")
	fs.BoolVar(&o.JSON, "j", false, "print JSON")
	// flags may come before, between and after the operands (rdma res show qp -j)
	var ops []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, nil, err
		}
		args = fs.Args()
		for len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
			ops, args = append(ops, args[0]), args[1:]
		}
		if len(args) == 0 {
			break
		}
	}
	if o.Sock == "" {
		o.Sock = uapi.SocketPath(*dev)
	}
	return o, ops, nil
}

func run(name string, args []string, f func(context.Context, Options, []string, io.Writer) error) int {
	o, rest, err := parse(name, args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, name+":", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f(ctx, o, rest, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

var errUsage = errors.New(`usage: softrnic res show qp|cq|mr|pd [-j] [-d name] [-sock path]`)

// Main is "softrnic res".
func Main(args []string) int { return run("res", args, Res) }

// DevMain is "softrnic dev".
func DevMain(args []string) int { return run("dev", args, Dev) }

// Res runs "res show qp" (the operands after the flags: "show", "qp"; "show" alone
// means qp too). Flags may also follow the operands (rdma res show qp -j).
func Res(ctx context.Context, o Options, ops []string, w io.Writer) error {
	switch {
	case len(ops) == 0, len(ops) == 1 && ops[0] == "show", len(ops) == 2 && ops[0] == "show" && ops[1] == "qp":
	case len(ops) == 2 && ops[0] == "show" && slices.Contains(uapi.ResKinds, ops[1]):
		return showRes(ctx, o, ops[1], w)
	default:
		return errUsage
	}
	s, err := uapi.GetStatus(ctx, o.Sock)
	if err != nil {
		return err
	}
	w = tool.Output(w)
	if o.JSON {
		return json.NewEncoder(w).Encode(s.QPs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEV\tQPN\tPID\tCOMM\tSTATE\tTRANSPORT\tPEER\tTX_BYTES\tRX_BYTES")
	for _, q := range s.QPs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Device, q.QPN, q.PID, dash(q.Comm), q.State, dash(q.Transport),
			dash(q.Peer), q.Counters.TxBytes, q.Counters.RxBytes)
	}
	return tw.Flush()
}

// showRes prints the device's CQs, MRs or PDs, in the columns (and JSON keys) of
// iproute2's "rdma res show cq|mr|pd".
func showRes(ctx context.Context, o Options, kind string, w io.Writer) error {
	st, err := uapi.GetRes(ctx, o.Sock, kind)
	if err != nil {
		return err
	}
	rs := st.Res
	w = tool.Output(w)
	if o.JSON {
		out := make([]map[string]any, len(rs))
		for i, r := range rs {
			m := map[string]any{"ifname": st.Device, "pid": r.PID, "comm": r.Comm}
			switch kind {
			case "cq":
				m["cqn"], m["cqe"], m["queued"] = r.Num, r.Size, r.Used
				if r.Flags != "" {
					m["flags"] = r.Flags
				}
			case "mr":
				m["mrn"], m["rkey"], m["lkey"], m["mrlen"], m["iova"], m["pdn"], m["access"] = r.Num>>8, r.Num, r.Num, r.Size, r.IOVA, r.PD, r.Flags
			case "pd":
				m["pdn"], m["users"] = r.Num, r.Used
			}
			out[i] = m
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch kind {
	case "cq":
		fmt.Fprintln(tw, "DEV\tCQN\tCQE\tQUEUED\tPID\tCOMM\tFLAGS")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", st.Device, r.Num, r.Size, r.Used, r.PID, dash(r.Comm), dash(r.Flags))
		}
	case "mr":
		fmt.Fprintln(tw, "DEV\tMRN\tRKEY\tLKEY\tMRLEN\tIOVA\tPDN\tPID\tCOMM\tACCESS")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%d\t0x%x\t0x%x\t%d\t0x%x\t%d\t%d\t%s\t%s\n", st.Device, r.Num>>8, r.Num, r.Num, r.Size, r.IOVA, r.PD, r.PID,
				dash(r.Comm), r.Flags)
		}
	case "pd":
		fmt.Fprintln(tw, "DEV\tPDN\tUSERS\tPID\tCOMM")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", st.Device, r.Num, r.Used, r.PID, dash(r.Comm))
		}
	}
	return tw.Flush()
}

// devInfo is what "dev" prints.
type devInfo struct {
	Device    string              `json:"device"`
	RoCEv2    []string            `json:"rocev2"`
	IWARP     []string            `json:"iwarp"`
	Steering  string              `json:"steering"`
	Netdev    string              `json:"netdev"`
	PortState string              `json:"port_state"`
	MTU       int                 `json:"mtu"`
	GIDs      []string            `json:"gids"`
	QPs       uint64              `json:"qps"`
	Processes []uapi.ProcStatus   `json:"processes"`
	Counters  uapi.DaemonCounters `json:"counters"`
}

// Dev runs "dev".
func Dev(ctx context.Context, o Options, ops []string, w io.Writer) error {
	if len(ops) > 1 || len(ops) == 1 && ops[0] != "show" {
		return errors.New("usage: softrnic dev [show] [-j] [-d name] [-sock path]")
	}
	s, err := uapi.GetStatus(ctx, o.Sock)
	if err != nil {
		return err
	}
	d := devInfo{Device: s.Device, RoCEv2: s.ListenRoCEv2, IWARP: s.ListenIWARP, Steering: s.Steering, Netdev: s.Netdev,
		PortState: s.PortState, MTU: s.MTU, GIDs: s.GIDs, QPs: s.QPCount, Processes: s.Processes, Counters: s.Daemon}
	w = tool.Output(w)
	if o.JSON {
		return json.NewEncoder(w).Encode(&d)
	}
	fmt.Fprintf(w, "%s: rocev2 %v iwarp %v steering %s qps %d attached %d\n", d.Device, d.RoCEv2, d.IWARP, dash(d.Steering), d.QPs, len(d.Processes))
	if d.Netdev != "" {
		fmt.Fprintf(w, "port 1 state %s netdev %s mtu %d\n", d.PortState, d.Netdev, d.MTU)
		for i, g := range d.GIDs {
			fmt.Fprintf(w, "gid %d %s\n", i, g)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCOMM\tSLOT\tQPS\tSINCE")
	for _, p := range d.Processes {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\n", p.PID, dash(p.Comm), p.Slot, p.QPs, time.Unix(p.Since, 0).UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
