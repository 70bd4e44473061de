// Package udapl runs OFA DAPL's own uDAPL test programs, dtest and dapltest
// from Debian's dapl2-utils (libdat2 2.1.10), unmodified against softrnic's
// provider library (../../udapl, libdaplsoftrnic.so) on loopback, and checks
// that 1,000 dat_ia_open/dat_ia_close cycles in one C process keep a flat
// resident set.
//
// The tests build the library with the documented command and write a
// DAT_OVERRIDE dat.conf with internal/datconf (what "softrnic dat-conf"
// prints). They need gcc, cgo, Debian's libdapl-dev (DAT headers, libdat2)
// and dapl2-utils; without them they skip, saying what is missing.
//
//	go test ./tests/udapl                 # run
//	go test ./tests/udapl -args -update   # also rewrite the results table in udapl/README.md
package udapl
