package tool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/rnic"
)

func TestParseDuration(t *testing.T) {
	if d, err := ParseDuration("timeout", "1.5s"); err != nil || d != 1500*time.Millisecond {
		t.Fatal(d, err)
	}
	for _, bad := range []string{"-1s", "x", ""} {
		if _, err := ParseDuration("timeout", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseIP(t *testing.T) {
	if a, err := ParseIP("-a", "::ffff:10.0.0.1"); err != nil || a.String() != "10.0.0.1" {
		t.Fatal(a, err)
	}
	if _, err := ParseIP("-a", "localhost"); err == nil {
		t.Fatal("a name accepted")
	}
}

func TestOutput(t *testing.T) {
	if Output(nil) != io.Discard {
		t.Fatal("nil writer")
	}
}

// TestIBVStatus: the numbers and texts of libibverbs' enum ibv_wc_status.
func TestIBVStatus(t *testing.T) {
	for _, c := range []struct {
		st   rnic.Status
		code int
		text string
	}{
		{rnic.StatusSuccess, 0, "success"}, {rnic.StatusWRFlushErr, 5, "Work Request Flushed Error"},
		{rnic.StatusRemAccessErr, 10, "remote access error"}, {rnic.StatusRetryExcErr, 12, "transport retry counter exceeded"},
		{rnic.StatusRNRRetryExcErr, 13, "RNR retry counter exceeded"},
	} {
		if code, text := IBVStatus(c.st); code != c.code || text != c.text {
			t.Errorf("%v: %d %q", c.st, code, text)
		}
	}
}

// TestLinkOpts: --xdp, --xdp-mode and --pcap parse through a tool's getopt table into the
// process's hostlink options; other options are left to the tool, bad modes are refused.
func TestLinkOpts(t *testing.T) {
	opts := append([]Opt{{Short: 's', Arg: true}}, LinkOpts...)
	found, _, err := Getopt([]string{"--pcap", "/tmp/x.pcap", "-s", "9", "--xdp=eth0", "--xdp-mode", "generic"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var l hostlink.Options
	others := 0
	for _, a := range found {
		ok, err := SetLink(&l, a)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			others++
		}
	}
	if l.PCAP != "/tmp/x.pcap" || l.XDP != "eth0" || others != 1 || !l.Enabled() {
		t.Fatalf("%+v, %d others", l, others)
	}
	found, _, _ = Getopt([]string{"--xdp-mode", "sideways"}, opts)
	if _, err := SetLink(&l, found[0]); err == nil {
		t.Fatal("--xdp-mode sideways accepted")
	}
}

// TestParse: the common options land in Common's fields, every other option reaches set in
// order, operands come back, and bad values are errors naming the option.
func TestParse(t *testing.T) {
	opts := append([]Opt{{Short: 'n', Arg: true}, {Long: "roce"}, {Long: "timeout", Arg: true}, {Long: "idle", Arg: true}}, LinkOpts...)
	var link hostlink.Options
	var timeout, idle time.Duration
	var seen []string
	operands, err := Parse([]string{"-n", "0x10", "host", "--timeout", "3s", "--roce", "--idle=250ms", "--pcap", "/tmp/x.pcapng"},
		opts, Common{Link: &link, Timeout: &timeout, Idle: &idle}, func(a Arg) error {
			seen = append(seen, a.Name()+"="+a.Value)
			if a.Short == 'n' {
				if n, err := Int(a); err != nil || n != 16 {
					t.Errorf("Int(-n 0x10) = %d, %v", n, err)
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if timeout != 3*time.Second || idle != 250*time.Millisecond || link.PCAP != "/tmp/x.pcapng" {
		t.Fatalf("timeout %v idle %v link %+v", timeout, idle, link)
	}
	if fmt.Sprint(seen) != "[-n=0x10 --roce=]" || fmt.Sprint(operands) != "[host]" {
		t.Fatalf("set saw %v, operands %v", seen, operands)
	}
	if err := NoOperands(operands); err == nil {
		t.Fatal("NoOperands accepted an operand")
	}
	// Without a Common field, the option goes to set.
	var got string
	if _, err := Parse([]string{"--idle", "x"}, opts, Common{}, func(a Arg) error { got = a.Value; return nil }); err != nil || got != "x" {
		t.Fatalf("idle without Common.Idle: %q, %v", got, err)
	}
	for _, bad := range [][]string{{"--timeout", "-1s"}, {"--idle", "soon"}, {"-n"}} {
		if _, err := Parse(bad, opts, Common{Timeout: &timeout, Idle: &idle}, func(Arg) error { return nil }); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if _, err := Int(Arg{Opt: &opts[0], Value: "12x"}); err == nil || !strings.Contains(err.Error(), "-n") {
		t.Errorf("Int(12x): %v", err)
	}
	if n := 5; SetInt(&n, Arg{Opt: &opts[0], Value: "010"}) != nil || n != 8 {
		t.Errorf("SetInt(010) = %d, want 8 (octal, as strtol)", n)
	}
}

// TestReported: a Reported error still unwraps to its cause, and nil stays nil.
func TestReported(t *testing.T) {
	if Reported(nil) != nil {
		t.Fatal("Reported(nil) is not nil")
	}
	err := Reported(fmt.Errorf("dial: %w", os.ErrDeadlineExceeded))
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, new(reportedError)) {
		t.Fatalf("%v does not unwrap", err)
	}
	var b strings.Builder
	if ReturnStatus(&b, "cmatose", err) != err || b.String() != "cmatose: dial: i/o timeout\ntest complete\nreturn status 1\n" {
		t.Fatalf("ReturnStatus printed %q", b.String())
	}
}
