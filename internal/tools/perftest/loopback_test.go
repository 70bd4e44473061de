package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// pairResult is what a softrnic server and client printed and reported.
type pairResult struct {
	srvOut, cliOut string
	srvBW, cliBW   []bwReport
	srvLat, cliLat []latReport
	srvErr, cliErr error
	// the devices' counters at the end of the runs
	srvStats, cliStats rnic.Stats
}

// runPair runs a softrnic perftest server and client of test with args on loopback: over
// iWARP, or with roce over RoCEv2 between a random pair of 127.72/16 addresses (retried
// with another pair when one is taken). tweak may adjust both sides' options.
func runPair(t testing.TB, test string, roce bool, args []string, tweak func(srv, cli *Options)) pairResult {
	t.Helper()
	for try := 0; ; try++ {
		r, err := runPairOnce(t, test, roce, args, tweak)
		if err == nil || try == 4 {
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		t.Logf("retrying with other addresses: %v", err)
	}
}

func runPairOnce(t testing.TB, test string, roce bool, args []string, tweak func(srv, cli *Options)) (pairResult, error) {
	var r pairResult
	bind, cbind := "127.0.0.1", "127.0.0.1"
	if roce {
		b := rand.IntN(256)
		bind, cbind = fmt.Sprintf("127.72.%d.%d", b, 1+rand.IntN(127)), fmt.Sprintf("127.72.%d.%d", b, 128+rand.IntN(127))
		args = append([]string{"--roce"}, args...)
	}
	so, err := ParseArgs(append([]string{test, "--bind", bind, "-p", "0", "--timeout", "60s"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	co, err := ParseArgs(append([]string{test, "--bind", cbind, "--timeout", "60s", bind}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	so.gotReport = func(b bwReport) { mu.Lock(); r.srvBW = append(r.srvBW, b); mu.Unlock() }
	co.gotReport = func(b bwReport) { mu.Lock(); r.cliBW = append(r.cliBW, b); mu.Unlock() }
	so.gotLat = func(l latReport) { mu.Lock(); r.srvLat = append(r.srvLat, l); mu.Unlock() }
	co.gotLat = func(l latReport) { mu.Lock(); r.cliLat = append(r.cliLat, l); mu.Unlock() }
	so.gotStats = func(st rnic.Stats) { mu.Lock(); r.srvStats = st; mu.Unlock() }
	co.gotStats = func(st rnic.Stats) { mu.Lock(); r.cliStats = st; mu.Unlock() }
	addrc := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { addrc <- a }
	if tweak != nil {
		tweak(&so, &co)
	}
	var sb, cb bytes.Buffer
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(sctx, so, &sb, nil) }()
	select {
	case a := <-addrc:
		co.Port = portOf(t, a)
	case err := <-done:
		if errors.Is(err, syscall.EADDRINUSE) {
			return r, err
		}
		t.Fatalf("server: %v\n%s", err, sb.String())
	}
	r.cliErr = Run(context.Background(), co, &cb, nil)
	if errors.Is(r.cliErr, syscall.EADDRINUSE) {
		cancel()
		<-done
		return r, r.cliErr
	}
	r.srvErr = <-done
	r.srvOut, r.cliOut = sb.String(), cb.String()
	return r, nil
}

// portOf is the port of a listening address: TCP (iWARP, the exchange without -R) or
// rocev2.Addr ("ip:port" or "ip:port@udpport").
func portOf(t testing.TB, a net.Addr) int {
	t.Helper()
	hp, _, _ := strings.Cut(a.String(), "@")
	_, p, err := net.SplitHostPort(hp)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("listening address %v", a)
	}
	return n
}

func (r *pairResult) ok(t *testing.T) {
	t.Helper()
	if r.srvErr != nil || r.cliErr != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", r.srvErr, r.srvOut, r.cliErr, r.cliOut)
	}
}

func checkBW(t *testing.T, who string, r bwReport, size, iters int, peak bool) {
	t.Helper()
	if r.Size != uint64(size) || (iters >= 0 && r.Iters != uint64(iters)) || !(r.Avg > 0) || !(r.MsgRateAvg > 0) ||
		(peak && !(r.Peak >= r.Avg*0.999)) || (!peak && r.Peak != 0) {
		t.Errorf("%s report %+v (size %d iters %d peak %v)", who, r, size, iters, peak)
	}
}

// TestBWLoopback runs the bandwidth tests with softrnic at both ends, over the exchange
// perftest uses, and checks both sides' reports and output.
func TestBWLoopback(t *testing.T) {
	for _, c := range []struct {
		test  string
		roce  bool
		args  []string
		size  int
		iters int
	}{
		{"write", false, []string{"-R"}, 65536, 200},
		{"write", false, []string{"-q", "4", "-s", "4096"}, 4096, 300},
		{"read", false, []string{"-s", "100", "-q", "3"}, 100, 333},
		{"send", false, []string{"-s", "1", "-q", "2"}, 1, 2000},
		{"send", false, nil, 65536, 300},
		{"write", true, []string{"-R", "-q", "2"}, 65536, 200},
		{"read", true, []string{"-R", "-s", "4096"}, 4096, 200},
		{"send", true, []string{"-R", "-s", "3000"}, 3000, 300}, // RoCE Send: RNR retries, no credits
		{"write", true, []string{"-x", "1"}, 65536, 200},        // no -R: TCP exchange, QPs by hand
		{"send", true, []string{"-q", "2", "-s", "64"}, 64, 500},
		{"atomic", true, []string{"-R"}, 8, 500},
		{"atomic", true, []string{"-A", "CMP_AND_SWAP", "-q", "2"}, 8, 300},
		{"write", true, []string{"-z"}, 65536, 100}, // exchange over rdma_cm, QPs by hand
	} {
		name := fmt.Sprintf("%s/roce=%v/%s", c.test, c.roce, strings.Join(c.args, ""))
		t.Run(name, func(t *testing.T) {
			args := append([]string{"-n", strconv.Itoa(c.iters)}, c.args...)
			if c.size != 65536 && c.test != "atomic" && !strings.Contains(strings.Join(c.args, " "), "-s") {
				args = append(args, "-s", strconv.Itoa(c.size))
			}
			r := runPair(t, c.test, c.roce, args, nil)
			r.ok(t)
			qps := 1
			for i, a := range c.args {
				if a == "-q" {
					qps, _ = strconv.Atoi(c.args[i+1])
				}
			}
			if len(r.srvBW) != 1 || len(r.cliBW) != 1 {
				t.Fatalf("reports: server %v client %v\n%s\n%s", r.srvBW, r.cliBW, r.srvOut, r.cliOut)
			}
			checkBW(t, "client", r.cliBW[0], c.size, c.iters*qps, true)
			if c.test == "send" {
				// A Send server measures its own receives (no peak).
				checkBW(t, "server", r.srvBW[0], c.size, c.iters*qps, false)
			} else if r.srvBW[0] != r.cliBW[0] {
				t.Errorf("server printed %+v, client measured %+v", r.srvBW[0], r.cliBW[0])
			}
			rdmaCM := !c.roce || strings.Contains(strings.Join(c.args, " "), "-R")
			for i, out := range []string{r.srvOut, r.cliOut} {
				if n := strings.Count(out, " remote address: LID 0000 QPN 0x"); n != qps {
					t.Errorf("%d remote address lines, want %d:\n%s", n, qps, out)
				}
				// banner (2, and 1 for "Waiting for client rdma_cm QP"), header, end
				want := 4
				if i == 0 && rdmaCM {
					want++
				}
				if c.test == "read" || c.test == "atomic" { // perftest's line before everything
					want++
				}
				if n := strings.Count(out, resultLine); n != want {
					t.Errorf("%d result lines, want %d:\n%s", n, want, out)
				}
			}
			if !strings.Contains(r.srvOut, waitingBanner) {
				t.Errorf("server output starts with %q", r.srvOut[:min(len(r.srvOut), 80)])
			}
		})
	}
}

// TestBWBidirectional: -b on write and send; each side prints the sum of both sides'
// rates.
func TestBWBidirectional(t *testing.T) {
	for _, c := range []struct {
		test string
		roce bool
	}{{"write", false}, {"send", false}, {"read", true}, {"send", true}} {
		t.Run(fmt.Sprintf("%s/roce=%v", c.test, c.roce), func(t *testing.T) {
			r := runPair(t, c.test, c.roce, []string{"-b", "-s", "4096", "-n", "300"}, nil)
			r.ok(t)
			if len(r.srvBW) != 1 || len(r.cliBW) != 1 || r.srvBW[0] != r.cliBW[0] {
				t.Fatalf("reports: server %v client %v", r.srvBW, r.cliBW)
			}
			checkBW(t, "sum", r.cliBW[0], 4096, 300, true)
			if !strings.Contains(r.srvOut, "Bidirectional BW Test") {
				t.Errorf("banner:\n%s", r.srvOut)
			}
		})
	}
}

// TestBWAll: -a runs every size from 2 B to 8 MiB; a write client prints a row per size
// and the server the last; Send sides each print their own rows.
func TestBWAll(t *testing.T) {
	for _, test := range []string{"write", "send"} {
		t.Run(test, func(t *testing.T) {
			r := runPair(t, test, false, []string{"-a", "-n", "5"}, nil)
			r.ok(t)
			if len(r.cliBW) != 23 {
				t.Fatalf("client reported %d sizes", len(r.cliBW))
			}
			for i, rep := range r.cliBW {
				checkBW(t, "client", rep, 2<<i, 5, true)
			}
			want := 1
			if test == "send" {
				want = 23
			}
			if len(r.srvBW) != want || r.srvBW[want-1].Size != 1<<23 {
				t.Fatalf("server reported %v", r.srvBW)
			}
		})
	}
}

// TestBWDuration: -D runs for a time instead of a count; the server prints the client's
// report (count and rates) as it does for -n.
func TestBWDuration(t *testing.T) {
	for _, test := range []string{"write", "read", "send"} {
		t.Run(test, func(t *testing.T) {
			t0 := time.Now()
			r := runPair(t, test, false, []string{"-s", "4096", "-D", "1"}, nil)
			r.ok(t)
			if d := time.Since(t0); d < time.Second {
				t.Errorf("a 1 s test took %v", d)
			}
			if len(r.cliBW) != 1 || len(r.srvBW) != 1 || r.cliBW[0].Iters <= 5 || !(r.cliBW[0].Avg > 0) || r.cliBW[0].Peak != 0 {
				t.Fatalf("reports: server %+v client %+v", r.srvBW, r.cliBW)
			}
			if test != "send" && r.cliBW[0] != r.srvBW[0] {
				t.Fatalf("server printed %+v, client measured %+v", r.srvBW, r.cliBW)
			}
		})
	}
}

// TestLatLoopback runs the latency tests with softrnic at both ends.
func TestLatLoopback(t *testing.T) {
	for _, c := range []struct {
		test string
		roce bool
		args []string
	}{
		{"write_lat", false, []string{"-n", "300"}},
		{"read_lat", false, []string{"-n", "300", "-s", "64"}},
		{"send_lat", false, []string{"-n", "300", "-s", "100"}},
		{"write_lat", false, []string{"-e", "-n", "300"}},
		{"read_lat", false, []string{"-e", "-n", "300", "-s", "64"}},
		{"send_lat", false, []string{"-e", "-n", "300", "-s", "100"}},
		{"read_lat", false, []string{"-n", "300", "-s", "64", "--wait-drives", "5ms"}},
		{"send_lat", false, []string{"-n", "300", "-s", "100", "--wait-drives", "5ms"}},
		{"read_lat", false, []string{"-n", "300", "-s", "64", "--wait-drives", "5ms", "--spin", "100us"}},
		{"write_lat", false, []string{"-n", "300", "--wait-drives", "5ms"}},
		{"write_lat", false, []string{"-n", "300", "--wait-drives", "5ms", "--spin", "100us"}},
		{"send_lat", false, []string{"-n", "300", "-s", "100", "--wait-drives", "5ms", "--spin", "100us"}},
		{"write_lat", true, []string{"-R", "-n", "300"}},
		{"read_lat", true, []string{"-x", "1", "-n", "300"}},
		{"send_lat", true, []string{"-n", "300", "-s", "2048"}},
		{"write_lat", true, []string{"-R", "-n", "300", "--wait-drives", "5ms"}},
		{"read_lat", true, []string{"-R", "-n", "300", "-s", "64", "--wait-drives", "5ms"}},
		{"send_lat", true, []string{"-R", "-n", "300", "-s", "100", "--wait-drives", "5ms"}},
		{"write_lat", false, []string{"-a", "-n", "5"}},
		{"send_lat", true, []string{"-a", "-n", "5"}},
	} {
		t.Run(c.test+"/"+strings.Join(c.args, "")+fmt.Sprintf("/roce=%v", c.roce), func(t *testing.T) {
			r := runPair(t, c.test, c.roce, c.args, nil)
			r.ok(t)
			want := 1
			if c.args[0] == "-a" {
				want = 23
			}
			if len(r.cliLat) != want || (c.test != "read_lat" && len(r.srvLat) != want) || (c.test == "read_lat" && len(r.srvLat) != 0) {
				t.Fatalf("reports: server %v client %v\n%s\n%s", r.srvLat, r.cliLat, r.srvOut, r.cliOut)
			}
			for _, l := range append(r.cliLat, r.srvLat...) {
				if !(l.Min > 0) || l.Min > l.Typical || l.Typical > l.Max || l.P99 > l.Max || !(l.Avg > 0) || l.Iters == 0 {
					t.Errorf("report %+v", l)
				}
			}
			if !strings.Contains(r.cliOut, latHeader+"\n") {
				t.Errorf("client output:\n%s", r.cliOut)
			}
			// Waits run the receive with --wait-drives, and in an iWARP test without -e
			// (perftest's polling, PollHold).
			if slices.Contains(c.args, "--wait-drives") || (!c.roce && !slices.Contains(c.args, "-e")) {
				// The mode took effect: waits ran the receive themselves, on each side
				// that waits for messages (read_lat's server only serves).
				if r.cliStats.WaitsDriven == 0 || (c.test != "read_lat" && r.srvStats.WaitsDriven == 0) {
					t.Errorf("waits that ran the receive: client %d, server %d", r.cliStats.WaitsDriven, r.srvStats.WaitsDriven)
				}
			} else if r.cliStats.WaitsDriven != 0 || r.srvStats.WaitsDriven != 0 {
				t.Errorf("waits ran the receive with -e or over RoCEv2 without --wait-drives: client %d, server %d", r.cliStats.WaitsDriven, r.srvStats.WaitsDriven)
			}
		})
	}
}

// TestLatDuration: -D on a latency test prints the duration row.
func TestLatDuration(t *testing.T) {
	r := runPair(t, "send_lat", false, []string{"-D", "1"}, nil)
	r.ok(t)
	if !strings.Contains(r.cliOut, latHeaderDur+"\n") || !strings.Contains(r.srvOut, latHeaderDur+"\n") {
		t.Fatalf("output:\n%s\n%s", r.srvOut, r.cliOut)
	}
}

// TestMismatches: what perftest 4.5 cannot negotiate ends with an error on the softrnic
// side, never a hang.
func TestMismatches(t *testing.T) {
	short := func(srv, cli *Options) { srv.Idle, cli.Idle = 2*time.Second, 2*time.Second }
	t.Run("write_lat client, write server", func(t *testing.T) {
		r := runPair(t, "write", false, []string{"-n", "50"}, func(srv, cli *Options) {
			short(srv, cli)
			cli.Latency, cli.Size, cli.TxDepth, cli.CQMod = true, 2, 1, 1
		})
		if r.srvErr == nil || r.cliErr == nil || !strings.Contains(r.srvErr.Error()+r.cliErr.Error(), "nothing from the peer for 2s") {
			t.Fatalf("server: %v\nclient: %v", r.srvErr, r.cliErr)
		}
	})
	t.Run("read client, write server", func(t *testing.T) {
		r := runPair(t, "write", false, []string{"-n", "50"}, func(srv, cli *Options) {
			short(srv, cli)
			cli.Verb, cli.OutReads = Read, 128
		})
		// the server's buffer allows remote writes only: the client's Read is refused
		if r.cliErr == nil || !strings.Contains(r.cliErr.Error(), "Read completion with error") {
			t.Fatalf("client: %v", r.cliErr)
		}
		if r.srvErr == nil {
			t.Fatal("server: no error")
		}
	})
	t.Run("send client with more iterations", func(t *testing.T) {
		r := runPair(t, "send", true, []string{"-s", "64", "-r", "10"}, func(srv, cli *Options) {
			short(srv, cli)
			srv.Iters, cli.Iters = 20, 40
		})
		if r.srvErr == nil || !strings.Contains(r.srvErr.Error(), "the peer sent more messages than this side's -n") || r.cliErr == nil {
			t.Fatalf("server: %v\nclient: %v", r.srvErr, r.cliErr)
		}
	})
}

// TestCreditsBoundSends: the iWARP Send client honours the server's credits.
func TestCreditsBoundSends(t *testing.T) {
	// A server that grants no credit: the client must stop rx-depth - 1 sends ahead
	// instead of overrunning the server's receives (which on iWARP is a Terminate).
	r := runPair(t, "send", false, []string{"-s", "64", "-n", "100", "-r", "8"}, func(srv, cli *Options) {
		srv.testCredit = func(uint32) uint32 { return 0 }
		srv.Idle, cli.Idle = 2*time.Second, time.Second
	})
	if r.cliErr == nil || !strings.Contains(r.cliErr.Error(), "waiting for credits (scnt=7)") {
		t.Fatalf("client: %v\n%s", r.cliErr, r.cliOut)
	}
	if r.srvErr == nil || strings.Contains(r.srvErr.Error(), "Terminate") {
		t.Fatalf("server should give up waiting, without a Terminate: %v", r.srvErr)
	}
}

func TestReportGbits(t *testing.T) {
	r := runPair(t, "write", false, []string{"-s", "4096", "-n", "50", "--report_gbits"}, nil)
	r.ok(t)
	if !strings.Contains(r.cliOut, bwHeaderGb) || !strings.Contains(r.srvOut, bwHeaderGb) {
		t.Fatalf("no Gb/s header:\n%s\n%s", r.srvOut, r.cliOut)
	}
}

// BenchmarkBWLoopback runs each test with b.N iterations of 64 KiB over loopback;
// allocs/op shows that the posting and polling loops do not allocate (the per-run setup
// is amortised over b.N).
func BenchmarkBWLoopback(b *testing.B) {
	for _, test := range []string{"write", "read", "send"} {
		b.Run(test, func(b *testing.B) {
			n := max(b.N, MinIters)
			b.SetBytes(65536)
			b.ReportAllocs()
			b.ResetTimer()
			r := runPair(b, test, false, []string{"-s", "65536", "-n", strconv.Itoa(n), "-N"}, nil)
			if r.srvErr != nil || r.cliErr != nil {
				b.Fatalf("server: %v client: %v", r.srvErr, r.cliErr)
			}
		})
	}
}
