package tool

import (
	"fmt"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
)

// Common are the settings most tools' Options share, for Parse to fill: the process's
// datapath and capture (LinkOpts), --timeout (a bound on the whole run) and --idle (how
// long to wait without a sign of the peer). A nil field is one the tool does not have;
// its option then reaches the tool's own set function, if its table lists it.
type Common struct {
	Link    *hostlink.Options
	Timeout *time.Duration
	Idle    *time.Duration
}

// Parse runs Getopt over args with the table opts, stores the common options in c and
// passes every other option found, in order, to set; it returns the operands. The first
// error (Getopt's, a common option's value, or set's) ends it.
func Parse(args []string, opts []Opt, c Common, set func(Arg) error) (operands []string, err error) {
	found, operands, err := Getopt(args, opts)
	if err != nil {
		return nil, err
	}
	for _, a := range found {
		if c.Link != nil {
			if ok, err := SetLink(c.Link, a); ok { // --xdp, --pcap
				if err != nil {
					return nil, err
				}
				continue
			}
		}
		var d *time.Duration
		switch a.Long {
		case "timeout":
			d = c.Timeout
		case "idle":
			d = c.Idle
		}
		if d != nil {
			if *d, err = ParseDuration(a.Long, a.Value); err != nil {
				return nil, err
			}
			continue
		}
		if err := set(a); err != nil {
			return nil, err
		}
	}
	return operands, nil
}

// Int parses a's value as the C tools' strtol(optarg, NULL, 0) does when it is valid:
// decimal, 0x hexadecimal or 0 octal. Anything else is an error naming the option.
func Int(a Arg) (int, error) {
	n, err := strconv.ParseInt(a.Value, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid %s %q", a.Name(), a.Value)
	}
	return int(n), nil
}

// SetInt stores Int(a) in *p, or returns its error.
func SetInt(p *int, a Arg) (err error) {
	*p, err = Int(a)
	return err
}

// NoOperands is the error for a command line that takes no operands, or nil.
func NoOperands(operands []string) error {
	if len(operands) > 0 {
		return fmt.Errorf("unexpected argument %q", operands[0])
	}
	return nil
}
