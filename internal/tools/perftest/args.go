package perftest

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
)

// Usage prints the command line's usage text.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic perftest write|read|send [options]            (server)
       softrnic perftest write|read|send [options] <server>   (client)
  like ib_write_bw / ib_read_bw / ib_send_bw -R (perftest 6.06) over iWARP:
	-R, --rdma_cm		connect with rdma_cm (always on; accepted for compatibility)
	-s, --size n		message size (default 65536)
	-n, --iters n		iterations (default 5000 for write, 1000 otherwise)
	-D, --duration s	client write/read: run s seconds instead of -n iterations
	-p, --port n		port (default 18515)
	-q, --qp n		number of QPs (only 1)
	-t, --tx-depth n	send queue depth (default 128)
	-r, --rx-depth n	receive depth of send tests (default 512)
	-Q, --cq-mod n		completion every n work requests (default 100)
	-o, --outs n		outstanding reads (default 128)
	--report_gbits		report Gb/s instead of MB/s
	--bind addr		server: listen on this address (default all)
	--crc			request MPA CRC32c (siw follows the request)
	--roce			RoCEv2 + IB CM (as perftest -R on rxe); write and read only;
				the server needs --bind (its RoCE address)
	--timeout d		give up after the duration d (e.g. 60s)
  ignored: -F, --CPU-freq, -d/--ib-dev, -x/--gid-index, -c RC, -i/--ib-port
`+hostlink.FlagUsage)
}

// ParseArgs parses perftest's getopt_long-style flags: the test first, then options and
// the server's address for a client.
func ParseArgs(args []string) (Options, error) {
	if len(args) == 0 {
		return Options{}, errors.New("missing test: write, read or send")
	}
	var v Verb
	switch args[0] {
	case "write", "ib_write_bw":
		v = Write
	case "read", "ib_read_bw":
		v = Read
	case "send", "ib_send_bw":
		v = Send
	default:
		return Options{}, fmt.Errorf("unknown test %q (want write, read or send)", args[0])
	}
	o := DefaultOptions(v)
	long := map[string]byte{"size": 's', "iters": 'n', "port": 'p', "qp": 'q', "tx-depth": 't', "rx-depth": 'r',
		"cq-mod": 'Q', "outs": 'o', "ib-dev": 'd', "gid-index": 'x', "connection": 'c', "ib-port": 'i', "duration": 'D'}
	var positional []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if n, err := o.Link.Arg(args[i:]); err != nil || n > 0 { // --xdp, --xdp-mode, --pcap
			if err != nil {
				return o, err
			}
			i += n - 1
			continue
		}
		var name byte
		var val string
		hasVal := false
		switch {
		case strings.HasPrefix(a, "--"):
			n, v, ok := strings.Cut(a[2:], "=")
			switch n {
			case "rdma_cm", "CPU-freq":
				continue
			case "report_gbits":
				o.Gbits = true
				continue
			case "crc":
				o.CRC = true
				continue
			case "roce":
				o.RoCE = true
				continue
			case "timeout", "bind":
				if !ok {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option --%s needs a value", n)
					}
					i++
					v = args[i]
				}
				if n == "bind" {
					o.Bind = v
					continue
				}
				d, err := tool.ParseDuration(n, v)
				if err != nil {
					return o, err
				}
				o.Timeout = d
				continue
			}
			c, known := long[n]
			if !known {
				return o, fmt.Errorf("unknown option %s", a)
			}
			name, val, hasVal = c, v, ok
		case len(a) >= 2 && a[0] == '-':
			name = a[1]
			switch name {
			case 'R', 'F':
				if len(a) > 2 {
					return o, fmt.Errorf("unknown option %s", a)
				}
				continue
			}
			if len(a) > 2 {
				val, hasVal = a[2:], true
			}
		default:
			positional = append(positional, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return o, fmt.Errorf("option -%c needs a value", name)
			}
			i++
			val = args[i]
		}
		if err := o.set(name, val); err != nil {
			return o, err
		}
	}
	if len(positional) > 1 {
		return o, fmt.Errorf("unexpected argument %q", positional[1])
	}
	if len(positional) == 1 {
		o.Peer = positional[0]
	}
	o.normalize()
	return o, o.check()
}

// normalize applies perftest's force_dependecies: depths never exceed the iterations; CQ
// moderation ≤ TX depth; an odd receive depth of a Send test is rounded up (perftest's
// workaround). Applying it twice changes nothing.
func (o *Options) normalize() {
	if o.Duration == 0 {
		o.TxDepth = min(o.TxDepth, o.Iters)
	}
	if o.Verb == Send {
		o.RxDepth = min(o.RxDepth, o.Iters)
		if o.RxDepth%2 == 1 {
			o.RxDepth++
		}
	}
	o.CQMod = min(o.CQMod, o.TxDepth)
}

// check enforces the ranges and the rules between options.
func (o *Options) check() error {
	switch {
	case o.Verb < Write || o.Verb > Send:
		return fmt.Errorf("unknown test %d", o.Verb)
	case o.Size < 1 || o.Size > MaxSize:
		return fmt.Errorf("invalid size %d (range 1..%d)", o.Size, MaxSize)
	case o.Iters < MinIters:
		return fmt.Errorf("invalid iterations %d (at least %d)", o.Iters, MinIters)
	case o.Port < 0 || o.Port > 65535:
		return fmt.Errorf("invalid port %d", o.Port)
	case o.TxDepth < 1 || o.RxDepth < 1 || o.CQMod < 1 || o.OutReads < 1:
		return errors.New("queue depths, CQ moderation and outstanding reads must be positive")
	case o.Duration > 0 && o.Verb == Send:
		return errors.New("-D (duration) is supported for write and read tests only; use -n")
	case o.RoCE && o.Verb == Send:
		return errors.New("--roce: only write and read are supported")
	case o.RoCE && o.Peer == "" && o.Bind == "":
		return errors.New("--roce: the server needs --bind addr (its RoCE address)")
	case o.RoCE && o.CRC:
		return errors.New("--crc is an MPA option")
	}
	return nil
}

func (o *Options) set(c byte, v string) error {
	switch c {
	case 'd', 'x', 'i':
		return nil // device, GID index and port are meaningless here
	case 'c':
		if v != "RC" {
			return fmt.Errorf("connection type %s is not supported (only RC)", v)
		}
		return nil
	case 'D':
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("invalid -D %q", v)
		}
		if o.Verb == Send {
			return errors.New("-D (duration) is supported for write and read tests only; use -n")
		}
		o.Duration = time.Duration(n) * time.Second
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("invalid -%c %q", c, v)
	}
	bad := func(lo, hi int) error {
		if n < lo || n > hi {
			return fmt.Errorf("invalid -%c %d (range %d..%d)", c, n, lo, hi)
		}
		return nil
	}
	var p *int
	var lo, hi int
	switch c {
	case 's':
		p, lo, hi = &o.Size, 1, MaxSize
	case 'n':
		p, lo, hi = &o.Iters, MinIters, 1<<31-1
	case 'p':
		p, lo, hi = &o.Port, 0, 65535
	case 'q':
		p, lo, hi = new(int), 1, 1
	case 't':
		p, lo, hi = &o.TxDepth, 1, 15000
	case 'r':
		p, lo, hi = &o.RxDepth, 1, 16384
	case 'Q':
		p, lo, hi = &o.CQMod, 1, 1024
	case 'o':
		p, lo, hi = &o.OutReads, 1, 128
	default:
		return fmt.Errorf("unknown option -%c", c)
	}
	if err := bad(lo, hi); err != nil {
		return err
	}
	*p = n
	return nil
}
