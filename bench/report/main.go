// Command report reruns the benchmarks behind issue 14's table and writes bench/RESULTS.md:
// for each row the median (and range) over -count runs of a benchmark that measures its
// baseline in the same run, with the date, the commit, the machine and the exact commands.
//
//	go run ./bench/report              # -count 5, writes bench/RESULTS.md
//	go run ./bench/report -count 7 -o /tmp/r.md
//
// It takes tens of minutes on a 2-core machine; run it on an idle one.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one line of the table: a benchmark and the metric reported for it.
type row struct {
	what   string // the case
	bench  string // full sub-benchmark name without the -N suffix
	metric string // a unit of the benchmark's output
	goal   string // issue 14's goal
	better string // "higher" or "lower"
}

// run is one go test invocation: a -bench regexp and its -benchtime, or (test set) a
// -run regexp whose tests print machine-readable lines (bench's TestManyQPs: "MANYQP
// <transport> key=value ..."), run once per -count with env.
type run struct {
	regexp, benchtime string
	rows              []row
	test              bool
	env               []string
}

var runs = []run{
	{regexp: `^BenchmarkLatency$/nocrc/64B`, benchtime: "20000x", rows: []row{
		{"64 B SEND ping-pong RTT, one process, CRC off: TCP RTT ÷ softrnic RTT", "BenchmarkLatency/nocrc/64B", "x-tcp", "≥ 0.8", "higher"},
		{"  softrnic RTT (ns)", "BenchmarkLatency/nocrc/64B", "ns/op", "", "lower"},
		{"  TCP RTT (ns)", "BenchmarkLatency/nocrc/64B", "tcp-ns/op", "", "lower"},
	}},
	{regexp: `^BenchmarkReadLatency2P$`, benchtime: "3000x", rows: []row{
		{"4 KiB READ from another process, p50 ÷ TCP request/response p50", "BenchmarkReadLatency2P/4KiB", "p50-ratio", "≤ 1.25", "lower"},
		{"  p99 ÷ TCP p99", "BenchmarkReadLatency2P/4KiB", "p99-ratio", "", "lower"},
		{"  softrnic p50 (µs)", "BenchmarkReadLatency2P/4KiB", "p50-us", "", "lower"},
	}},
	{regexp: `^Benchmark(Write|Read)$/nocrc/1MiB`, benchtime: "500x", rows: []row{
		{"WRITE 1 MiB, CRC off: ÷ TCP", "BenchmarkWrite/nocrc/1MiB", "x-tcp", "≥ 0.95", "higher"},
		{"READ 1 MiB, CRC off: ÷ TCP", "BenchmarkRead/nocrc/1MiB", "x-tcp", "≥ 0.95", "higher"},
	}},
	{regexp: `^Benchmark(Read|Send)$/crc/(1MiB|64KiB)`, benchtime: "500x", rows: []row{
		{"READ 1 MiB, CRC on: ÷ TCP", "BenchmarkRead/crc/1MiB", "x-tcp", "≥ 0.85", "higher"},
		{"SEND 64 KiB, CRC on: ÷ TCP", "BenchmarkSend/crc/64KiB", "x-tcp", "≥ 0.85", "higher"},
	}},
	{regexp: `^BenchmarkRoCEv2Write$`, benchtime: "2000x", rows: []row{
		{"RoCEv2 RC WRITE 4 KiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/4KiB", "ratio", "≥ 0.6", "higher"},
		{"RoCEv2 RC WRITE 64 KiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/64KiB", "ratio", "≥ 0.8", "higher"},
		{"RoCEv2 RC WRITE 1 MiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/1MiB", "ratio", "≥ 0.9", "higher"},
	}},
	{regexp: `^BenchmarkConnect$`, benchtime: "1s", rows: []row{
		{"iWARP connection set-up, one process (conns/s)", "BenchmarkConnect", "conns/s", "≥ 5000", "higher"},
	}},
	{regexp: `^TestManyQPs`, test: true, env: []string{"SOFTRNIC_MANYQP=10000"}, rows: []row{
		{"heap per connected idle QP, iWARP (KiB; 10,000 QPs in one process)", "MANYQP/iwarp", "heap_per_qp_kib", "≤ 16", "lower"},
		{"heap per connected idle QP, RoCEv2 (KiB)", "MANYQP/rocev2", "heap_per_qp_kib", "≤ 16", "lower"},
		{"process RSS with 10,000 connected iWARP QPs (MiB)", "MANYQP/iwarp", "rss_total_mib", "≤ 512", "lower"},
		{"process RSS with 10,000 connected RoCEv2 QPs (MiB)", "MANYQP/rocev2", "rss_total_mib", "≤ 512", "lower"},
	}},
	{regexp: `^BenchmarkAttachedWrite$`, benchtime: "15x", rows: []row{
		{"RC WRITE 64 KiB through the daemon's device (BPF) ÷ in-process", "BenchmarkAttachedWrite", "attached-bpf/in-process", "≥ 0.9", "higher"},
		{"  through the relay ÷ in-process", "BenchmarkAttachedWrite", "attached-relay/in-process", "", "higher"},
		{"  in-process with GRO (which steered sockets cannot use) ÷ in-process", "BenchmarkAttachedWrite", "in-process-gro/in-process", "", "higher"},
	}},
}

func main() {
	count := flag.Int("count", 5, "runs of each benchmark (each with its baseline in the same run)")
	out := flag.String("o", "bench/RESULTS.md", "the markdown file to write")
	flag.Parse()
	samples := map[string]map[string][]float64{} // bench → metric → values
	var cmds []string
	for _, r := range runs {
		args := []string{"test", "-run", "^$", "-bench", r.regexp, "-benchtime", r.benchtime, "-count", strconv.Itoa(*count), "./bench"}
		if r.test {
			args = []string{"test", "-run", r.regexp, "-count", strconv.Itoa(*count), "-v", "./bench"}
		}
		cmds = append(cmds, strings.Join(append(r.env, "go "+strings.Join(quote(args), " ")), " "))
		fmt.Fprintln(os.Stderr, "report:", cmds[len(cmds)-1])
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), r.env...)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "report: %v\n%s", err, b)
			os.Exit(1)
		}
		parse(b, samples)
		parseManyQP(b, samples)
	}
	var md bytes.Buffer
	commit := strings.TrimSpace(git("rev-parse", "--short", "HEAD"))
	if strings.TrimSpace(git("status", "--porcelain", "--untracked-files=no")) != "" {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(&md, "# Benchmark results (generated)\n\nWritten by `go run ./bench/report -count %d` on %s, commit %s; %s.\n\n",
		*count, time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit, machine())
	fmt.Fprintf(&md, "Each value is the median over %d runs of a benchmark that measures its baseline (raw TCP or UDP,\n"+
		"or the in-process device) in the same run; the range is the lowest and highest run. Do not edit by hand.\n\n", *count)
	fmt.Fprintln(&md, "| case | median | range | goal (issue 14) | met |")
	fmt.Fprintln(&md, "|---|---|---|---|---|")
	for _, r := range runs {
		for _, w := range r.rows {
			v := samples[w.bench][w.metric]
			if len(v) == 0 {
				fmt.Fprintf(&md, "| %s | — | no samples | %s | |\n", w.what, w.goal)
				continue
			}
			slices.Sort(v)
			med := v[len(v)/2]
			fmt.Fprintf(&md, "| %s | %s | %s–%s | %s | %s |\n", w.what, num(med), num(v[0]), num(v[len(v)-1]), w.goal, met(med, w))
		}
	}
	fmt.Fprintln(&md, "\nCommands:\n\n```")
	for _, c := range cmds {
		fmt.Fprintln(&md, c)
	}
	fmt.Fprintln(&md, "```")
	if err := os.WriteFile(*out, md.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "report: wrote", *out)
}

// parse reads benchmark lines: name-N, iterations, then value-unit pairs.
func parse(b []byte, into map[string]map[string][]float64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if into[name] == nil {
			into[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			into[name][f[i+1]] = append(into[name][f[i+1]], v)
		}
	}
}

// parseManyQP reads TestManyQPs' lines: "MANYQP <transport> qps=N heap_per_qp=B ...
// rss_total=B ..." into "MANYQP/<transport>": heap_per_qp_kib and rss_total_mib.
func parseManyQP(b []byte, into map[string]map[string][]float64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "MANYQP" {
			continue
		}
		name := "MANYQP/" + f[1]
		if into[name] == nil {
			into[name] = map[string][]float64{}
		}
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			x, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				continue
			}
			switch k {
			case "heap_per_qp":
				into[name]["heap_per_qp_kib"] = append(into[name]["heap_per_qp_kib"], x/1024)
			case "rss_total":
				into[name]["rss_total_mib"] = append(into[name]["rss_total_mib"], x/(1<<20))
			}
		}
	}
}

// met reports whether a goal of the form "≥ x" or "≤ x" holds.
func met(v float64, w row) string {
	g := strings.TrimSpace(w.goal)
	if g == "" {
		return ""
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(g[len("≥"):]), 64)
	if err != nil {
		return ""
	}
	ok := v >= x
	if strings.HasPrefix(g, "≤") {
		ok = v <= x
	}
	if ok {
		return "yes"
	}
	return "no"
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func quote(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func git(args ...string) string {
	b, _ := exec.Command("git", args...).Output()
	return string(b)
}

// machine describes the host: CPU model, CPUs, kernel, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load " + strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%s, %d CPUs%s, %s%s", model, runtime.NumCPU(), kernel, runtime.Version(), load)
}
