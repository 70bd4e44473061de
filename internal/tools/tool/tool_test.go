package tool

import (
	"io"
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
