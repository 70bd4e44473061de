// Package datconf writes and reads the dat.conf entries of softrnic's uDAPL
// provider library (libdaplsoftrnic.so, built from ../../udapl).
//
// OFA DAPL's libdat2 reads its static registry from the file named by
// DAT_OVERRIDE, or /etc/dat.conf, one provider per line:
//
//	<ia_name> u2.0 <nonthreadsafe|threadsafe> <default|nondefault> <lib_path> <prov_version> "<ia_params>" "<platform_params>"
//
// libdat2 (dapl-2.1.10 dat/common/dat_sr.c, udat_sr_parser.c) loads only
// "default" entries and looks an IA name up together with the API version and
// the thread safety the application asks for (dtest and dapltest ask for
// nonthreadsafe, DAT_THREADSAFE in udat_config.h). The softrnic engine is
// thread safe, so Entries lists each IA twice, once per thread-safety value,
// and either request finds it.
//
// The ia_params of a softrnic entry are "<transport> <address>", the
// instance data of package dat: transport "iwarp" or "rocev2", address an IP
// address or a network interface name, for rocev2 optionally followed by
// ":<udp port>" (default 4791); or "rocev2 @<device>": the device of a running
// softrnic daemon, which the IA attaches to (package host).
package datconf

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softrnic/softrnic/dat"
)

// Provider IA names.
const (
	IWARP  = "softrnic-iwarp"
	RoCEv2 = "softrnic-rocev2"
)

// DefaultAddress is the address the entries use when none is given.
const DefaultAddress = "127.0.0.1"

// Entries returns the dat.conf entries for the provider library at lib: the
// iWARP and RoCEv2 IAs on addr (an IP address or an interface name; empty
// means DefaultAddress), each as a nonthreadsafe and a threadsafe line.
func Entries(lib, addr string) []dat.ConfEntry {
	if addr == "" {
		addr = DefaultAddress
	}
	var out []dat.ConfEntry
	for _, p := range []struct{ name, transport string }{{IWARP, "iwarp"}, {RoCEv2, "rocev2"}} {
		for _, ts := range []bool{false, true} {
			out = append(out, dat.ConfEntry{
				IAName: p.name, APIMajor: dat.VersionMajor, APIMinor: dat.VersionMinor,
				ThreadSafe: ts, Default: true, Library: lib,
				ProviderID: "softrnic", ProviderMajor: 1, ProviderMinor: 0,
				InstanceData: p.transport + " " + addr,
			})
		}
	}
	return out
}

// Write writes Entries(lib, addr) in dat.conf format, after a comment line
// saying how to use them.
func Write(w io.Writer, lib, addr string) error {
	if _, err := fmt.Fprintf(w, "# softrnic uDAPL provider: export DAT_OVERRIDE=<this file>, or append to /etc/dat.conf\n"); err != nil {
		return err
	}
	return dat.WriteConf(w, Entries(lib, addr))
}

// IAParams are parsed ia_params of a softrnic dat.conf entry.
type IAParams struct {
	Transport string // "iwarp" or "rocev2"
	Address   string // IP address or interface name, as written
	Port      int    // RoCEv2 UDP port; 0 means the default
	Device    string // "rocev2 @<device>": a device of the softrnic daemon (Address and Port unused)
}

// ErrBadParams reports ia_params that are not "<transport> <address>".
var ErrBadParams = errors.New("datconf: ia_params must be \"<iwarp|rocev2> <address|interface>[:<udp port>]\" or \"rocev2 @<device>\"")

// ParseIAParams parses the ia_params of a softrnic entry. A missing address
// is DefaultAddress.
func ParseIAParams(s string) (IAParams, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return IAParams{}, ErrBadParams
	}
	p := IAParams{Transport: f[0], Address: DefaultAddress}
	if p.Transport != "iwarp" && p.Transport != "rocev2" {
		return IAParams{}, fmt.Errorf("%w: unknown transport %q", ErrBadParams, p.Transport)
	}
	if len(f) == 2 {
		p.Address = f[1]
	}
	if dev, ok := strings.CutPrefix(p.Address, "@"); ok {
		if p.Transport != "rocev2" || dev == "" || strings.ContainsAny(dev, "/:@") {
			return IAParams{}, fmt.Errorf("%w: a device is \"rocev2 @<name>\"", ErrBadParams)
		}
		return IAParams{Transport: p.Transport, Device: dev}, nil
	}
	if ap, err := netip.ParseAddrPort(p.Address); err == nil {
		p.Address, p.Port = ap.Addr().String(), int(ap.Port())
	} else if host, port, ok := strings.Cut(p.Address, ":"); ok && !strings.Contains(port, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 0xFFFF {
			return IAParams{}, fmt.Errorf("%w: bad port %q", ErrBadParams, port)
		}
		p.Address, p.Port = host, n
	}
	if p.Port != 0 && p.Transport != "rocev2" {
		return IAParams{}, fmt.Errorf("%w: a port is only meaningful for rocev2", ErrBadParams)
	}
	if p.Address == "" {
		return IAParams{}, ErrBadParams
	}
	return p, nil
}

// InstanceData resolves the address (an interface name becomes the first
// IPv4 address of the interface, else its first IPv6 address) and returns
// the instance data of package dat's Provider: "<transport> <ip>[:<port>]".
func (p IAParams) InstanceData() (string, error) {
	if p.Device != "" {
		return p.Transport + " @" + p.Device, nil
	}
	ip, err := resolve(p.Address)
	if err != nil {
		return "", err
	}
	addr := ip.String()
	if p.Port != 0 {
		addr = netip.AddrPortFrom(ip, uint16(p.Port)).String()
	}
	return p.Transport + " " + addr, nil
}

func resolve(s string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Unmap(), nil
	}
	ifc, err := net.InterfaceByName(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("datconf: %q is neither an IP address nor an interface: %w", s, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("datconf: addresses of %s: %w", s, err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		if ip.Is4() {
			return ip, nil
		}
		if !v6.IsValid() && !ip.IsLinkLocalUnicast() {
			v6 = ip
		}
	}
	if v6.IsValid() {
		return v6, nil
	}
	return netip.Addr{}, fmt.Errorf("datconf: interface %s has no usable IP address", s)
}
