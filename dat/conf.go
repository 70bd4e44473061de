package dat

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ConfEntry is one line of a dat.conf static registry (spec §8.4.5).
type ConfEntry struct {
	IAName        string
	Kernel        bool // API version "k…" (kDAPL) rather than "u…"
	APIMajor      int
	APIMinor      int
	ThreadSafe    bool
	Default       bool
	Library       string // path of the provider library image
	ProviderID    string // provider version "id.major.minor"
	ProviderMajor int
	ProviderMinor int
	InstanceData  string // passed to the provider (here: "<transport> <local address>")
	PlatformInfo  string
}

// APIVersion formats the API version field, e.g. "u2.0".
func (e ConfEntry) APIVersion() string {
	p := "u"
	if e.Kernel {
		p = "k"
	}
	return fmt.Sprintf("%s%d.%d", p, e.APIMajor, e.APIMinor)
}

// ParseConf reads a dat.conf file: '#' starts a comment (outside quotes),
// blank lines are skipped, fields are separated by white space and may be
// double-quoted with \\ and \" escapes.
func ParseConf(r io.Reader) ([]ConfEntry, error) {
	var out []ConfEntry
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f, err := splitConfLine(sc.Text())
		if err != nil {
			return out, fmt.Errorf("dat.conf:%d: %w", line, err)
		}
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return out, fmt.Errorf("dat.conf:%d: %d fields, want 8", line, len(f))
		}
		var e ConfEntry
		e.IAName = f[0]
		if err := parseAPIVersion(f[1], &e); err != nil {
			return out, fmt.Errorf("dat.conf:%d: %w", line, err)
		}
		switch f[2] {
		case "threadsafe":
			e.ThreadSafe = true
		case "nonthreadsafe":
		default:
			return out, fmt.Errorf("dat.conf:%d: bad thread safety %q", line, f[2])
		}
		switch f[3] {
		case "default":
			e.Default = true
		case "nondefault":
		default:
			return out, fmt.Errorf("dat.conf:%d: bad default field %q", line, f[3])
		}
		e.Library = f[4]
		if err := parseProviderVersion(f[5], &e); err != nil {
			return out, fmt.Errorf("dat.conf:%d: %w", line, err)
		}
		e.InstanceData, e.PlatformInfo = f[6], f[7]
		out = append(out, e)
	}
	return out, sc.Err()
}

func parseAPIVersion(s string, e *ConfEntry) error {
	if strings.HasPrefix(s, "k") {
		e.Kernel = true
		s = s[1:]
	} else if strings.HasPrefix(s, "u") {
		s = s[1:]
	} else {
		return fmt.Errorf("bad API version %q", s)
	}
	maj, min, ok := strings.Cut(s, ".")
	var err1, err2 error
	e.APIMajor, err1 = strconv.Atoi(maj)
	e.APIMinor, err2 = strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil || e.APIMajor < 0 || e.APIMinor < 0 {
		return fmt.Errorf("bad API version %q", s)
	}
	return nil
}

func parseProviderVersion(s string, e *ConfEntry) error {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 {
		return fmt.Errorf("bad provider version %q", s)
	}
	j := strings.LastIndexByte(s[:i], '.')
	if j <= 0 {
		return fmt.Errorf("bad provider version %q", s)
	}
	var err1, err2 error
	e.ProviderID = s[:j]
	e.ProviderMajor, err1 = strconv.Atoi(s[j+1 : i])
	e.ProviderMinor, err2 = strconv.Atoi(s[i+1:])
	if err1 != nil || err2 != nil || e.ProviderMajor < 0 || e.ProviderMinor < 0 {
		return fmt.Errorf("bad provider version %q", s)
	}
	return nil
}

func splitConfLine(s string) ([]string, error) {
	var out []string
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			return out, nil
		case c == '"':
			var b strings.Builder
			i++
			closed := false
			for i < len(s) {
				c = s[i]
				if c == '\\' && i+1 < len(s) && (s[i+1] == '\\' || s[i+1] == '"') {
					b.WriteByte(s[i+1])
					i += 2
					continue
				}
				if c == '"' {
					closed = true
					i++
					break
				}
				b.WriteByte(c)
				i++
			}
			if !closed {
				return nil, fmt.Errorf("unterminated quote")
			}
			out = append(out, b.String())
		default:
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '\r' && s[j] != '#' && s[j] != '"' {
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out, nil
}

func quoteConf(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\r\n\"\\#") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// WriteConf writes entries in dat.conf format; ParseConf reads them back.
func WriteConf(w io.Writer, entries []ConfEntry) error {
	for _, e := range entries {
		ts, def := "nonthreadsafe", "nondefault"
		if e.ThreadSafe {
			ts = "threadsafe"
		}
		if e.Default {
			def = "default"
		}
		pv := fmt.Sprintf("%s.%d.%d", e.ProviderID, e.ProviderMajor, e.ProviderMinor)
		_, err := fmt.Fprintf(w, "%s %s %s %s %s %s %s %s\n", quoteConf(e.IAName), e.APIVersion(), ts, def,
			quoteConf(e.Library), quoteConf(pv), quoteConf(e.InstanceData), quoteConf(e.PlatformInfo))
		if err != nil {
			return err
		}
	}
	return nil
}
