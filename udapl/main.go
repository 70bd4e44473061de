//go:build udapl

// Command udapl is softrnic's uDAPL 2.0 provider for OFA DAPL's libdat2: a
// shared library, libdaplsoftrnic.so, that unmodified uDAPL programs (OFA's
// dtest and dapltest among them) load through dat.conf, with the softrnic
// engine (package dat over rnic) running inside their process.
//
// Build it (needs cgo, gcc and Debian's libdapl-dev for the DAT headers in
// /usr/include/dat2 and libdat2.so):
//
//	go build -tags udapl -buildmode=c-shared -o libdaplsoftrnic.so ./udapl
//
// and register it with "softrnic dat-conf -lib libdaplsoftrnic.so >
// dat.conf; export DAT_OVERRIDE=$PWD/dat.conf". A Go runtime cannot be
// unloaded, and libdat2 dlcloses a provider when its last IA closes, so
// dat_provider_init marks the loaded library RTLD_NODELETE (what linking
// with -z nodelete does; cgo does not allow that flag in #cgo LDFLAGS).
//
// Layout: provider.c holds the struct dat_provider table and C entry points
// with the exact DAT prototypes; each forwards to a Go function exported
// from the files here (ia.go, evd.go, ep.go, cm.go, mem.go), which work on
// package dat. handle.go maps C handles to Go objects and back; convert.go
// translates constants, addresses, attributes and events.
//
// The build tag keeps "go build ./..." and "go vet ./..." free of cgo and of
// the libdapl-dev dependency.
package main

/*
#cgo CFLAGS: -Wall -Werror=incompatible-pointer-types
#cgo LDFLAGS: -ldat2
#include "provider.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/softrnic/softrnic/dat"
	"github.com/softrnic/softrnic/internal/datconf"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

func main() {}

// provider is one IA name registered with libdat2: its C function table
// and the package dat provider behind it. Providers are kept for the life
// of the process (libdat2 may init and fini the same name many times; the
// library is never unloaded), so their number is bounded by the names of
// dat.conf.
type provider struct {
	name  string
	c     *C.DAT_PROVIDER
	dname *C.char
	p     *dat.Provider
	regs  map[regKey]int // libdat2 registrations (dat_provider_init calls) by info
	opens int            // open IAs
}

// regKey is the DAT_PROVIDER_INFO libdat2 keys its registry with.
type regKey struct {
	major, minor uint32
	threadSafe   bool
}

var (
	provMu    sync.Mutex
	providers = map[string]*provider{}
	registry  = dat.NewRegistry()
)

//export srProviderInit
func srProviderInit(info *C.DAT_PROVIDER_INFO, params *C.char) {
	if info == nil {
		return
	}
	name := C.GoString(&info.ia_name[0])
	key := regKey{uint32(info.dapl_version_major), uint32(info.dapl_version_minor), info.is_thread_safe != 0}
	provMu.Lock()
	defer provMu.Unlock()
	pr := providers[name]
	if pr == nil {
		var ps string
		if params != nil {
			ps = C.GoString(params)
		}
		ip, err := datconf.ParseIAParams(ps)
		if err != nil {
			warn("softrnic: provider %s: %v", name, err)
			return
		}
		inst, err := ip.InstanceData()
		if err != nil {
			warn("softrnic: provider %s: %v", name, err)
			return
		}
		p := &dat.Provider{Info: dat.ProviderInfo{Name: name, VersionMajor: dat.VersionMajor,
			VersionMinor: dat.VersionMinor, ThreadSafe: true}, InstanceData: inst, IWARP: iwarpConfig()}
		if err := registry.AddProvider(p); err != nil {
			warn("softrnic: provider %s: %v", name, err)
			return
		}
		pr = &provider{name: name, p: p, regs: map[regKey]int{}}
		pr.c = (*C.DAT_PROVIDER)(C.calloc(1, C.sizeof_DAT_PROVIDER))
		pr.dname = C.CString(name)
		C.sr_fill_provider(pr.c, pr.dname)
		providers[name] = pr
	}
	if pr.regs[key] == 0 {
		if r := C.dat_registry_add_provider(pr.c, info); r != 0 {
			warn("softrnic: dat_registry_add_provider %s: %v", name, dat.FromCode(uint32(r)))
			return
		}
	}
	pr.regs[key]++
}

//export srProviderFini
func srProviderFini(info *C.DAT_PROVIDER_INFO) {
	if info == nil {
		return
	}
	name := C.GoString(&info.ia_name[0])
	key := regKey{uint32(info.dapl_version_major), uint32(info.dapl_version_minor), info.is_thread_safe != 0}
	provMu.Lock()
	defer provMu.Unlock()
	pr := providers[name]
	if pr == nil || pr.regs[key] == 0 {
		return
	}
	pr.regs[key]--
	if pr.regs[key] == 0 {
		delete(pr.regs, key)
		C.dat_registry_remove_provider(pr.c, info)
	}
}

// lookupProvider returns the provider registered under name.
func lookupProvider(name string) *provider {
	provMu.Lock()
	defer provMu.Unlock()
	return providers[name]
}

// cstr copies s into the C array dst of n bytes, NUL terminated.
func cstr(dst *C.char, n int, s string) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(dst)), n)
	k := copy(b[:n-1], s)
	b[k] = 0
}

// iwarpConfig is the iWARP transport configuration of the provider's IAs:
// the package dat default (RFC 7306 extensions on, for the IB extension
// operations) except that the IA does not ask for MPA CRCs. softrnic
// transmits straight from registered memory and computes the CRC over it,
// so a Consumer that rewrites a buffer while a Write or Read Response from
// it is on the wire (dtest -w rewrites its source buffer between writes;
// dtest -c rewrites the buffer its peer is reading) made the peer see a CRC
// error and terminate the connection, where a hardware RNIC delivers the
// torn data. CRCs are still used when the peer asks for them (RFC 5044
// §7.1: either side's C bit); Linux siw does not by default.
func iwarpConfig() *iwarp.Config {
	c := iwarp.DefaultConfig()
	c.Extensions = true
	c.MPA.CRC = false
	return c
}
