package main

// softrnic dat-conf prints the dat.conf lines of the uDAPL provider library
// (udapl/, libdaplsoftrnic.so); the command is internal/datconf.

import "github.com/softrnic/softrnic/internal/datconf"

func init() {
	register(command{name: "dat-conf", usage: datconf.Summary, run: datconf.Main})
}
