package udapl

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIAOpenCloseLeak runs testdata/leak.c: in one C process, dat_ia_open,
// 8 each of PZs, LMRs, CNOs, EVDs and EPs (half freed, half left to the
// close), and an abrupt dat_ia_close, cycle after cycle; libdat2 loads,
// initialises, finalises and dlcloses the provider each time. After a
// warm-up (the Go heap grows to its steady size), 1,000 more cycles must
// leave the resident set flat: within 4 MiB, while a C handle leaked per
// object (about 600 bytes, 42 handles a cycle) adds about 25 MiB, and the
// Go heap's own fluctuation is about 1 MiB.
func TestIAOpenCloseLeak(t *testing.T) {
	e := setup(t)
	bin := filepath.Join(e.dir, "leak")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, "testdata/leak.c", "-ldat2").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	const warm, cycles, step, objects = 500, 1000, 100, 8
	t0 := time.Now()
	res := "FAIL"
	cmdline := "leak softrnic-iwarp 1500 100 8 (testdata/leak.c)"
	defer func() {
		results.add(row{program: "IA open/close leak", transport: "iwarp", command: cmdline, result: res, secs: time.Since(t0).Seconds()})
	}()
	p := start(t, e.conf, "", 2*time.Minute, bin, "softrnic-iwarp", strconv.Itoa(warm+cycles), strconv.Itoa(step), strconv.Itoa(objects))
	out, err := p.wait()
	if err != nil {
		t.Fatalf("leak: %v\n%s", err, tail(out, 20))
	}
	rss := map[int]int{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("leak: unexpected line %q", l)
		}
		c, err1 := strconv.Atoi(f[0])
		kib, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || kib <= 0 {
			t.Fatalf("leak: unexpected line %q", l)
		}
		rss[c] = kib
	}
	// RSS moves by several MiB between samples as the Go runtime inside the
	// process collects and returns memory; a leak raises the level for good. So
	// the level is the median of five samples, before (cycles 300..700) and at
	// the end (1100..1500): 1,000 cycles apart with the same noise on both.
	level := func(from int) int {
		var v []int
		for c := from; c <= from+4*step; c += step {
			if rss[c] == 0 {
				t.Fatalf("leak: missing sample %d:\n%s", c, out)
			}
			v = append(v, rss[c])
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	first, last := level(warm-2*step), level(warm+cycles-4*step)
	growth := last - first
	t.Logf("RSS level (median of 5 samples) around cycle %d: %d KiB, around cycle %d: %d KiB (%+d KiB)", warm, first, warm+cycles-2*step, last, growth)
	const limitKiB = 4096
	if growth > limitKiB {
		t.Fatalf("RSS level grew %d KiB over %d dat_ia_open/dat_ia_close cycles (limit %d KiB):\n%s", growth, cycles, limitKiB, out)
	}
	res = "pass (RSS " + strconv.Itoa(first) + " → " + strconv.Itoa(last) + " KiB (medians of cycles 300..700 and 1100..1500))"
}
