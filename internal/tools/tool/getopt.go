package tool

import (
	"fmt"
	"strings"
)

// Opt describes one command-line option for Getopt, as a struct option of getopt_long(3):
// a short letter (0 for none), a long name ("" for none) and whether it takes a value.
type Opt struct {
	Short byte
	Long  string
	Arg   bool
}

// Name returns how the option is written: "-x" or "--long".
func (o *Opt) Name() string {
	if o.Short != 0 {
		return "-" + string(o.Short)
	}
	return "--" + o.Long
}

// Arg is one option found on the command line, with its value ("" for a flag).
type Arg struct {
	*Opt
	Value string
}

// Getopt parses args the way GNU getopt_long does for the C tools softrnic's tools
// imitate: short options may be grouped ("-ab") and take their value attached ("-n5") or
// as the next argument; long options take "--name=value" or "--name value" and may be
// abbreviated to a unique prefix; options and operands may be mixed (operands are
// collected in order); "--" ends the options. Unknown options and missing values are
// errors naming the option.
func Getopt(args []string, opts []Opt) (found []Arg, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return found, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := longOpt(opts, name)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case o.Arg && !hasVal:
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("option --%s requires an argument", o.Long)
				}
				i++
				val = args[i]
			case !o.Arg && hasVal:
				return nil, nil, fmt.Errorf("option --%s doesn't allow an argument", o.Long)
			}
			found = append(found, Arg{o, val})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := shortOpt(opts, a[j])
				if o == nil {
					return nil, nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				if !o.Arg {
					found = append(found, Arg{o, ""})
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("option requires an argument -- '%c'", a[j])
					}
					i++
					val = args[i]
				}
				found = append(found, Arg{o, val})
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return found, operands, nil
}

func shortOpt(opts []Opt, c byte) *Opt {
	for i := range opts {
		if opts[i].Short == c {
			return &opts[i]
		}
	}
	return nil
}

// longOpt finds name exactly, else as the unique prefix of one long option.
func longOpt(opts []Opt, name string) (*Opt, error) {
	var match *Opt
	n := 0
	for i := range opts {
		if opts[i].Long == "" {
			continue
		}
		if opts[i].Long == name {
			return &opts[i], nil
		}
		if name != "" && strings.HasPrefix(opts[i].Long, name) {
			match = &opts[i]
			n++
		}
	}
	switch n {
	case 0:
		return nil, fmt.Errorf("unrecognized option '--%s'", name)
	case 1:
		return match, nil
	}
	return nil, fmt.Errorf("option '--%s' is ambiguous", name)
}
