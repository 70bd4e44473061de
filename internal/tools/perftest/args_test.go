package perftest

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePerftestArgs(t *testing.T) {
	o, err := ParseArgs([]string{"write", "-R", "-s", "4K", "-n100", "--port=9999", "-q", "4", "--report_gbits", "-F",
		"-d", "siw0", "-x", "0", "10.0.0.1", "--timeout", "3s", "--idle=10s", "-bN"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Verb != Write || o.Latency || o.Size != 4096 || o.Iters != 100 || o.Port != 9999 || !o.Gbits || o.Peer != "10.0.0.1" ||
		o.TxDepth != 100 || o.CQMod != 100 || o.QPs != 4 || o.Dev != "siw0" || o.GIDIndex != 0 || !o.Bidir || !o.NoPeak ||
		o.Timeout != 3*time.Second || o.Idle != 10*time.Second || !o.RDMACM {
		t.Fatalf("parsed %+v", o)
	}
	for _, c := range []struct {
		args                             []string
		size, iters, tx, rx, cqMod, outs int
		lat                              bool
	}{
		{[]string{"write"}, 65536, 5000, 128, 1, 1, 1, false}, // size > 8 KiB: CQ moderation off
		{[]string{"ib_write_bw", "-s", "8192"}, 8192, 5000, 128, 1, 100, 1, false},
		{[]string{"write", "-a"}, 65536, 5000, 128, 1, 100, 1, false}, // -a keeps CQ moderation
		{[]string{"write", "-Q", "10"}, 65536, 5000, 128, 1, 10, 1, false},
		{[]string{"read"}, 65536, 1000, 128, 1, 1, 128, false},
		{[]string{"read", "-o", "500"}, 65536, 1000, 128, 1, 1, 128, false},
		{[]string{"send", "--iters", "7"}, 65536, 7, 7, 8, 1, 1, false}, // rx ≤ iters, then even
		{[]string{"send", "-s", "100"}, 100, 1000, 128, 512, 100, 1, false},
		{[]string{"atomic", "--roce"}, 8, 1000, 128, 1, 100, 128, false},
		{[]string{"write_lat"}, 2, 1000, 1, 1, 1, 1, true},
		{[]string{"ib_read_lat", "-n", "0x10"}, 2, 16, 1, 1, 1, 128, true},
		{[]string{"send_lat", "-s", "1M"}, 1 << 20, 1000, 1, 512, 1, 1, true},
	} {
		o, err := ParseArgs(c.args)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if o.Size != c.size || o.Iters != c.iters || o.TxDepth != c.tx || o.RxDepth != c.rx || o.CQMod != c.cqMod ||
			o.OutReads != c.outs || o.Latency != c.lat {
			t.Errorf("%q: size %d iters %d tx %d rx %d cq %d outs %d lat %v", c.args, o.Size, o.Iters, o.TxDepth, o.RxDepth,
				o.CQMod, o.OutReads, o.Latency)
		}
	}
	// -D: margin = duration/4, perftest's check DURATION > 2*MARGIN.
	if o, err := ParseArgs([]string{"write", "-D", "10"}); err != nil || o.Margin != 2 || o.Duration != 10 || !o.noPeak() {
		t.Errorf("-D 10: %+v %v", o, err)
	}
	// noPeak: send server, iters > 20000.
	if o, _ := ParseArgs([]string{"send"}); !o.noPeak() {
		t.Error("send server computes a peak")
	}
	if o, _ := ParseArgs([]string{"send", "host"}); o.noPeak() {
		t.Error("send client does not compute a peak")
	}
	if o, _ := ParseArgs([]string{"write", "-n", "20001", "host"}); !o.noPeak() {
		t.Error("20001 iterations compute a peak")
	}
	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{}, "missing test"},
		{[]string{"atomic", "--roce", "-s", "16"}, "Message size cannot be changed for Atomic tests"},
		{[]string{"atomic", "--roce", "-a"}, "Message size cannot be changed"},
		{[]string{"atomic_lat"}, "not supported"},
		{[]string{"write_lat", "-q", "2"}, "Multiple QPs only available on bw tests"},
		{[]string{"write_lat", "-b"}, "Bidirectional is only available in BW test"},
		{[]string{"write", "-n", "4"}, "Iteration num should be between 5"},
		{[]string{"write", "-q", "16385"}, "num of Qps"},
		{[]string{"write", "-s", "0"}, "Message Size should be between 1"},
		{[]string{"write", "-D", "0"}, "Duration period"},
		{[]string{"write", "-D", "4", "-a"}, "Duration mode currently doesn't support running on all sizes"},
		{[]string{"write", "-D", "2", "-f", "1"}, "DURATION > 2*MARGIN"},
		{[]string{"write", "-c", "UD"}, "only RC"},
		{[]string{"write", "a", "b"}, "unexpected argument"},
		{[]string{"write", "-p"}, "requires an argument"},
		{[]string{"write", "--nope"}, "unrecognized option"},
		{[]string{"write", "-r", "2"}, "rx depth can be only 1"},
		{[]string{"write", "-o", "2"}, "only available on READ"},
		{[]string{"write", "-A", "CMP_AND_SWAP"}, "not running the atomic"},
		{[]string{"atomic", "--roce", "-A", "XOR"}, "Invalid Atomic type"},
		{[]string{"write", "--timeout", "x"}, "invalid --timeout"},
		{[]string{"write", "-p", "70000"}, "port"},
		{[]string{"send", "-s", "x"}, "Message Size"},
		{[]string{"write", "--roce", "-m", "1000"}, "invalid MTU"},
		{[]string{"write", "--dont_xchg_versions"}, "version exchange"},
		{[]string{"write", "-C"}, "not supported"},
	} {
		_, err := ParseArgs(bad.args)
		if err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%q: %v, want %q", bad.args, err, bad.msg)
		}
	}
	// What the network cannot do passes ParseArgs (no usage error) and is refused by Run
	// with one line.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"atomic"}, "iWARP has no atomics"},
		{[]string{"send", "-r", "2"}, "needs -r 3 or more"},
		{[]string{"write", "--roce", "--crc"}, "MPA"},
		{[]string{"write", "-m", "1024"}, "iWARP"},
	} {
		o, err := ParseArgs(c.args)
		if err != nil {
			t.Errorf("%q: ParseArgs: %v", c.args, err)
			continue
		}
		if err := Run(context.Background(), o, io.Discard, nil); err == nil || !strings.Contains(err.Error(), c.msg) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: Run: %v, want %q", c.args, err, c.msg)
		}
	}
	if _, err := ParseArgs([]string{"write", "-h"}); err != errHelp {
		t.Errorf("-h: %v", err)
	}
	if _, err := ParseArgs([]string{"write", "-V"}); err != errVersion {
		t.Errorf("-V: %v", err)
	}
}

// TestDefaultsForDaemon: the daemon builds its perftest server from DefaultOptions.
func TestDefaultsForDaemon(t *testing.T) {
	o := DefaultOptions(Read)
	o.Bind, o.Port = "127.0.0.1", 1234
	if err := o.normalize(); err != nil || !o.RDMACM || o.OutReads != 128 || o.Iters != 1000 {
		t.Fatalf("%+v %v", o, err)
	}
}

// TestWaitDrivesOption: --wait-drives sets the device's WaitDrivesReceive over iWARP and
// RoCEv2, and is refused with a bad duration.
func TestWaitDrivesOption(t *testing.T) {
	o, err := ParseArgs([]string{"send_lat", "--wait-drives=5ms"})
	if err != nil || o.WaitDrives != 5*time.Millisecond || o.supported() != nil {
		t.Fatalf("parsed %+v, %v, %v", o, err, o.supported())
	}
	if o, err := ParseArgs([]string{"send_lat", "--roce", "--wait-drives", "5ms"}); err != nil || o.WaitDrives != 5*time.Millisecond || o.supported() != nil {
		t.Fatalf("--roce --wait-drives: %v, supported %v", err, o.supported())
	}
	if _, err := ParseArgs([]string{"send_lat", "--wait-drives", "-1s"}); err == nil {
		t.Fatal("a negative duration was accepted")
	}
}

// TestPollDefaults: an iWARP latency test without -e polls (PollHold, PollSpin) unless
// --wait-drives or --spin says otherwise; -e, bandwidth tests and RoCEv2 do not.
func TestPollDefaults(t *testing.T) {
	for _, c := range []struct {
		args        []string
		drive, spin time.Duration
	}{
		{[]string{"write_lat"}, PollHold, PollSpin},
		{[]string{"read_lat", "-s", "64"}, PollHold, PollSpin},
		{[]string{"send_lat", "--wait-drives", "5ms"}, 5 * time.Millisecond, PollSpin},
		{[]string{"send_lat", "--spin", "50us"}, PollHold, 50 * time.Microsecond},
		{[]string{"write_lat", "-e"}, 0, 0},
		{[]string{"write_lat", "--events", "--wait-drives", "5ms"}, 5 * time.Millisecond, 0},
		{[]string{"write_lat", "--roce"}, 0, 0},
		{[]string{"write"}, 0, 0},
		{[]string{"read", "-s", "64"}, 0, 0},
	} {
		o, err := ParseArgs(c.args)
		if err != nil || o.supported() != nil {
			t.Fatalf("%q: %v, supported %v", c.args, err, o.supported())
		}
		if o.WaitDrives != c.drive || o.Spin != c.spin || o.Events != slices.ContainsFunc(c.args, func(a string) bool { return a == "-e" || a == "--events" }) {
			t.Errorf("%q: WaitDrives %v Spin %v Events %v, want %v %v", c.args, o.WaitDrives, o.Spin, o.Events, c.drive, c.spin)
		}
	}
}

// TestSpinOption: --spin sets the device's ReceiveSpin beside --wait-drives, and is
// refused without it and over RoCEv2.
func TestSpinOption(t *testing.T) {
	o, err := ParseArgs([]string{"read_lat", "--wait-drives", "10ms", "--spin", "200us"})
	if err != nil || o.Spin != 200*time.Microsecond || o.supported() != nil {
		t.Fatalf("parsed %+v, %v, %v", o, err, o.supported())
	}
	for _, args := range [][]string{{"read_lat", "-e", "--spin", "200us"}, {"read", "--spin", "200us"}, {"read_lat", "--roce", "--spin", "200us"},
		{"read_lat", "--roce", "--wait-drives", "10ms", "--spin", "200us"}} {
		if o, err := ParseArgs(args); err != nil || o.supported() == nil {
			t.Fatalf("%q: %v, supported %v", args, err, o.supported())
		}
	}
	if _, err := ParseArgs([]string{"read_lat", "--wait-drives", "10ms", "--spin", "x"}); err == nil {
		t.Fatal("a bad duration was accepted")
	}
}
