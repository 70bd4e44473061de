package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softrnic/softrnic/internal/siwbench"
)

// -siw: issue 14's "against siw, not only TCP". tests/interop's TestSiwVsSoftrnic runs, in
// the interop QEMU guest (TCG), perftest over siw0 loopback and softrnic perftest over the
// guest's own address, server and client both in the guest, in alternating pairs, and
// writes one JSON line per run; this reads them and writes bench/SIW.md.

// The measurement file's records (one format, internal/siwbench).
type (
	siwMeta = siwbench.Meta
	siwRun  = siwbench.Run
)

// parseSiw reads the measurement file: the metadata line, then the runs.
func parseSiw(b []byte) (siwMeta, []siwRun, error) {
	var meta siwMeta
	var runs []siwRun
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		if bytes.Contains(l, []byte(`"meta":true`)) {
			if err := json.Unmarshal(l, &meta); err != nil {
				return meta, nil, err
			}
			continue
		}
		var r siwRun
		if err := json.Unmarshal(l, &r); err != nil {
			return meta, nil, err
		}
		if r.Impl != "siw" && r.Impl != "softrnic" {
			return meta, nil, fmt.Errorf("run %q: impl %q", l, r.Impl)
		}
		runs = append(runs, r)
	}
	if !meta.Meta {
		return meta, nil, fmt.Errorf("no metadata line")
	}
	return meta, runs, sc.Err()
}

// siwRow is one line of SIW.md's table.
type siwRow struct {
	what   string
	cas    string
	metric func(siwRun) float64
	lower  bool // latency: the ratio is siw ÷ softrnic
}

func bwAvg(r siwRun) float64  { return r.BWAvg }
func latTyp(r siwRun) float64 { return r.LatTyp }
func latP99(r siwRun) float64 { return r.LatP99 }
func latMin(r siwRun) float64 { return r.LatMin }

// wallBW is the bandwidth from the client's wall-clock time (set-up included).
func wallBW(r siwRun) float64 {
	if r.WallS <= 0 {
		return 0
	}
	return float64(r.Size) * float64(r.Iters) / r.WallS / 1e6
}

var siwRows = []siwRow{
	{"RDMA WRITE bandwidth, 64 KiB (MB/s)", "write_bw_65536", bwAvg, false},
	{"RDMA WRITE bandwidth, 4 KiB (MB/s)", "write_bw_4096", bwAvg, false},
	{"RDMA READ bandwidth, 64 KiB (MB/s)", "read_bw_65536", bwAvg, false},
	{"RDMA WRITE latency, 64 B, typical (µs)", "write_lat_64", latTyp, true},
	{"RDMA WRITE latency, 64 B, 99th percentile (µs)", "write_lat_64", latP99, true},
	{"RDMA WRITE latency, 64 B, minimum (µs)", "write_lat_64", latMin, true},
	{"RDMA READ latency, 64 B, typical (µs)", "read_lat_64", latTyp, true},
	{"RDMA READ latency, 64 B, 99th percentile (µs)", "read_lat_64", latP99, true},
	{"RDMA READ latency, 64 B, minimum (µs)", "read_lat_64", latMin, true},
	{"SEND latency, 64 B, typical (µs)", "send_lat_64", latTyp, true},
	{"SEND latency, 64 B, 99th percentile (µs)", "send_lat_64", latP99, true},
	{"SEND latency, 64 B, minimum (µs)", "send_lat_64", latMin, true},
	{"RDMA WRITE latency, 64 B, typical, softrnic with -e (blocked waits) (µs)", "write_lat_64_events", latTyp, true},
	{"RDMA WRITE latency, 64 B, minimum, softrnic with -e (µs)", "write_lat_64_events", latMin, true},
	{"RDMA READ latency, 64 B, typical, softrnic with -e (µs)", "read_lat_64_events", latTyp, true},
	{"RDMA READ latency, 64 B, minimum, softrnic with -e (µs)", "read_lat_64_events", latMin, true},
	{"SEND latency, 64 B, typical, softrnic with -e (µs)", "send_lat_64_events", latTyp, true},
	{"SEND latency, 64 B, minimum, softrnic with -e (µs)", "send_lat_64_events", latMin, true},
	{"cross-check: WRITE 64 KiB, bytes ÷ client wall time incl. set-up (MB/s)", "write_bw_65536", wallBW, false},
}

// siwStat is the median and range of a row on each side and of its per-pair ratio.
type siwStat struct {
	siw, srn, ratio []float64 // sorted
}

// siwStats collects a row's values: each side's, and the ratio within each pair
// (softrnic ÷ siw, or siw ÷ softrnic for latency, so that > 1 favours softrnic).
func siwStats(runs []siwRun, w siwRow) siwStat {
	var s siwStat
	byPair := map[int][2]float64{}
	for _, r := range runs {
		if r.Case != w.cas {
			continue
		}
		v := w.metric(r)
		if v <= 0 { // not reported (the test writes every figure it parsed, all positive)
			continue
		}
		p := byPair[r.Pair]
		if r.Impl == "siw" {
			s.siw = append(s.siw, v)
			p[0] = v
		} else {
			s.srn = append(s.srn, v)
			p[1] = v
		}
		byPair[r.Pair] = p
	}
	for _, p := range byPair {
		if p[0] <= 0 || p[1] <= 0 {
			continue
		}
		if w.lower {
			s.ratio = append(s.ratio, p[0]/p[1])
		} else {
			s.ratio = append(s.ratio, p[1]/p[0])
		}
	}
	slices.Sort(s.siw)
	slices.Sort(s.srn)
	slices.Sort(s.ratio)
	return s
}

// medRange formats the median and the range of sorted values.
func medRange(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(v[0]), num(v[len(v)-1]))
}

// median of sorted values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// portRE replaces each run's own port in the commands shown.
var portRE = regexp.MustCompile(`-p \d+`)

// siwMarkdown renders SIW.md.
func siwMarkdown(meta siwMeta, runs []siwRun, header, goCmd string) string {
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, "Guest: Linux %s under QEMU TCG (%s), %s vCPUs, clocksource %s; softrnic built with `%s` and put into the guest's initramfs (tests/interop `Options.Files`).\n\n",
		meta.GuestKernel, meta.QEMU, meta.GuestCPUs, meta.Clocksource, meta.Build)
	fmt.Fprintf(&b, "Each case ran %d times on each side, in pairs (siw, then softrnic, then the next case; the pairs one after the other), "+
		"both server and client inside the guest over its own address 192.168.77.2 (siw0's), so both go through the same guest kernel's TCP loopback. "+
		"Values are perftest's own figures from the client's report line (BW average; latency t_typical, perftest's median, its 99%% percentile and t_min: "+
		"the minimum is the least disturbed by the host's load). "+
		"Each side's column is its median (lowest–highest run); the ratio is the median (lowest–highest) of the per-pair ratios, "+
		"softrnic ÷ siw for bandwidth and siw ÷ softrnic for latency, so > 1 means softrnic is faster. Goal (issue 14): ≥ 1.0. Do not edit by hand.\n\n", meta.Pairs)
	b.WriteString("| case | siw | softrnic | ratio (> 1: softrnic faster) | goal ≥ 1.0 met |\n|---|---|---|---|---|\n")
	for _, w := range siwRows {
		s := siwStats(runs, w)
		met := ""
		if len(s.ratio) > 0 {
			met = "no"
			if median(s.ratio) >= 1 {
				met = "yes"
			}
		}
		if strings.HasPrefix(w.what, "cross-check") {
			met = ""
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", w.what, medRange(s.siw), medRange(s.srn), medRange(s.ratio), met)
	}
	// Repeated siw runs (see siwMeasure in the test).
	var rej []string
	for _, r := range runs {
		for _, x := range r.Rejected {
			rej = append(rej, fmt.Sprintf("pair %d %s %s: %s", r.Pair, r.Impl, r.Case, x))
		}
	}
	fmt.Fprintf(&b, "\nsiw runs repeated because perftest failed or printed a non-finite figure (the test repeats siw's run, at most 8 attempts, and never softrnic's; see siwMeasure in tests/interop/siw_vs_softrnic_test.go): %d.\n", len(rej))
	for _, x := range rej {
		fmt.Fprintf(&b, "- %s\n", x)
	}
	b.WriteString("\nCommands inside the guest (server, then client; PORT is a fresh port per run):\n\n```\n")
	seen := map[string]bool{}
	for _, r := range runs {
		for _, c := range []string{r.ServerCmd, r.ClientCmd} {
			c = portRE.ReplaceAllString(c, "-p PORT")
			if c != "" && !seen[c] {
				seen[c] = true
				b.WriteString(c + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "```\n\nOn the host (root, QEMU; the guest cache of tests/interop):\n\n```\n%s\n```\n", goCmd)
	return b.String()
}

// siwReport runs the measurement and writes out.
func siwReport(pairs int, out string) error {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "not root (the interop guest needs a network namespace and tap devices)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		why = append(why, "qemu-system-x86_64 not installed (tests/interop/ci.sh installs it)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		why = append(why, "no /dev/net/tun")
	}
	if len(why) > 0 {
		return fmt.Errorf("-siw cannot run here: %s", strings.Join(why, "; "))
	}
	commit := treeState() // as the run finds it: softrnic is built from this tree
	dir, err := os.MkdirTemp("", "softrnic-siw-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "runs.jsonl")
	env := []string{"SOFTRNIC_INTEROP=1", "SOFTRNIC_SIW_BENCH=" + strconv.Itoa(pairs), "SOFTRNIC_SIW_BENCH_OUT=" + data}
	args := []string{"test", "-count=1", "-v", "-timeout", "90m", "-run", "^TestSiwVsSoftrnic$", "./tests/interop/"}
	goCmd := "sudo " + strings.Join(env[:2], " ") + " SOFTRNIC_SIW_BENCH_OUT=FILE go " + strings.Join(quote(args), " ")
	if c := os.Getenv("SOFTRNIC_INTEROP_CACHE"); c != "" {
		goCmd = strings.Replace(goCmd, "sudo ", "sudo SOFTRNIC_INTEROP_CACHE="+c+" ", 1)
	}
	fmt.Fprintln(os.Stderr, "report:", goCmd)
	load0 := loadavg()
	t0 := time.Now()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout = &teeWriter{&buf}
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go test: %v", err)
	}
	if !strings.Contains(buf.String(), "--- PASS: TestSiwVsSoftrnic") {
		return fmt.Errorf("TestSiwVsSoftrnic did not pass (skipped? see the banner above)")
	}
	b, err := os.ReadFile(data)
	if err != nil {
		return err
	}
	meta, runs, err := parseSiw(b)
	if err != nil {
		return err
	}
	if want := 2 * pairs * len(meta.Cases); len(runs) != want {
		return fmt.Errorf("%d runs in %s, want %d", len(runs), data, want)
	}
	header := fmt.Sprintf("# softrnic against siw, inside the interop guest (generated)\n\n"+
		"Written by `go run ./bench/report -siw -count %d` on %s, commit %s, in %v; host: %s; host load average before %s, after %s.\n\n",
		pairs, time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit, time.Since(t0).Round(time.Second), strings.Split(machine(), ", load ")[0], load0, loadavg())
	return os.WriteFile(out, []byte(siwMarkdown(meta, runs, header, goCmd)), 0o644)
}

// teeWriter copies go test's output to stderr as it comes and keeps it.
type teeWriter struct{ b *bytes.Buffer }

func (t *teeWriter) Write(p []byte) (int, error) {
	t.b.Write(p)
	return os.Stderr.Write(p)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
