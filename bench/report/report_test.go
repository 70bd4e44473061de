package main

import (
	"bytes"
	"testing"
)

func TestParseAndMet(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkLatency/nocrc/64B-2    20000   26211 ns/op   2.44 MB/s   19763 tcp-ns/op   0.7540 x-tcp   0 B/op   0 allocs/op
BenchmarkLatency/nocrc/64B-2    20000   26583 ns/op   2.41 MB/s   18004 tcp-ns/op   0.6773 x-tcp   0 B/op   0 allocs/op
BenchmarkConnect-2   15381   65012 ns/op   15381 conns/s
PASS
`)
	s := map[string]map[string][]float64{}
	parse(out, s)
	if v := s["BenchmarkLatency/nocrc/64B"]["x-tcp"]; len(v) != 2 || v[0] != 0.754 || v[1] != 0.6773 {
		t.Fatalf("x-tcp %v", v)
	}
	if v := s["BenchmarkConnect"]["conns/s"]; len(v) != 1 || v[0] != 15381 {
		t.Fatalf("conns/s %v", v)
	}
	parseManyQP([]byte("MANYQP iwarp qps=10000 heap_per_qp=7885 stack_per_qp=0 rss_per_qp=15000 rss_total=161480704 goroutines_per_qp=0.00\n"), s)
	if v := s["MANYQP/iwarp"]; len(v["heap_per_qp_kib"]) != 1 || v["heap_per_qp_kib"][0] < 7.69 || v["heap_per_qp_kib"][0] > 7.71 ||
		v["rss_total_mib"][0] < 153.9 || v["rss_total_mib"][0] > 154.1 {
		t.Fatalf("MANYQP %v", v)
	}
	for _, c := range []struct {
		v    float64
		goal string
		want string
	}{{0.8, "≥ 0.8", "yes"}, {0.79, "≥ 0.8", "no"}, {1.3, "≤ 1.25", "no"}, {1.2, "≤ 1.25", "yes"}, {1, "", ""}} {
		if got := met(c.v, row{goal: c.goal}); got != c.want {
			t.Errorf("met(%v, %q) = %q, want %q", c.v, c.goal, got, c.want)
		}
	}
}

func TestRenderSweep(t *testing.T) {
	out := []byte(`BenchmarkWrite/nocrc/64B-2   100   500 ns/op   117.1 MB/s   35.0 tcp-MB/s   3.3 x-tcp   0 B/op   0 allocs/op
BenchmarkWrite/nocrc/1MiB-2   100   500 ns/op   3000 MB/s   3100 tcp-MB/s   0.96 x-tcp   0 B/op   0 allocs/op
BenchmarkWrite/nocrc/64B-2   100   500 ns/op   120.0 MB/s   36.0 tcp-MB/s   3.5 x-tcp   0 B/op   0 allocs/op
BenchmarkWrite/nocrc/1MiB-2   100   500 ns/op   2900 MB/s   3200 tcp-MB/s   0.90 x-tcp   1 B/op   0 allocs/op
BenchmarkWrite/nocrc/64B-2   100   500 ns/op   110.0 MB/s   34.0 tcp-MB/s   3.1 x-tcp   0 B/op   0 allocs/op
BenchmarkWrite/nocrc/64KiB-2   100   500 ns/op   4000 MB/s   1800 tcp-MB/s   2.2 x-tcp   4400 tcp-bulk-MB/s   0.91 x-tcp-bulk   0 B/op   0 allocs/op
`)
	s := map[string]map[string][]float64{}
	order := map[int][]string{0: parse(out, s)}
	if len(order[0]) != 3 || order[0][0] != "BenchmarkWrite/nocrc/64B" || order[0][1] != "BenchmarkWrite/nocrc/1MiB" {
		t.Fatalf("order %v", order[0])
	}
	p := page{title: "T", intro: "I.", runs: []run{{regexp: "x", cols: tcpCols, title: "sweep"}}}
	md, err := p.render("head", 3, s, order, []string{"go test x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Write/nocrc/64B | 117.1 | 35.0 (34.0–36.0) | 3.30 (3.10–3.50) | — | — | 0 | 0 |", // no bulk baseline
		"| Write/nocrc/1MiB | 3000 | 3200 (3100–3200) | 0.96 (0.90–0.96) | — | — | 1 | 0 |",
		"| Write/nocrc/64KiB | 4000 | 1800 | 2.20 | 4400 | 0.91 | 0 | 0 |",
		"I. 3 runs each.", "go test x",
	} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("page lacks %q:\n%s", want, md)
		}
	}
	if _, err := p.render("head", 3, s, map[int][]string{}, []string{"go test x"}); err == nil {
		t.Error("a sweep with no benchmark lines rendered")
	}
	if _, err := selectPages("results,nope"); err == nil {
		t.Error("unknown page accepted")
	}
	if sel, err := selectPages("all"); err != nil || len(sel) != len(pages) {
		t.Errorf("all: %d pages, %v", len(sel), err)
	}
}
