package perftest

import (
	"math"
	"testing"
)

// TestBWReport checks print_report_bw's arithmetic on hand-computed cases.
func TestBWReport(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	// Every WR signaled: the peak is the best (completion - post) / messages over every
	// window, in integer nanoseconds: (130-0)/4 = 32.
	in := bwInput{size: 1000, iters: 4, qps: 1, cqMod: 1, tposted: []cycles{0, 10, 20, 30}, tcompleted: []cycles{100, 110, 120, 130}}
	r := in.report()
	if r.Size != 1000 || r.Iters != 4 || !near(r.Peak, 1000*1e9/(32*1048576.0)) || !near(r.Avg, 1000*4*1e9/(130*1048576.0)) ||
		!near(r.MsgRateAvg, 4*1e9/(130*1e6)) {
		t.Errorf("cq_mod 1: %+v", r)
	}
	// CQ moderation 2 with 3 WRs: completions recorded at index 1 and (clamped) 2; the
	// first, unrecorded, entry is 0 and never the minimum (unsigned wrap-around).
	in = bwInput{size: 100, iters: 3, qps: 1, cqMod: 2, tposted: []cycles{1000, 1010, 1020}, tcompleted: []cycles{0, 1050, 1080}}
	r = in.report()
	if !near(r.Peak, 100*1e9/(25*1048576.0)) || !near(r.Avg, 100*3*1e9/(80*1048576.0)) {
		t.Errorf("cq_mod 2: %+v", r)
	}
	// Gb/s and noPeak: the run's two timestamps only; the peak prints 0.
	in = bwInput{size: 1000, iters: 10, qps: 2, cqMod: 1, noPeak: true, gbits: true, tposted: []cycles{500}, tcompleted: []cycles{2500}}
	r = in.report()
	if r.Iters != 20 || r.Peak != 0 || !near(r.Avg, 1000*20*1e9/(2000*125e6)) || !near(r.MsgRateAvg, 20*1e9/(2000*1e6)) {
		t.Errorf("noPeak gbits: %+v", r)
	}
	// -D: iters is the sampled total, not multiplied by the QPs.
	in = bwInput{size: 64, iters: 300, qps: 4, cqMod: 1, noPeak: true, duration: true, tposted: []cycles{0}, tcompleted: []cycles{1e9}}
	if r = in.report(); r.Iters != 300 || !near(r.MsgRateAvg, 300/1e6) {
		t.Errorf("duration: %+v", r)
	}
}

// TestLatencyReport checks print_report_lat's arithmetic: gaps between posts, sorted, the
// two largest dropped, integer median, deviations truncated to whole microseconds.
func TestLatencyReport(t *testing.T) {
	// gaps (ns): 5000 1000 3000 2000 7000 4000 100000; write: a gap is 2 one-way times.
	tp := []cycles{0, 5000, 6000, 9000, 11000, 18000, 22000, 122000}
	r, sorted := latencyReport(2, tp, 2, make([]cycles, len(tp)))
	// sorted: 1000 2000 3000 4000 5000 | 7000 100000; n = 5
	want := latReport{Size: 2, Iters: 8, Min: 0.5, Max: 3.5, Typical: 1.5, Avg: 1.5, Stdev: math.Sqrt(2.0 / 5), P99: 3.5, P999: 3.5}
	if r != want || len(sorted) != 7 || sorted[6] != 100000 {
		t.Errorf("odd n: %+v\nwant %+v", r, want)
	}
	// 9 posts, 8 gaps, n = 6: the median averages two samples in integer nanoseconds.
	tp = []cycles{0, 1000, 2001, 3003, 4006, 5010, 6015, 16015, 116015}
	r, _ = latencyReport(64, tp, 1, make([]cycles, len(tp)))
	// gaps: 1000 1001 1002 1003 1004 1005 10000 100000; median (1002+1003)/2 = 1002
	if r.Typical != 1.002 || r.Min != 1 || r.Max != 10 || r.P99 != 10 || r.Iters != 9 {
		t.Errorf("even n: %+v", r)
	}
	if avg, tps := latencyDuration(1000, 2e9, 2); avg != 1000 || tps != 500 {
		t.Errorf("duration: %v %v", avg, tps)
	}
}
