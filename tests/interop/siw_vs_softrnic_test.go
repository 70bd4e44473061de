package interop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/siwbench"
)

// Issue 14, "against siw, not only TCP": softrnic perftest and perftest over siw0, both
// server and client inside the guest (the same TCG vCPUs), over the guest's own address
// (loopback through the guest kernel's TCP, for siw's kernel sockets and softrnic's alike).
//
// Without SOFTRNIC_SIW_BENCH this is a smoke test of the interop suite: one short run of
// each case on each side, proving the static softrnic binary (Options.Files) runs in the
// guest and that every result line parses. With SOFTRNIC_SIW_BENCH=N it measures N pairs
// (siw, then softrnic, per case, the pairs in a row) and, with SOFTRNIC_SIW_BENCH_OUT,
// writes one JSON object per run (siwRun) and one of metadata (siwMeta) to that file;
// `go run ./bench/report -siw` drives it and writes bench/SIW.md.

// siwCase is one measurement: a perftest tool over siw0 and the same softrnic test.
type siwCase struct {
	name  string // key in the JSON ("write_bw_65536")
	tool  string // perftest binary
	test  string // softrnic perftest test
	size  int
	iters int // bench mode
	lat   bool
	opts  string // softrnic perftest's own options, on both sides
	both  string // options both tools get on both sides (TestSiwLatencySamples: -U)
	// wrap prefixes softrnic's server and client commands (TestSiwLatencySamples:
	// "env GOMAXPROCS=1 ", "taskset -c 0 ")
	wrap [2]string
}

var siwCases = []siwCase{
	{name: "write_bw_65536", tool: "ib_write_bw", test: "write", size: 65536, iters: 2000, lat: false},
	{name: "write_bw_4096", tool: "ib_write_bw", test: "write", size: 4096, iters: 5000, lat: false},
	{name: "read_bw_65536", tool: "ib_read_bw", test: "read", size: 65536, iters: 1000, lat: false},
	// Latency tests as perftest runs them, polling (softrnic perftest's default over iWARP:
	// --wait-drives 10ms --spin 200us, perftest.PollHold and PollSpin) ...
	{name: "write_lat_64", tool: "ib_write_lat", test: "write_lat", size: 64, iters: 1000, lat: true},
	{name: "read_lat_64", tool: "ib_read_lat", test: "read_lat", size: 64, iters: 1000, lat: true},
	{name: "send_lat_64", tool: "ib_send_lat", test: "send_lat", size: 64, iters: 1000, lat: true},
	// ... and softrnic with -e, its waits blocked until the connection's goroutine completes
	// the work (perftest's siw side polls in both)
	{name: "write_lat_64_events", tool: "ib_write_lat", test: "write_lat", size: 64, iters: 1000, lat: true, opts: "-e"},
	{name: "read_lat_64_events", tool: "ib_read_lat", test: "read_lat", size: 64, iters: 1000, lat: true, opts: "-e"},
	{name: "send_lat_64_events", tool: "ib_send_lat", test: "send_lat", size: 64, iters: 1000, lat: true, opts: "-e"},
}

// smokeIters is the iteration count of every case in smoke mode.
const smokeIters = 200

// The measurement file's records (one format, internal/siwbench).
type (
	siwMeta = siwbench.Meta
	siwRun  = siwbench.Run
)

var siwPorts atomic.Int32

func siwPort() int { return 20500 + int(siwPorts.Add(1)) }

// parseLatRow returns t_min, t_typical, t_avg and the 99% percentile (µs) of perftest's
// latency row for size (latRowRE: size, iterations, t_min, t_max, t_typical, t_avg,
// t_stdev, 99% and 99.9% percentiles). Rows with inf or -nan (perftest's TSC deltas gone
// wrong under TCG: see siwMeasure) do not count.
func parseLatRow(out string, size, iters int) (min, typ, avg, p99 float64, err error) {
	out = cleanPerftest(out)
	for _, m := range latRowRE.FindAllStringSubmatch(out, -1) {
		if m[1] != strconv.Itoa(size) {
			continue
		}
		if m[2] != strconv.Itoa(iters) {
			return 0, 0, 0, 0, fmt.Errorf("latency row has %s iterations, want %d", m[2], iters)
		}
		var v [4]float64
		finite := true
		for k, i := range []int{3, 5, 6, 8} {
			x, err := strconv.ParseFloat(m[i], 64)
			v[k] = x
			finite = finite && err == nil && !math.IsInf(x, 0) && !math.IsNaN(x)
		}
		if !finite { // latRowRE also matches perftest's inf/-nan rows
			continue
		}
		return v[0], v[1], v[2], v[3], nil
	}
	return 0, 0, 0, 0, fmt.Errorf("no finite latency row for %d bytes", size)
}

// parseBWRow returns the peak and average bandwidth (MB/s) of perftest's report row.
func parseBWRow(out string, size, iters int) (peak, avg float64, err error) {
	out = cleanPerftest(out)
	for _, m := range ptReportRE.FindAllStringSubmatch(out, -1) {
		if m[1] != strconv.Itoa(size) {
			continue
		}
		if m[2] != strconv.Itoa(iters) {
			return 0, 0, fmt.Errorf("report row has %s iterations, want %d", m[2], iters)
		}
		peak, _ = strconv.ParseFloat(m[3], 64)
		avg, err = strconv.ParseFloat(m[4], 64)
		if err != nil || avg <= 0 || math.IsInf(avg, 0) || math.IsNaN(avg) {
			return 0, 0, fmt.Errorf("BW average %q", m[4])
		}
		return peak, avg, nil
	}
	return 0, 0, fmt.Errorf("no report row for %d bytes", size)
}

// wallRE is the timing line siwClientScript prints after the client.
var wallRE = regexp.MustCompile(`(?m)^@@WALL ([0-9.]+) ([0-9.]+) (\d+)$`)

// siwClientScript runs cmd in the guest under a hard timeout and prints its start and end
// (/proc/uptime) and exit status on one line.
func siwClientScript(cmd string, timeout time.Duration) string {
	return fmt.Sprintf("a=$(cut -d' ' -f1 /proc/uptime)\ntimeout -s KILL %d %s\nrc=$?\nb=$(cut -d' ' -f1 /proc/uptime)\necho\necho \"@@WALL $a $b $rc\"\n",
		int(timeout/time.Second), cmd)
}

// siwOnce runs one server and client pair of c in the guest; impl is "siw" or "softrnic".
// It returns the client's output; err reports a failure of either side.
func siwOnce(g *Guest, impl string, c siwCase, iters int, timeout time.Duration) (r siwRun, out string, err error) {
	port := siwPort()
	common := fmt.Sprintf("-R -F -s %d -n %d -p %d", c.size, iters, port)
	if c.both != "" {
		common += " " + c.both
	}
	r = siwRun{Impl: impl, Case: c.name, Size: c.size, Iters: iters}
	if impl == "siw" {
		r.ServerCmd = fmt.Sprintf("%s -d siw0 %s", c.tool, common)
		r.ClientCmd = fmt.Sprintf("%s -d siw0 %s %s", c.tool, common, GuestSiwAddr)
	} else {
		idle := fmt.Sprintf(" --timeout %ds --idle %ds", int(timeout/time.Second)+30, int(timeout/time.Second))
		if c.opts != "" {
			idle += " " + c.opts
		}
		r.ServerCmd = c.wrap[0] + fmt.Sprintf("softrnic perftest %s %s --bind %s", c.test, common, GuestSiwAddr) + idle
		r.ClientCmd = c.wrap[1] + fmt.Sprintf("softrnic perftest %s %s", c.test, common) + idle + " " + GuestSiwAddr
	}
	srv, err := g.Start("exec "+r.ServerCmd, timeout+60*time.Second)
	if err != nil {
		return r, "", err
	}
	defer srv.Kill()
	// siw: the rdma_cm listener and siw's kernel TCP socket under it; softrnic: its TCP
	// socket. A client that came earlier would be refused.
	if impl == "siw" {
		err = g.WaitCMListen(port, 60*time.Second)
	}
	if err == nil {
		err = g.WaitTCPListen(port, 60*time.Second)
	}
	if err != nil {
		return r, "", fmt.Errorf("%s server: %v\n%s", impl, err, srv.Output())
	}
	cli, err := g.Run(siwClientScript(r.ClientCmd, timeout), timeout+30*time.Second)
	if err != nil {
		return r, cli.Output, err
	}
	out = cli.Output
	m := wallRE.FindStringSubmatch(out)
	if m == nil {
		return r, out, fmt.Errorf("no timing line in the client's output:\n%s", Tail(out, 3000))
	}
	a, _ := strconv.ParseFloat(m[1], 64)
	b, _ := strconv.ParseFloat(m[2], 64)
	r.WallS = math.Round((b-a)*100) / 100
	sr, serr := srv.Wait(30 * time.Second)
	if m[3] != "0" || serr != nil || sr.Code != 0 {
		return r, out, fmt.Errorf("%s: client exit %s (137: killed after %v):\n%s\nserver exit %d, %v:\n%s",
			impl, m[3], timeout, Tail(out, 2500), sr.Code, serr, Tail(sr.Output, 2500))
	}
	if c.lat {
		r.LatMin, r.LatTyp, r.LatAvg, r.LatP99, err = parseLatRow(out, c.size, iters)
	} else {
		r.BWPeak, r.BWAvg, err = parseBWRow(out, c.size, iters)
	}
	if err != nil {
		return r, out, fmt.Errorf("%s client: %v:\n%s", impl, err, Tail(out, 3000))
	}
	return r, out, nil
}

// siwAttempts bounds the runs of one siw measurement (see siwMeasure).
const siwAttempts = 8

// siwMeasure runs c on one side and returns the run and its client's output, repeating
// siw's run (at most siwAttempts) when it fails or reports a figure that is not one: things of the guest's own stack, not of softrnic,
// happen there under TCG. (1) ib_write_lat -R (and, rarely, ib_read_bw -R) over siw
// loopback sometimes never completes (the client reports "Bad wc status 5" for its first
// exchange, or hangs, or crashes in librdmacm): the server writes first, right after
// siw's MPA Reply, which races siw's own initiator (README, finding 10). (2) perftest
// times with the TSC, which the guest kernel marks unstable ("TSCs unsynchronized"): a
// run whose process moved between vCPUs can print inf/-nan, and when the host is busy
// perftest's own calibration of the TSC against gettimeofday fails ("Correlation
// coefficient r^2: 0.78 < 0.9"), it takes the CPU as 0 MHz and prints "BW average 0.00".
// softrnic's runs are not repeated: any failure fails the test.
func siwMeasure(t *testing.T, g *Guest, impl string, c siwCase, iters int, timeout time.Duration) (siwRun, string) {
	t.Helper()
	var rejected []string
	for attempt := 1; ; attempt++ {
		r, out, err := siwOnce(g, impl, c, iters, timeout)
		if err == nil {
			r.Attempts, r.Rejected = attempt, rejected
			return r, out
		}
		if impl != "siw" || attempt == siwAttempts {
			t.Fatalf("%s %s (attempt %d): %v", impl, c.name, attempt, err)
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		rejected = append(rejected, strings.TrimSuffix(first, ":"))
		t.Logf("siw %s attempt %d rejected, repeating: %v", c.name, attempt, err)
	}
}

// TestSiwVsSoftrnic: see the top of this file.
func TestSiwVsSoftrnic(t *testing.T) {
	g := guest(t)
	pairs, bench := 1, false
	if v := os.Getenv("SOFTRNIC_SIW_BENCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOFTRNIC_SIW_BENCH=%q: want a number of pairs ≥ 1", v)
		}
		pairs, bench = n, true
	}
	if bench {
		record(t, PeerSiw, fmt.Sprintf("siw vs softrnic inside the guest, %d pairs (bench/SIW.md)", pairs), "both")
	} else {
		record(t, PeerSiw, fmt.Sprintf("guest-only: softrnic perftest ↔ softrnic perftest and perftest over siw0 loopback, -n %d (smoke)", smokeIters), "both")
	}

	// The binary in the guest is the one built for this run.
	want, err := os.ReadFile(guestSoftrnicHost)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(want)
	out, err := g.MustRun("sha256sum "+GuestSoftrnic+"; nproc; uname -r; cat /sys/devices/system/clocksource/clocksource0/current_clocksource", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], hex.EncodeToString(sum[:])+" ") {
		t.Fatalf("the guest's %s is not the static build %s (sha256 %x):\n%s", GuestSoftrnic, guestSoftrnicHost, sum, out)
	}
	meta := siwMeta{Meta: true, Pairs: pairs, GuestCPUs: lines[1], GuestKernel: lines[2], Clocksource: lines[3],
		Build: "CGO_ENABLED=0 go build ./cmd/softrnic"}
	if q, err := exec.Command("qemu-system-x86_64", "--version").Output(); err == nil {
		meta.QEMU, _, _ = strings.Cut(string(q), "\n")
	}
	for _, c := range siwCases {
		meta.Cases = append(meta.Cases, c.name)
	}

	var enc *json.Encoder
	if p := os.Getenv("SOFTRNIC_SIW_BENCH_OUT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		enc = json.NewEncoder(f)
		if err := enc.Encode(meta); err != nil {
			t.Fatal(err)
		}
	}
	timeout := 60 * time.Second // a run takes 1-17 s on the loaded 2-core host; a hung siw run costs this
	if !bench {
		timeout = 30 * time.Second
	}
	t0 := time.Now()
	for p := 1; p <= pairs; p++ {
		for _, c := range siwCases {
			iters := c.iters
			if !bench {
				iters = smokeIters
			}
			for _, impl := range []string{"siw", "softrnic"} {
				r, _ := siwMeasure(t, g, impl, c, iters, timeout)
				r.Pair = p
				if c.lat {
					t.Logf("pair %d %-15s %-8s typical %8.2f µs  p99 %8.2f µs  min %8.2f µs  (client %.2f s, %d attempt(s))",
						p, c.name, impl, r.LatTyp, r.LatP99, r.LatMin, r.WallS, r.Attempts)
				} else {
					t.Logf("pair %d %-15s %-8s BW average %8.2f MB/s  peak %8.2f MB/s  (client %.2f s, %d attempt(s))",
						p, c.name, impl, r.BWAvg, r.BWPeak, r.WallS, r.Attempts)
				}
				if enc != nil {
					if err := enc.Encode(r); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	t.Logf("%d pair(s) of %d cases in %v", pairs, len(siwCases), time.Since(t0).Round(100*time.Millisecond))
}
