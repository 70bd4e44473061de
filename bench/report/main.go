// Command report reruns every benchmark table in bench/ and writes the pages that hold
// them, each with the date, the commit, the machine and the exact commands: for each row the
// median (and range) over -count runs of a benchmark that measures its baseline in the same
// run.
//
//	go run ./bench/report                      # -count 5: RESULTS.md (issue 14's rows)
//	go run ./bench/report -pages all           # every page (xdp needs root)
//	go run ./bench/report -pages ops -count 3  # one page, three runs
//
// Pages (-pages, comma-separated, or "all"):
//
//	results  RESULTS.md  issue 14's goal rows
//	ops      OPS.md      every iWARP operation and size beside raw TCP, the RoCEv2 sizes beside raw UDP
//	xdp      XDP.md      iWARP and RoCEv2 over AF_XDP beside the kernel's TCP and UDP (root: network namespaces)
//
// With -siw it writes SIW.md instead (not part of "all"): softrnic perftest against perftest
// over Linux's siw, server and client both inside the interop QEMU guest (tests/interop's
// TestSiwVsSoftrnic, -count alternating pairs; siw.go). That needs what the interop suite
// needs — root, /dev/net/tun, qemu-system-x86_64 — and fails saying so when one is missing;
// the guest is built or reused in the interop cache (SOFTRNIC_INTEROP_CACHE):
//
//	sudo go run ./bench/report -siw            # 5 pairs, about 5 minutes
//
// It takes tens of minutes on a 2-core machine; run it on an idle one.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one line of a goal table: a benchmark and the metric reported for it.
type row struct {
	what   string // the case
	bench  string // full sub-benchmark name without the -N suffix
	metric string // a unit of the benchmark's output
	goal   string // issue 14's goal
	better string // "higher" or "lower"
}

// col is one column of a sweep table: a unit of the benchmark's output.
type col struct {
	metric, header string
}

// run is one go test invocation: a -bench regexp and its -benchtime in pkg (default
// ./bench), or (test set) a -run regexp whose tests print machine-readable lines (bench's
// TestManyQPs: "MANYQP <transport> key=value ..."), run once per -count with env. Its table
// is either rows (goal rows) or, with cols, one line per sub-benchmark it ran, in order.
type run struct {
	regexp, benchtime string
	pkg               string
	rows              []row
	cols              []col
	title             string // a sweep table's heading
	test              bool
	env               []string
}

// page is one generated markdown file.
type page struct {
	name, file, title string
	intro             string // what is measured, before the tables
	root              bool   // needs root (network namespaces, AF_XDP)
	runs              []run
}

var resultsRuns = []run{
	// Not a goal row: what this machine charges for waking a goroutine on an idle CPU,
	// which the latency and RoCEv2 rows depend on (BenchmarkIdleWake; bench/README.md).
	{regexp: `^BenchmarkIdleWake$`, benchtime: "2000x", rows: []row{
		{"machine: a goroutine woken on an idle CPU, p50 (µs)", "BenchmarkIdleWake", "p50-us", "", "lower"},
		{"  p90 (µs)", "BenchmarkIdleWake", "p90-us", "", "lower"},
	}},
	{regexp: `^BenchmarkLatency$/(nocrc|drive)/64B`, benchtime: "20000x", rows: []row{
		{"64 B SEND ping-pong RTT, one process, CRC off: TCP RTT ÷ softrnic RTT", "BenchmarkLatency/nocrc/64B", "x-tcp", "≥ 0.8", "higher"},
		{"  softrnic RTT (ns)", "BenchmarkLatency/nocrc/64B", "ns/op", "", "lower"},
		{"  TCP RTT (ns)", "BenchmarkLatency/nocrc/64B", "tcp-ns/op", "", "lower"},
		{"  the same, Config.WaitDrivesReceive: TCP RTT ÷ softrnic RTT", "BenchmarkLatency/drive/64B", "x-tcp", "≥ 0.8", "higher"},
		{"  softrnic RTT (ns), Config.WaitDrivesReceive", "BenchmarkLatency/drive/64B", "ns/op", "", "lower"},
		{"  TCP RTT (ns), same runs", "BenchmarkLatency/drive/64B", "tcp-ns/op", "", "lower"},
	}},
	// Not goal rows: a model of the least per-message work (BenchmarkLatencyFloor), what
	// the drive row could reach with nothing else, and the same work in the default
	// mode's structure (the receive on its own goroutine, handing each completion to the
	// waiter), what the default row could reach.
	{regexp: `^BenchmarkLatencyFloor$`, benchtime: "20000x", rows: []row{
		{"  a model of the least per-message work (BenchmarkLatencyFloor): TCP RTT ÷ model RTT", "BenchmarkLatencyFloor/64B", "x-tcp", "", "higher"},
		{"  model RTT (ns)", "BenchmarkLatencyFloor/64B", "ns/op", "", "lower"},
		{"  the model in the default mode's structure (receive hands off to the waiter): TCP RTT ÷ model RTT", "BenchmarkLatencyFloor/handoff", "x-tcp", "", "higher"},
		{"  model RTT (ns), hand-off structure", "BenchmarkLatencyFloor/handoff", "ns/op", "", "lower"},
	}},
	{regexp: `^BenchmarkReadLatency2P$`, benchtime: "3000x", rows: []row{
		{"4 KiB READ from another process, p50 ÷ TCP request/response p50", "BenchmarkReadLatency2P/4KiB", "p50-ratio", "≤ 1.25", "lower"},
		{"  p99 ÷ TCP p99", "BenchmarkReadLatency2P/4KiB", "p99-ratio", "", "lower"},
		{"  softrnic p50 (µs)", "BenchmarkReadLatency2P/4KiB", "p50-us", "", "lower"},
		{"  the same, Config.WaitDrivesReceive: p50 ÷ TCP p50", "BenchmarkReadLatency2P/4KiB-drive", "p50-ratio", "≤ 1.25", "lower"},
		{"  p99 ÷ TCP p99, Config.WaitDrivesReceive", "BenchmarkReadLatency2P/4KiB-drive", "p99-ratio", "", "lower"},
		{"  softrnic p50 (µs), Config.WaitDrivesReceive", "BenchmarkReadLatency2P/4KiB-drive", "p50-us", "", "lower"},
	}},
	// The bandwidth rows run for 1 s, as the issue's own table did. 500 operations are
	// short rounds (1 MiB: ~0.1 s in 8 rounds of ~13 ms) and spread wider: WRITE 1 MiB
	// gave 0.84–1.35 in ten 500-operation runs and 0.93–1.20 in ten 1 s runs taken
	// alternately; 500 SENDs of 64 KiB (~2 ms rounds) swung 0.30–0.83 in one page's runs
	// and left setup in B/op.
	{regexp: `^Benchmark(Write|Read)$/nocrc/1MiB`, benchtime: "1s", rows: []row{
		{"WRITE 1 MiB, CRC off: ÷ TCP", "BenchmarkWrite/nocrc/1MiB", "x-tcp", "≥ 0.95", "higher"},
		{"READ 1 MiB, CRC off: ÷ TCP", "BenchmarkRead/nocrc/1MiB", "x-tcp", "≥ 0.95", "higher"},
	}},
	{regexp: `^BenchmarkRead$/^crc$/1MiB`, benchtime: "1s", rows: []row{
		{"READ 1 MiB, CRC on: ÷ TCP", "BenchmarkRead/crc/1MiB", "x-tcp", "≥ 0.85", "higher"},
	}},
	{regexp: `^BenchmarkSend$/^crc$/64KiB`, benchtime: "1s", rows: []row{
		{"SEND 64 KiB, CRC on: ÷ TCP", "BenchmarkSend/crc/64KiB", "x-tcp", "≥ 0.85", "higher"},
		{"  ÷ TCP writing the same bytes 1 MiB at a time (bench/README: the 64 KiB baseline)", "BenchmarkSend/crc/64KiB", "x-tcp-bulk", "", "higher"},
	}},
	{regexp: `^BenchmarkRoCEv2Write$`, benchtime: "1s", rows: []row{
		{"RoCEv2 RC WRITE 4 KiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/4KiB", "ratio", "≥ 0.6", "higher"},
		{"RoCEv2 RC WRITE 64 KiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/64KiB", "ratio", "≥ 0.8", "higher"},
		{"RoCEv2 RC WRITE 1 MiB ÷ raw UDP GSO", "BenchmarkRoCEv2Write/1MiB", "ratio", "≥ 0.9", "higher"},
		{"  4 KiB ÷ raw UDP GSO of the WRITE's own datagram sizes", "BenchmarkRoCEv2Write/4KiB", "framed-ratio", "", "higher"},
		{"  64 KiB ÷ the same", "BenchmarkRoCEv2Write/64KiB", "framed-ratio", "", "higher"},
		{"  1 MiB ÷ the same", "BenchmarkRoCEv2Write/1MiB", "framed-ratio", "", "higher"},
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

// The columns of the iWARP sweeps: softrnic, its raw TCP baseline, the ratio, allocations.
var (
	tcpCols = []col{{"MB/s", "softrnic MB/s"}, {"tcp-MB/s", "raw TCP MB/s"}, {"x-tcp", "÷ TCP"},
		{"tcp-bulk-MB/s", "raw TCP, 1 MiB writes, MB/s"}, {"x-tcp-bulk", "÷ that"}, {"B/op", "B/op"}, {"allocs/op", "allocs/op"}}
	rttCols = []col{{"ns/op", "softrnic RTT ns"}, {"tcp-ns/op", "TCP RTT ns"}, {"x-tcp", "TCP RTT ÷ softrnic RTT"}, {"allocs/op", "allocs/op"}}
)

var pages = []page{
	{name: "results", file: "RESULTS.md", title: "Benchmark results",
		intro: "Issue 14's goal rows. Each value is the median over the runs of a benchmark that measures its\n" +
			"baseline (raw TCP or UDP, or the in-process device) in the same run; the range is the lowest and\n" +
			"highest run.",
		runs: resultsRuns},
	{name: "ops", file: "OPS.md", title: "Every operation and size",
		intro: "RDMA WRITE, READ and SEND over one iWARP connection on loopback (MPA rev 2, CRC off and on, 256 in\n" +
			"flight, every 32nd signaled) beside `Write`s of the same size on a loopback TCP connection in the\n" +
			"same run (from 16 KiB, also beside TCP writing the same bytes 1 MiB at a time; raw TCP alone by\n" +
			"write size below them); the 64 B SEND ping-pong beside a TCP ping-pong, over RoCEv2 beside a UDP ping-pong; RoCEv2\n" +
			"RC WRITE, READ and a SEND stream beside raw UDP GSO/GRO datagrams of the same socket code; a 4 KiB RoCEv2 READ from another\n" +
			"process beside a 4 KiB UDP request/response to it. See README.md for what each benchmark does.\n" +
			"Medians over the runs, with ranges; B/op and allocs/op are the highest run's.",
		runs: []run{
			{regexp: `^Benchmark(Write|Read|Send)$`, benchtime: "1s", cols: tcpCols, title: "iWARP WRITE, READ and SEND ÷ raw TCP"},
			{regexp: `^BenchmarkRawTCPSizes$`, benchtime: "3x", title: "Raw loopback TCP alone by write size (MB/s, median of 3 rotations)",
				cols: []col{{"16384B-MB/s", "16 KiB"}, {"32768B-MB/s", "32 KiB"}, {"65483B-MB/s", "65,483 B (one MSS)"},
					{"65536B-MB/s", "64 KiB"}, {"131072B-MB/s", "128 KiB"}, {"1048576B-MB/s", "1 MiB"}}},
			{regexp: `^BenchmarkLatency$`, benchtime: "20000x", cols: rttCols, title: "64 B SEND ping-pong round trip"},
			{regexp: `^BenchmarkRoCEv2Latency$`, benchtime: "20000x", title: "RoCEv2 64 B SEND ping-pong round trip",
				cols: []col{{"ns/op", "RoCEv2 RTT ns"}, {"udp-ns/op", "UDP RTT ns"}, {"x-udp", "UDP RTT ÷ RoCEv2 RTT"}, {"allocs/op", "allocs/op"}}},
			{regexp: `^BenchmarkRoCEv2Write$`, benchtime: "1s", title: "RoCEv2 RC WRITE ÷ raw UDP GSO",
				cols: []col{{"MB/s", "RoCEv2 MB/s"}, {"raw-MB/s", "raw UDP MB/s"}, {"ratio", "÷ raw UDP"},
					{"framed-MB/s", "raw UDP, the WRITE's datagram sizes, MB/s"}, {"framed-ratio", "÷ that"}, {"allocs/op", "allocs/op"}}},
			{regexp: `^BenchmarkRoCEv2Read$`, benchtime: "1s", title: "RoCEv2 RC READ ÷ raw UDP GSO",
				cols: []col{{"MB/s", "RoCEv2 MB/s"}, {"raw-MB/s", "raw UDP MB/s"}, {"ratio", "÷ raw UDP"}, {"allocs/op", "allocs/op"}}},
			{regexp: `^BenchmarkRoCEv2Send$`, benchtime: "1s", title: "RoCEv2 RC SEND stream ÷ raw UDP GSO (drive: Config.WaitDrivesReceive, deferred ACKs)",
				cols: []col{{"MB/s", "RoCEv2 MB/s"}, {"raw-MB/s", "raw UDP MB/s"}, {"ratio", "÷ raw UDP"}, {"retransmits", "retransmits"},
					{"acks-deferred", "ACKs deferred"}, {"ack-timer", "sent by the timer"}, {"allocs/op", "allocs/op"}}},
			{regexp: `^BenchmarkRoCEv2ReadLatency2P$`, benchtime: "3000x", title: "RoCEv2 4 KiB READ from another process ÷ UDP request/response",
				cols: []col{{"p50-us", "RoCEv2 p50 µs"}, {"udp-p50-us", "UDP p50 µs"}, {"p50-ratio", "p50 ÷ UDP"},
					{"p99-us", "RoCEv2 p99 µs"}, {"udp-p99-us", "UDP p99 µs"}, {"p99-ratio", "p99 ÷ UDP"}, {"allocs/op", "allocs/op"}}},
		}},
	{name: "xdp", file: "XDP.md", title: "AF_XDP beside the kernel's TCP and UDP", root: true,
		intro: "Each benchmark builds two network namespaces joined by a fresh veth pair (MTU 1500, XDP in driver\n" +
			"mode, copy mode: veth has no zero-copy) and tears them down. See README.md for what each one does.",
		runs: []run{
			{regexp: `^BenchmarkIWARPOverAFXDP$`, benchtime: "2s", title: "iWARP RDMA WRITE over AF_XDP (user-space TCP) beside iWARP over kernel TCP and raw kernel TCP",
				cols: []col{{"MB/s", "AF_XDP MB/s"}, {"kernel-iwarp-MB/s", "kernel-TCP iWARP MB/s"}, {"raw-tcp-MB/s", "raw TCP MB/s"},
					{"x-kernel-iwarp", "÷ kernel-TCP iWARP"}, {"x-raw-tcp", "÷ raw TCP"}}},
			{regexp: `^BenchmarkTCP$`, benchtime: "2s", pkg: "./link/netstack", title: "user-space TCP over AF_XDP (link/netstack) beside kernel TCP",
				cols: []col{{"ns/op", "AF_XDP ns/op"}, {"kernel-ns/op", "kernel ns/op"}, {"MB/s", "AF_XDP MB/s"}, {"kernel-MB/s", "kernel MB/s"}, {"x-kernel", "÷ kernel"}}},
			{regexp: `^Benchmark(Link|RCWrite)$`, benchtime: "2s", pkg: "./rnic/rocev2/xdp", title: "RoCEv2 over AF_XDP (afxdp) beside the UDP link (udp)",
				cols: []col{{"ns/op", "ns/op"}, {"MB/s", "MB/s"}, {"allocs/op", "allocs/op"}}},
		}},
}

func main() {
	count := flag.Int("count", 5, "runs of each benchmark (each with its baseline in the same run)")
	dir := flag.String("dir", "bench", "where the pages are written")
	which := flag.String("pages", "results", `pages to regenerate, comma-separated: results, ops, xdp, or "all"`)
	siw := flag.Bool("siw", false, "write only SIW.md: softrnic against siw inside the interop QEMU guest (root, QEMU)")
	flag.Parse()
	if *siw {
		out := filepath.Join(*dir, "SIW.md")
		if err := siwReport(*count, out); err != nil {
			fmt.Fprintln(os.Stderr, "report: FAIL:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "report: wrote", out)
		return
	}
	sel, err := selectPages(*which)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(2)
	}
	for _, p := range sel {
		if p.root && os.Geteuid() != 0 {
			fmt.Fprintf(os.Stderr, "report: page %s needs root (network namespaces, AF_XDP)\n", p.name)
			os.Exit(1)
		}
	}
	// The tree as the benchmarks find it, before this run writes any page.
	commit := treeState()
	for _, p := range sel {
		md, err := p.generate(*count, commit)
		if err == nil {
			err = os.WriteFile(filepath.Join(*dir, p.file), md, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "report: wrote", filepath.Join(*dir, p.file))
	}
}

// treeState names the commit checked out, and says so when tracked files differ from it.
func treeState() string {
	commit := strings.TrimSpace(git("rev-parse", "--short", "HEAD"))
	if strings.TrimSpace(git("status", "--porcelain", "--untracked-files=no")) != "" {
		commit += " (with uncommitted changes)"
	}
	return commit
}

// selectPages parses -pages.
func selectPages(list string) ([]page, error) {
	if list == "all" {
		return pages, nil
	}
	var sel []page
	for _, n := range strings.Split(list, ",") {
		i := slices.IndexFunc(pages, func(p page) bool { return p.name == strings.TrimSpace(n) })
		if i < 0 {
			return nil, fmt.Errorf("unknown page %q", n)
		}
		sel = append(sel, pages[i])
	}
	if len(sel) == 0 {
		return nil, errors.New("no page selected")
	}
	return sel, nil
}

// command is the go test invocation of r, run count times.
func (r run) command(count int) []string {
	pkg := r.pkg
	if pkg == "" {
		pkg = "./bench"
	}
	if r.test {
		return []string{"test", "-run", r.regexp, "-count", strconv.Itoa(count), "-v", pkg}
	}
	return []string{"test", "-run", "^$", "-bench", r.regexp, "-benchtime", r.benchtime, "-benchmem", "-count", strconv.Itoa(count), pkg}
}

// generate runs the page's benchmarks and renders it.
func (p page) generate(count int, commit string) ([]byte, error) {
	samples := map[string]map[string][]float64{} // bench → metric → values
	order := map[int][]string{}                  // run → the benchmarks it printed, in order
	var cmds []string
	for i, r := range p.runs {
		args := r.command(count)
		cmds = append(cmds, strings.Join(append(slices.Clone(r.env), "go "+strings.Join(quote(args), " ")), " "))
		fmt.Fprintln(os.Stderr, "report:", cmds[len(cmds)-1])
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), r.env...)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", cmds[len(cmds)-1], err, b)
		}
		order[i] = parse(b, samples)
		parseManyQP(b, samples)
	}
	head := fmt.Sprintf("Written by `go run ./bench/report -pages %s -count %d` on %s, commit %s; %s.",
		p.name, count, time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit, machine())
	return p.render(head, count, samples, order, cmds)
}

// render writes the page: head (who wrote it when), the goal rows, the sweep tables (a
// line per benchmark in order[run]) and the commands.
func (p page) render(head string, count int, samples map[string]map[string][]float64, order map[int][]string, cmds []string) ([]byte, error) {
	var md bytes.Buffer
	fmt.Fprintf(&md, "# %s (generated)\n\n%s\n\n", p.title, head)
	fmt.Fprintf(&md, "%s %d runs each. Do not edit by hand.\n", p.intro, count)
	if slices.ContainsFunc(p.runs, func(r run) bool { return r.rows != nil }) {
		fmt.Fprintln(&md, "\n| case | median | range | goal (issue 14) | met |")
		fmt.Fprintln(&md, "|---|---|---|---|---|")
		for _, r := range p.runs {
			for _, w := range r.rows {
				v := samples[w.bench][w.metric]
				if len(v) == 0 {
					fmt.Fprintf(&md, "| %s | — | no samples | %s | |\n", w.what, w.goal)
					continue
				}
				lo, med, hi := stats(v)
				fmt.Fprintf(&md, "| %s | %s | %s–%s | %s | %s |\n", w.what, num(med), num(lo), num(hi), w.goal, met(med, w))
			}
		}
	}
	for i, r := range p.runs {
		if r.cols == nil {
			continue
		}
		fmt.Fprintf(&md, "\n## %s\n\n| benchmark |", r.title)
		for _, c := range r.cols {
			fmt.Fprintf(&md, " %s |", c.header)
		}
		fmt.Fprint(&md, "\n|---|")
		for range r.cols {
			fmt.Fprint(&md, "---:|")
		}
		fmt.Fprintln(&md)
		if len(order[i]) == 0 {
			return nil, fmt.Errorf("%s: no benchmark lines", cmds[i])
		}
		for _, name := range order[i] {
			fmt.Fprintf(&md, "| %s |", strings.TrimPrefix(name, "Benchmark"))
			for k, c := range r.cols {
				v := samples[name][c.metric]
				switch {
				case len(v) == 0:
					fmt.Fprint(&md, " — |")
				case c.metric == "allocs/op" || c.metric == "B/op": // the worst run
					_, _, hi := stats(v)
					fmt.Fprintf(&md, " %s |", strconv.FormatFloat(hi, 'f', 0, 64))
				case k == 0 || len(v) == 1:
					_, med, _ := stats(v)
					fmt.Fprintf(&md, " %s |", num(med))
				default:
					lo, med, hi := stats(v)
					fmt.Fprintf(&md, " %s (%s–%s) |", num(med), num(lo), num(hi))
				}
			}
			fmt.Fprintln(&md)
		}
	}
	fmt.Fprintln(&md, "\nCommands:\n\n```")
	for _, c := range cmds {
		fmt.Fprintln(&md, c)
	}
	fmt.Fprintln(&md, "```")
	return md.Bytes(), nil
}

// stats returns the lowest, median and highest of v (sorted in place).
func stats(v []float64) (lo, med, hi float64) {
	slices.Sort(v)
	return v[0], v[len(v)/2], v[len(v)-1]
}

// parse reads benchmark lines: name-N, iterations, then value-unit pairs. It returns the
// benchmark names in the order they first appeared.
func parse(b []byte, into map[string]map[string][]float64) (order []string) {
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
		if !slices.Contains(order, name) {
			order = append(order, name)
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
	return order
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
