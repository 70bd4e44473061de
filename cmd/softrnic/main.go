// Command softrnic is the softrnic daemon and its tools.
//
// Each subcommand lives in its own file and registers itself with register in an init
// function, so tools can be added without touching this file.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/softrnic/softrnic/internal/tools/demo"
	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/pingpong"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/tools/stat"
)

func init() {
	register(command{name: "demo", usage: demo.Summary, run: demo.Main})
	register(command{name: "stat", usage: stat.Summary, run: stat.Main})
	register(command{name: "rping", usage: rping.Summary, run: rping.Main})
	register(command{name: "perftest", usage: perftest.Summary, run: perftest.Main})
	register(command{name: "pingpong", usage: pingpong.Summary, run: pingpong.Main})
}

// command is one subcommand of softrnic.
type command struct {
	name  string
	usage string                  // one-line summary shown by "softrnic help"
	run   func(args []string) int // returns the process exit code
}

var commands = map[string]command{}

// register adds a subcommand; it is called from init functions.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("softrnic: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: softrnic <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].usage)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "softrnic: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
