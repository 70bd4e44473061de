package main

// softrnic dat-conf prints the dat.conf lines of the uDAPL provider library
// (udapl/, libdaplsoftrnic.so); the logic is in internal/datconf.

import (
	"os"

	"github.com/softrnic/softrnic/internal/datconf"
)

func init() {
	register(command{name: "dat-conf", usage: datconf.Usage, run: func(args []string) int {
		return datconf.Main(args, os.Stdout, os.Stderr)
	}})
}
