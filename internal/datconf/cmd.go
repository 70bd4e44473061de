package datconf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Summary is the one-line summary of the "softrnic dat-conf" command.
const Summary = "print dat.conf entries for the uDAPL provider library -lib path [-addr ip|ifname]"

// Main is the "softrnic dat-conf" command on the process's standard output
// and error; it returns the exit code.
func Main(args []string) int { return Run(args, os.Stdout, os.Stderr) }

// Run prints the dat.conf entries of the provider library given with -lib
// (made absolute, as libdat2 dlopens it from any working directory) on the
// address or interface given with -addr, and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dat-conf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lib := fs.String("lib", "", "path of libdaplsoftrnic.so (required)")
	addr := fs.String("addr", DefaultAddress, "IP address or network interface of both IAs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 || *lib == "" {
		fmt.Fprintln(stderr, "usage: softrnic dat-conf -lib <path to libdaplsoftrnic.so> [-addr <ip|interface>]")
		return 2
	}
	p := *lib
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if _, err := ParseIAParams("iwarp " + *addr); err != nil {
		fmt.Fprintln(stderr, "softrnic dat-conf:", err)
		return 2
	}
	if err := Write(stdout, p, *addr); err != nil {
		fmt.Fprintln(stderr, "softrnic dat-conf:", err)
		return 1
	}
	return 0
}
