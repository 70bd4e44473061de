package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// siwSampleVariant is one way of running the 64-byte write_lat.
type siwSampleVariant struct {
	name string
	impl string // "siw" or "softrnic"
	opts string // softrnic perftest options of both sides
	env  string // prefix of both softrnic commands
	pin  bool   // server on vCPU 0, client on vCPU 1
}

var siwSampleVariants = []siwSampleVariant{
	{name: "siw", impl: "siw"},
	{name: "softrnic", impl: "softrnic"}, // polling: --wait-drives 10ms --spin 200us (perftest.PollHold, PollSpin)
	{name: "softrnic-spin10ms", impl: "softrnic", opts: "--spin 10ms"},
	{name: "softrnic-e", impl: "softrnic", opts: "-e"},
	{name: "softrnic-gomaxprocs1", impl: "softrnic", env: "env GOMAXPROCS=1 "},
	{name: "softrnic-pinned", impl: "softrnic", pin: true},
	{name: "softrnic-pinned-gomaxprocs1", impl: "softrnic", env: "env GOMAXPROCS=1 ", pin: true},
}

// siwCase is the variant's siwMeasure case: a 64 B write_lat printing every sample.
func (v siwSampleVariant) siwCase() siwCase {
	c := siwCase{name: v.name, tool: "ib_write_lat", test: "write_lat", size: 64, lat: true, opts: v.opts, both: "-U"}
	c.wrap = [2]string{v.env, v.env}
	if v.pin {
		c.wrap[0] += "taskset -c 0 "
		c.wrap[1] += "taskset -c 1 "
	}
	return c
}

// sampleRE is a line of perftest's -U output: the sample's index and its latency in µs.
var sampleRE = regexp.MustCompile(`(?m)^\s*(\d+), ([0-9.]+)\s*$`)

// latSamples returns the latencies (µs) of perftest -U output, in their order.
func latSamples(out string) []float64 {
	var v []float64
	for _, m := range sampleRE.FindAllStringSubmatch(out, -1) {
		if x, err := strconv.ParseFloat(m[2], 64); err == nil {
			v = append(v, x)
		}
	}
	return v
}

// slowRuns returns how many of s exceed limit, and the mean and longest length of their
// runs of consecutive ones.
func slowRuns(s []float64, limit float64) (slow int, mean float64, longest int) {
	runs, cur := 0, 0
	for i, x := range s {
		if x > limit {
			slow++
			cur++
		}
		if cur > 0 && (x <= limit || i == len(s)-1) {
			runs++
			longest = max(longest, cur)
			cur = 0
		}
	}
	if runs > 0 {
		mean = float64(slow) / float64(runs)
	}
	return slow, mean, longest
}

// TestSiwLatencySamples looks for where the polling latency's tail inside the guest comes from (bench/README, "against the
// kernel's soft-iWARP"): ib_write_lat over siw0 and softrnic perftest write_lat, server and
// client inside the guest (siwMeasure, as TestSiwVsSoftrnic runs them), each printing
// every sample (-U), in variants that separate the suspects: the spin's length (--spin),
// blocked waits (-e), the Go runtime's second processor (GOMAXPROCS=1) and the guest
// scheduler's placement of the two processes (taskset: the server on vCPU 0, the client
// on vCPU 1).
//
// Without SOFTRNIC_SIW_SAMPLES it is a smoke test: one short run of each variant, whose
// client must print one sample per round trip. With SOFTRNIC_SIW_SAMPLES=N it runs N
// rounds of 2,000 iterations (the variants alternating within a round) and logs each
// run's percentiles and its runs of slow round trips; with SOFTRNIC_SIW_SAMPLES_OUT=DIR it
// keeps each client's output there.
func TestSiwLatencySamples(t *testing.T) {
	g := guest(t)
	rounds, iters := 1, 200
	if v := os.Getenv("SOFTRNIC_SIW_SAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOFTRNIC_SIW_SAMPLES=%q: want a number of rounds ≥ 1", v)
		}
		rounds, iters = n, 2000
	}
	dir := os.Getenv("SOFTRNIC_SIW_SAMPLES_OUT")
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	record(t, PeerSiw, fmt.Sprintf("write_lat -U inside the guest: siw and softrnic variants, %d round(s) of %d", rounds, iters), "both")
	for r := range rounds {
		for _, v := range siwSampleVariants {
			_, out := siwMeasure(t, g, v.impl, v.siwCase(), iters, 120*time.Second)
			if dir != "" {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s_%d.txt", v.name, r)), []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := latSamples(out)
			// perftest reports iters-1 round trips (the first starts the clock)
			if len(s) < iters-1 {
				t.Fatalf("%s (round %d): %d samples in the client's -U output, want %d:\n%s", v.name, r, len(s), iters-1, Tail(out, 2500))
			}
			slow, mean, longest := slowRuns(s, 300)
			slices.Sort(s)
			q := func(p int) float64 { return s[len(s)*p/100] }
			t.Logf("%-28s round %d: p50 %6.1f  p90 %6.1f  p99 %7.1f  max %7.1f µs; %4d of %d over 300 µs, in runs of %.1f on average, the longest %d",
				v.name, r, q(50), q(90), q(99), s[len(s)-1], slow, len(s), mean, longest)
		}
	}
}

// TestSlowRuns checks the run lengths TestSiwLatencySamples logs (and bench/README
// quotes), and the -U parsing, on made-up samples (no guest needed).
func TestSlowRuns(t *testing.T) {
	s := latSamples(" 1, 25.10\n 2, 400.00\n 3, 500.00\n 4, 30.00\n 5, 301.00\n 6, 20.00\n 7, 350.00\n 8, 360.00\n 9, 370.00\n")
	if len(s) != 9 || s[1] != 400 {
		t.Fatalf("latSamples: %v", s)
	}
	slow, mean, longest := slowRuns(s, 300)
	if slow != 6 || mean != 2 || longest != 3 {
		t.Errorf("slowRuns: %d slow in runs of %.2f, longest %d; want 6, 2, 3 (runs 2, 1, 3, the last at the end)", slow, mean, longest)
	}
	if slow, mean, longest := slowRuns([]float64{10, 20}, 300); slow != 0 || mean != 0 || longest != 0 {
		t.Errorf("no slow samples: %d, %.2f, %d", slow, mean, longest)
	}
}
