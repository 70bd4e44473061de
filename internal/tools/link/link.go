// Package link is "softrnic link show <netdev>": what a network device offers softrnic's
// datapaths — ethtool offloads, XDP and AF_XDP capabilities, MTU, queues — and how
// softrnic would run its AF_XDP datapath on it (link/netdev's Inspect, Choose and
// Render). It needs no daemon and no privileges, and works on any netdev, lo included;
// --probe (root) finds XDP capabilities by trying them where the kernel cannot say
// (before Linux 6.3).
//
// The overrides are those of link/netdev.Prefs, so the report shows what a forced
// choice does:
//
//	--mode auto|driver|generic   XDP attach mode (auto: driver mode when the driver
//	                             supports XDP_REDIRECT, else generic)
//	--zero-copy auto|on|off      AF_XDP zero-copy (auto: when the driver offers it in
//	                             driver mode)
//	--multi-buffer auto|on|off   XDP multi-buffer reception, XDP_USE_SG (auto: where the
//	                             kernel and driver have it)
//	--tx-checksum auto|on|off    AF_XDP TX checksum metadata for the user-space TCP
//	                             (auto: copy mode on Linux 6.11+, or a zero-copy driver
//	                             with the tx-checksum xsk feature)
//	--json                       print Info and Choice as JSON instead
package link

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netdev"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "show a netdev's offloads and XDP capabilities and the AF_XDP datapath softrnic would use: link show <netdev>"

// Options are link's settings.
type Options struct {
	// Netdev is the network device to report on.
	Netdev string
	// Prefs override the choices.
	Prefs netdev.Prefs
	// Probe finds the XDP capabilities by trying them when the kernel cannot report
	// them (root; briefly attaches a program to the netdev).
	Probe bool
	// JSON prints the inspection and the choice as JSON.
	JSON bool
}

const usageText = `usage: softrnic link show [flags] <netdev>

Reports what <netdev> offers softrnic (ethtool offloads, XDP/AF_XDP capabilities, MTU,
queues) and how softrnic's AF_XDP datapath would run on it. No daemon or privileges needed.

flags:
  --mode auto|driver|generic   XDP attach mode
  --zero-copy auto|on|off      AF_XDP zero-copy
  --multi-buffer auto|on|off   XDP multi-buffer reception (XDP_USE_SG)
  --tx-checksum auto|on|off    AF_XDP TX checksum metadata for the user-space TCP
  --probe                      find XDP capabilities by trying them (root; kernels before 6.3)
  --json                       print the inspection and the choice as JSON
`

// Usage writes the usage text.
func Usage(w io.Writer) { _, _ = io.WriteString(w, usageText) }

// ParseArgs builds Options from the command line: "show", flags, the netdev.
func ParseArgs(args []string) (Options, error) {
	var o Options
	if len(args) == 0 || args[0] != "show" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			Usage(flagOutput)
			return o, flag.ErrHelp
		}
		return o, errors.New("want: link show [flags] <netdev>")
	}
	fs := flag.NewFlagSet("link show", flag.ContinueOnError)
	fs.SetOutput(flagOutput)
	fs.Usage = func() { Usage(flagOutput) }
	mode := fs.String("mode", "auto", "XDP attach mode: auto, driver or generic")
	zc := fs.String("zero-copy", "auto", "AF_XDP zero-copy: auto, on or off")
	mb := fs.String("multi-buffer", "auto", "XDP multi-buffer: auto, on or off")
	cs := fs.String("tx-checksum", "auto", "AF_XDP TX checksum metadata: auto, on or off")
	fs.BoolVar(&o.Probe, "probe", false, "find XDP capabilities by trying them (root)")
	fs.BoolVar(&o.JSON, "json", false, "print JSON")
	// flags may come before or after the netdev
	rest := args[1:]
	var pos []string
	for {
		if err := fs.Parse(rest); err != nil {
			return o, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) != 1 {
		return o, fmt.Errorf("want one netdev, got %d arguments", len(pos))
	}
	o.Netdev = pos[0]
	var err error
	switch *mode {
	case "auto":
	case "driver":
		o.Prefs.Mode = afxdp.ModeDriver
	case "generic":
		o.Prefs.Mode = afxdp.ModeGeneric
	default:
		return o, fmt.Errorf("--mode %q: want auto, driver or generic", *mode)
	}
	for _, t := range []struct {
		name string
		v    string
		dst  *netdev.Tristate
	}{{"zero-copy", *zc, &o.Prefs.ZeroCopy}, {"multi-buffer", *mb, &o.Prefs.MultiBuffer}, {"tx-checksum", *cs, &o.Prefs.TxChecksum}} {
		if *t.dst, err = tristate(t.name, t.v); err != nil {
			return o, err
		}
	}
	return o, nil
}

// flagOutput is where flag errors and -h go (Main's stderr; io.Discard in tests).
var flagOutput io.Writer = io.Discard

func tristate(name, v string) (netdev.Tristate, error) {
	switch strings.ToLower(v) {
	case "auto":
		return netdev.Auto, nil
	case "on":
		return netdev.On, nil
	case "off":
		return netdev.Off, nil
	}
	return netdev.Auto, fmt.Errorf("--%s %q: want auto, on or off", name, v)
}

// Main is the "softrnic link" command.
func Main(args []string) int {
	flagOutput = os.Stderr
	return tool.Main("link", args, ParseArgs, Usage, Run)
}

// Run inspects o.Netdev and writes the report to stdout.
func Run(_ context.Context, o Options, stdout, stderr io.Writer) error {
	stdout = tool.Output(stdout)
	in, err := netdev.Inspect(o.Netdev)
	if err != nil {
		return err
	}
	if o.Probe && in.XDP.Source != "netdev-genl" {
		caps, err := netdev.Probe(o.Netdev)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		in.XDP = caps
	}
	c := netdev.Choose(in, o.Prefs)
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Info   *netdev.Info
			Choice netdev.Choice
		}{in, c})
	}
	return netdev.Render(stdout, in, c)
}
