package rping

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic rping -s [-vVdP] [-S size] [-C count] [-a addr] [-p port]
       softrnic rping -c [-vVd] [-S size] [-C count] -a addr [-p port]
	-c		client side
	-s		server side
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-d NAME, --dev NAME
			attach to device NAME of a running softrnic daemon (its RoCEv2 address
			with --roce); without a daemon, an in-process device as by default
	-S size		ping data size (`+strconv.Itoa(MinSize)+` to `+strconv.Itoa(MaxSize)+`, default 64)
	-C count	ping count times (default: forever)
	-a addr		address
	-p port		port (default 7174)
	--crc		request MPA CRC32c (rping has no such flag; siw follows the request)
	--timeout d	give up after the duration d (e.g. 30s)
	--fault f	inject a fault: write-bad-stag, read-bad-stag (server), sink-oob (client)
	--roce		RoCEv2 (IB CM over UDP 4791, as rping on rxe) instead of iWARP;
			the server needs -a (its RoCE address)
	--local ip	RoCEv2 client: local IP address (default: the route to -a)
	-P		persistent server: serve every client, concurrently, until interrupted
	--max-sessions n	-P: at most n sessions at once; more clients are rejected (default 64)
	--idle d	server: end a session whose client sends nothing for d (default: never)
`+hostlink.FlagUsage)
}

// ParseArgs parses rping's getopt-style flags ("-vV", "-S64", "-S 64") and the softrnic
// long options.
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	client := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if n, err := o.Link.Arg(args[i:]); err != nil || n > 0 { // --xdp, --xdp-mode, --pcap
			if err != nil {
				return o, err
			}
			i += n - 1
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			needVal := func() (string, error) {
				if hasVal {
					return val, nil
				}
				if i+1 >= len(args) {
					return "", fmt.Errorf("option --%s needs a value", name)
				}
				i++
				return args[i], nil
			}
			switch name {
			case "crc":
				o.CRC = true
			case "roce":
				o.RoCE = true
			case "local":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				if _, err := netip.ParseAddr(v); err != nil {
					return o, fmt.Errorf("invalid --local %q", v)
				}
				o.Local = v
			case "max-sessions":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return o, fmt.Errorf("invalid --max-sessions %q", v)
				}
				o.MaxSessions = n
			case "timeout", "idle":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				d, err := tool.ParseDuration(name, v)
				if err != nil {
					return o, err
				}
				switch name {
				case "idle":
					o.IdleTimeout = d
				default:
					o.Timeout = d
				}
			case "dev":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				o.Dev = v
			case "fault":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				switch f := Fault(v); f {
				case FaultWriteBadSTag, FaultReadBadSTag, FaultSinkOOB:
					o.Fault = f
				default:
					return o, fmt.Errorf("unknown --fault %q", v)
				}
			default:
				return o, fmt.Errorf("unknown option %s", a)
			}
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			return o, fmt.Errorf("unexpected argument %q", a)
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 's':
				o.Server = true
			case 'P':
				o.Persistent = true
			case 'c':
				client = true
			case 'v':
				o.Verbose = true
			case 'V':
				o.Validate = true
			case 'd':
				// rping's -d is debug output; "-d NAME" (a word after it) names a
				// device of the softrnic daemon to attach to, as rdma-core's tools take -d
				if j == len(a)-1 && i+1 < len(args) && args[i+1] != "" && args[i+1][0] != '-' {
					i++
					o.Dev = args[i]
				} else {
					o.Debug = true
				}
			case 'a', 'p', 'C', 'S':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option -%c needs a value", c)
					}
					i++
					v = args[i]
				}
				if err := o.setValue(c, v); err != nil {
					return o, err
				}
				j = len(a)
			default:
				return o, fmt.Errorf("unknown option -%c", c)
			}
		}
	}
	if o.Server == client {
		return o, errors.New("exactly one of -s and -c is required")
	}
	return o, o.check()
}

func (o *Options) setValue(c byte, v string) error {
	if c == 'a' {
		o.Addr = v
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("invalid -%c %q", c, v)
	}
	switch c {
	case 'p':
		if n < 0 || n > 65535 {
			return fmt.Errorf("invalid port %d", n)
		}
		o.Port = n
	case 'C':
		if n < 0 {
			return fmt.Errorf("invalid count %d", n)
		}
		o.Count = n
	case 'S':
		if n < MinSize || n > MaxSize {
			return fmt.Errorf("invalid size %d (valid range is %d to %d)", n, MinSize, MaxSize)
		}
		o.Size = n
	}
	return nil
}

// check enforces the rules between options.
func (o *Options) check() error {
	switch {
	case o.Size < MinSize || o.Size > MaxSize:
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", o.Size, MinSize, MaxSize)
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case !o.Server && o.Addr == "":
		return errors.New("-c needs -a addr")
	case o.RoCE && o.Server && o.Addr == "":
		return errors.New("--roce -s needs -a addr (the RoCE link's local address)")
	case o.RoCE && o.CRC:
		return errors.New("--crc is an MPA option; RoCEv2 always has the ICRC")
	case o.RoCE && o.Fault != "":
		return errors.New("--fault is for iWARP only")
	case (o.Persistent || o.MaxSessions != 0 || o.IdleTimeout != 0) && !o.Server:
		return errors.New("-P, --max-sessions and --idle are server options")
	case o.MaxSessions < 0 || o.IdleTimeout < 0:
		return errors.New("--max-sessions and --idle must not be negative")
	case o.Fault == FaultSinkOOB && o.Server,
		(o.Fault == FaultWriteBadSTag || o.Fault == FaultReadBadSTag) && !o.Server:
		return fmt.Errorf("--fault %s does not apply to this role", o.Fault)
	}
	return nil
}
