// Command softrnic is the softrnic daemon and its tools. This file is only the command
// table: each command is a package under internal/ (internal/daemon, internal/tools/...)
// with typed options, its own argument parsing and a Main entry.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/softrnic/softrnic/internal/daemon"
	"github.com/softrnic/softrnic/internal/datconf"
	"github.com/softrnic/softrnic/internal/tools/cmatose"
	"github.com/softrnic/softrnic/internal/tools/demo"
	"github.com/softrnic/softrnic/internal/tools/link"
	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/pingpong"
	"github.com/softrnic/softrnic/internal/tools/rdmaclient"
	"github.com/softrnic/softrnic/internal/tools/rdmaserver"
	"github.com/softrnic/softrnic/internal/tools/res"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/tools/stat"
	"github.com/softrnic/softrnic/internal/tools/target"
	"github.com/softrnic/softrnic/internal/tools/udaddy"
)

// command is one subcommand of softrnic.
type command struct {
	name    string
	summary string                  // one line shown by "softrnic help"
	main    func(args []string) int // returns the process exit code
}

// commands, in the order "softrnic help" lists them.
var commands = []command{
	{"cmatose", cmatose.Summary, cmatose.Main},
	{"daemon", daemon.Summary, daemon.Main},
	{"dat-conf", datconf.Summary, datconf.Main},
	{"demo", demo.Summary, demo.Main},
	{"dev", res.DevSummary, res.DevMain},
	{"link", link.Summary, link.Main},
	{"perftest", perftest.Summary, perftest.Main},
	{"pingpong", pingpong.Summary, pingpong.Main},
	{"rdma-client", rdmaclient.Summary, rdmaclient.Main},
	{"rdma-server", rdmaserver.Summary, rdmaserver.Main},
	{"res", res.Summary, res.Main},
	{"rping", rping.Summary, rping.Main},
	{"stat", stat.Summary, stat.Main},
	{"target", target.Summary, target.Main},
	{"udaddy", udaddy.Summary, udaddy.Main},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: softrnic <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\nenvironment:\n  %s=file  write a CPU profile of the command to file (go tool pprof)\n", profileEnv)
}

// profileEnv names the file a command's CPU profile is written to (runtime/pprof), for
// finding where the time goes where only the binary runs (the interop guest, a user's host).
const profileEnv = "SOFTRNIC_CPUPROFILE"

// profiled runs main with args, under a CPU profile when profileEnv is set.
func profiled(main func([]string) int, args []string) int {
	path := os.Getenv(profileEnv)
	if path == "" {
		return main(args)
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softrnic: %s: %v\n", profileEnv, err)
		return 1
	}
	code := main(args)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "softrnic: %s: %v\n", profileEnv, err)
	}
	return code
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			os.Exit(profiled(c.main, os.Args[2:]))
		}
	}
	fmt.Fprintf(os.Stderr, "softrnic: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}
