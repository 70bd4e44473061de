package daemon

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/tools/target"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
)

// Defaults of the daemon.
const (
	DefaultTargetMiB = 0    // no memory target: "softrnic target" is one, a process of the device
	DefaultCMPort    = 7471 // RDMA-CM port of the RoCEv2 memory target
	MaxTargetMiB     = 4095 // the advertisement's length is 32 bits

	DefaultMaxListeners     = 16               // iWARP listeners of the memory target
	DefaultRpingIdleTimeout = 60 * time.Second // rping sessions without a message
)

// Options are the daemon's settings (flags, or a -config file of the same names).
type Options struct {
	Name         string        // -name: device name
	Sock         string        // -sock: control socket
	IWARP        []string      // -iwarp: iWARP listen addresses (host:port)
	RoCEv2       string        // -rocev2: RoCEv2 link address ip[:udpport]
	CMPort       int           // -rocev2-cm-port: RDMA-CM port of the RoCEv2 target listener
	PeerPort     int           // -rocev2-peer-port: force RoCEv2 peers' UDP port (-1: by the source port, IBTA A17)
	TargetMiB    int           // -target-mib: size of the memory target (0: none)
	CRC          bool          // -crc: iWARP: request MPA CRC32c
	Rping        string        // -rping: host:port of an rping server ("" = none)
	Perftest     string        // -perftest: host:port of a perftest server ("" = none)
	PerftestVerb perftest.Verb // -perftest-verb
	Foreground   bool          // -foreground: do not detach (Main only)
	LogFile      string        // -log: append the log to this file (Main only)
	LogJSON      bool          // -log-json: log JSON records instead of text (log/slog)
	StrictICRC   bool          // -strict-icrc: RoCEv2: drop IPv4 packets whose ICRC fails with IP ID 0 (rocev2.Config.StrictICRC)

	// The device processes attach to (internal/broker; with -rocev2; with -xdp its packets
	// arrive on the AF_XDP port and are relayed to the processes).
	Group    string     // -group: the attach socket's group (mode 0660); "": the daemon's user only
	Steer    steer.Mode // -steer: auto, bpf or relay
	MaxProcs int        // -max-procs: attached processes at once (broker default 63)
	Metrics  string     // -metrics: serve Prometheus text metrics on this host:port ("" = off)
	Netdev   string     // -netdev: the netdev of the device (its address when -rocev2 is not given)
	// Devices are more RoCEv2 devices served by this daemon (-device NAME@IP[:port] or
	// NAME@NETDEV, repeatable; as "rdma link add NAME type softrnic netdev NETDEV"):
	// each has its own address, attach and control sockets (NAME.sock beside -sock),
	// port, QP numbers and processes; the group, steering and limits are shared, and
	// they serve no memory target or tools.
	Devices []string

	// Limits (0: the default).
	MaxListeners     int           // -max-listeners: iWARP listeners, from -iwarp and listen_iwarp (DefaultMaxListeners)
	TargetMaxConns   int           // -target-max-conns: connections the memory target's listeners accept at once (target.DefaultMaxConns)
	CtlMaxClients    int           // -ctl-max-clients: control connections at once (uapi.DefaultMaxClients)
	CtlIdleTimeout   time.Duration // -ctl-idle-timeout: control connection idle bound (uapi.DefaultIdleTimeout)
	RpingMaxSessions int           // -rping-max-sessions: rping sessions at once (rping.DefaultMaxSessions)
	RpingIdleTimeout time.Duration // -rping-idle-timeout: end an rping session idle this long (0: never)

	LogOut io.Writer // where Start logs (nil: os.Stderr)

	Link hostlink.Options // -xdp, -xdp-mode, -pcap (internal/hostlink; Main only)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// ParseArgs builds Options from the command line (and the -config file it names); flag
// errors and the usage go to errOut.
func ParseArgs(args []string, errOut io.Writer) (Options, error) {
	o := Options{}
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(errOut)
	cfgFile := fs.String("config", "", "configuration `file`: key=value lines with the flag names as keys, # comments; flags given win")
	fs.StringVar(&o.Name, "name", tool.DefaultDevice, "device name")
	fs.StringVar(&o.Sock, "sock", "", "control socket (default /run/softrnic/<name>.sock)")
	fs.Var((*listFlag)(&o.IWARP), "iwarp", "iWARP listen address host:port (repeatable)")
	fs.StringVar(&o.RoCEv2, "rocev2", "", "RoCEv2 link address ip[:udpport] (default port 4791)")
	fs.IntVar(&o.CMPort, "rocev2-cm-port", DefaultCMPort, "RDMA-CM port of the RoCEv2 memory target")
	fs.IntVar(&o.PeerPort, "rocev2-peer-port", -1, "force the UDP port RoCEv2 peers are answered on (default: 4791 for peers sending from entropy ports 49152-65535, else their source port)")
	fs.IntVar(&o.TargetMiB, "target-mib", DefaultTargetMiB, "serve a memory target of this many MiB itself (default none: \"softrnic target\" runs one as a process of the device)")
	fs.BoolVar(&o.CRC, "crc", false, "iWARP: request MPA CRC32c")
	fs.StringVar(&o.Rping, "rping", "", "also run an iWARP rping server on host:port")
	fs.StringVar(&o.Perftest, "perftest", "", "also run an iWARP perftest server on host:port")
	verb := fs.String("perftest-verb", "write", "perftest server test: write, read or send")
	fs.BoolVar(&o.Foreground, "foreground", false, "stay in the foreground (default: detach once the socket is up)")
	fs.StringVar(&o.LogFile, "log", "", "append the log to this file (default stderr, which a detached daemon does not have)")
	fs.BoolVar(&o.LogJSON, "log-json", false, "log JSON records (log/slog) instead of key=value text")
	fs.BoolVar(&o.StrictICRC, "strict-icrc", false, "RoCEv2: check every IPv4 ICRC exactly (IP ID 0) instead of solving for the sender's IP ID; "+
		"right when every peer sends ID 0 (not rxe over IPv4, not a softrnic sending GSO), and it catches all corruption")
	fs.StringVar(&o.Group, "group", "", "RoCEv2 device: the group that may attach to it (attach socket mode 0660; default: only the daemon's user)")
	steerMode := fs.String("steer", "auto", "RoCEv2 device: how packets reach attached processes: auto (BPF, else relay), bpf or relay")
	fs.IntVar(&o.MaxProcs, "max-procs", 63, "RoCEv2 device: most attached processes at once")
	fs.StringVar(&o.Netdev, "netdev", "", "RoCEv2 device: the network device it sits on (default: the one carrying -rocev2's address; without -rocev2, its first IPv4 address)")
	fs.Var((*listFlag)(&o.Devices), "device", "another RoCEv2 device, `NAME@IP[:port]` or NAME@NETDEV (repeatable)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve Prometheus/OpenMetrics text metrics on `host:port` (default off)")
	fs.IntVar(&o.MaxListeners, "max-listeners", DefaultMaxListeners, "most iWARP listeners (-iwarp and set listen_iwarp together)")
	fs.IntVar(&o.TargetMaxConns, "target-max-conns", target.DefaultMaxConns, "most connections of the memory target's listeners at once (more are rejected)")
	fs.IntVar(&o.CtlMaxClients, "ctl-max-clients", uapi.DefaultMaxClients, "most control-socket clients at once (more are answered EBUSY)")
	fs.DurationVar(&o.CtlIdleTimeout, "ctl-idle-timeout", uapi.DefaultIdleTimeout, "close a control client that takes longer to send a request or take an answer")
	fs.IntVar(&o.RpingMaxSessions, "rping-max-sessions", rping.DefaultMaxSessions, "-rping: most client sessions at once (more are rejected)")
	fs.DurationVar(&o.RpingIdleTimeout, "rping-idle-timeout", DefaultRpingIdleTimeout, "-rping: end a session whose client sends nothing this long (0: never)")
	o.Link.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *cfgFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := applyConfig(fs, *cfgFile, set); err != nil {
			return o, err
		}
	}
	if o.Sock == "" {
		o.Sock = uapi.SocketPath(o.Name)
	}
	if o.TargetMiB < 0 || o.TargetMiB > MaxTargetMiB {
		return o, fmt.Errorf("-target-mib %d out of range 0..%d", o.TargetMiB, MaxTargetMiB)
	}
	if o.CMPort <= 0 || o.CMPort > 65535 || o.PeerPort < -1 || o.PeerPort > 65535 {
		return o, errors.New("port out of range")
	}
	if o.Netdev != "" && o.RoCEv2 == "" {
		a, err := hostlink.NetdevAddr(o.Netdev)
		if err != nil {
			return o, fmt.Errorf("-netdev: %w", err)
		}
		o.RoCEv2 = a.String()
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := needTransports(o, given); err != nil {
		return o, err
	}
	if o.MaxListeners < 1 || o.TargetMaxConns < 1 || o.CtlMaxClients < 1 || o.CtlIdleTimeout <= 0 || o.RpingMaxSessions < 1 {
		return o, errors.New("-max-listeners, -target-max-conns, -ctl-max-clients, -ctl-idle-timeout and -rping-max-sessions must be positive")
	}
	if o.RpingIdleTimeout < 0 {
		return o, errors.New("-rping-idle-timeout must not be negative")
	}
	if len(o.IWARP) > o.MaxListeners {
		return o, fmt.Errorf("%d -iwarp listeners: more than -max-listeners %d", len(o.IWARP), o.MaxListeners)
	}
	for _, a := range o.IWARP {
		if _, err := parseListenAddr(a); err != nil {
			return o, fmt.Errorf("-iwarp: %w", err)
		}
	}
	if given["rocev2-cm-port"] && o.TargetMiB == 0 {
		return o, errors.New("-rocev2-cm-port is the memory target's RDMA-CM port: it needs -target-mib")
	}
	if err := checkDevices(o); err != nil {
		return o, err
	}
	switch *steerMode {
	case "auto":
		o.Steer = steer.ModeAuto
	case "bpf":
		o.Steer = steer.ModeBPF
	case "relay":
		o.Steer = steer.ModeRelay
	default:
		return o, fmt.Errorf("-steer %q: want auto, bpf or relay", *steerMode)
	}
	if o.MaxProcs < 1 || o.MaxProcs > 1023 {
		return o, fmt.Errorf("-max-procs %d out of range 1..1023", o.MaxProcs)
	}
	switch *verb {
	case "write":
		o.PerftestVerb = perftest.Write
	case "read":
		o.PerftestVerb = perftest.Read
	case "send":
		o.PerftestVerb = perftest.Send
	default:
		return o, fmt.Errorf("-perftest-verb %q: want write, read or send", *verb)
	}
	return o, nil
}

// applyConfig sets the flags a config file names, except those given on the command
// line (which win). "iwarp" may repeat.
func applyConfig(fs *flag.FlagSet, path string, cmdline map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "config" || fs.Lookup(k) == nil {
			return fmt.Errorf("%s:%d: bad line %q", path, n, line)
		}
		if cmdline[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n, err)
		}
	}
	return sc.Err()
}

// parseListenAddr checks a listen address: an IP literal (or nothing, for every address)
// and a port, "host:port" — never a name, so the daemon makes no DNS lookup for what a
// control client asks.
func parseListenAddr(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("%q: port %q is not a number 0..65535", s, port)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return "", fmt.Errorf("%q: %q is not an IP address (names are not resolved)", s, host)
		}
	}
	return s, nil
}

// needTransports checks that every flag that works through a transport has it, naming the
// one that is missing; with no transport at all it asks for one.
func needTransports(o Options, given map[string]bool) error {
	for _, f := range []struct {
		flag, what string
		iwarp      bool // needs -iwarp, else -rocev2
	}{
		{"rping", "runs an iWARP rping server", true},
		{"perftest", "runs an iWARP perftest server", true},
		{"perftest-verb", "sets the iWARP perftest server's test", true},
		{"crc", "is an iWARP (MPA) option", true},
		{"max-listeners", "bounds the iWARP listeners", true},
		{"rping-max-sessions", "bounds the iWARP rping server", true},
		{"rping-idle-timeout", "bounds the iWARP rping server", true},
		{"rocev2-cm-port", "is the RoCEv2 listener's RDMA-CM port", false},
		{"rocev2-peer-port", "is a RoCEv2 option", false},
	} {
		if !given[f.flag] {
			continue
		}
		switch {
		case f.iwarp && len(o.IWARP) == 0:
			return fmt.Errorf("-%s %s: it needs -iwarp host:port", f.flag, f.what)
		case !f.iwarp && o.RoCEv2 == "":
			return fmt.Errorf("-%s %s: it needs -rocev2 ip[:port]", f.flag, f.what)
		}
	}
	if len(o.IWARP) == 0 && o.RoCEv2 == "" {
		return errors.New("no transport: give -iwarp and/or -rocev2")
	}
	return nil
}

// checkDevices checks the -device specifications: NAME@ADDR with a device name of its
// own, and ADDR an IP literal (a port optional) or a netdev's name.
func checkDevices(o Options) error {
	if len(o.Devices) > 0 && o.RoCEv2 == "" {
		return errors.New("-device: the first device needs -rocev2 or -netdev")
	}
	if len(o.Devices) > 0 && o.Link.XDP != "" {
		return errors.New("-device: with -xdp the daemon serves one device (its AF_XDP port)")
	}
	names := map[string]bool{o.Name: true}
	for _, d := range o.Devices {
		name, addr, ok := strings.Cut(d, "@")
		if !ok || name == "" || addr == "" || strings.ContainsAny(name, "/ ") {
			return fmt.Errorf("-device %q: want NAME@IP[:port] or NAME@NETDEV", d)
		}
		if names[name] {
			return fmt.Errorf("-device %q: device %s given twice", d, name)
		}
		names[name] = true
	}
	return nil
}

// deviceOptions are the options of the daemon's device spec (-device NAME@ADDR): the
// shared ones of o, its own name, address and sockets.
func deviceOptions(o Options, spec string) (Options, error) {
	name, addr, _ := strings.Cut(spec, "@")
	d := Options{Name: name, Sock: filepath.Join(filepath.Dir(o.Sock), name+".sock"), CMPort: DefaultCMPort, PeerPort: o.PeerPort,
		LogJSON: o.LogJSON, StrictICRC: o.StrictICRC, Group: o.Group, Steer: o.Steer, MaxProcs: o.MaxProcs,
		MaxListeners: o.MaxListeners, CtlMaxClients: o.CtlMaxClients, CtlIdleTimeout: o.CtlIdleTimeout, LogOut: o.LogOut}
	if _, err := parseRoCEAddr(addr); err == nil {
		d.RoCEv2 = addr
		return d, nil
	}
	a, err := hostlink.NetdevAddr(addr)
	if err != nil {
		return d, fmt.Errorf("-device %s: %w", spec, err)
	}
	d.Netdev, d.RoCEv2 = addr, a.String()
	return d, nil
}
