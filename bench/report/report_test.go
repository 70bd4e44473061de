package main

import "testing"

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
