package perftest

// The reports, computed as perftest 4.5 computes them (perftest_parameters.c:
// print_report_bw, print_report_lat, print_report_lat_duration) from timestamps of every
// post (tposted) and completion (tcompleted). perftest counts TSC cycles; softrnic counts
// nanoseconds of the monotonic clock, so "cycles per second" is 1e9 and "cycles per
// microsecond" 1000. The integer arithmetic on cycles (the peak's per-message minimum,
// the median) is kept as it is, in unsigned 64-bit like cycles_t.

import (
	"math"
	"slices"
	"time"
)

// cycles is a timestamp: nanoseconds since the process's clock base.
type cycles = uint64

var clockBase = time.Now()

// now is get_cycles.
func now() cycles { return cycles(time.Since(clockBase)) }

const (
	cyclesPerSec  = 1e9 // get_cpu_mhz() * 1e6
	cyclesPerUsec = 1e3 // get_cpu_mhz()
	mbUnit        = 0x100000
	gbUnit        = 125000000
)

// bwInput is what print_report_bw reads.
type bwInput struct {
	size       uint64
	iters      uint64 // per QP for -n; the sampled count for -D
	qps        int
	cqMod      int
	duration   bool // -D: iters is the total, and the time the sample window
	noPeak     bool
	gbits      bool
	tposted    []cycles // index by post order; [0] only with noPeak
	tcompleted []cycles // index by completion count - 1; [0] only with noPeak
}

// bwReport computes the report (print_report_bw): the average over the whole run, the
// message rate and, unless noPeak, the peak: the best per-message time over every window
// from a post to a later recorded completion.
func (in *bwInput) report() bwReport {
	n := in.iters
	if !in.duration {
		n *= uint64(in.qps)
	}
	optDelta := in.tcompleted[0] - in.tposted[0]
	if !in.noPeak {
		total := in.iters * uint64(in.qps)
		mod := uint64(in.cqMod)
		for i := uint64(0); i < total; i++ {
			for j := roundUp(i+1, mod) - 1; j < total; j += mod {
				if t := (in.tcompleted[j] - in.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			if total%mod != 0 {
				j := total - 1
				if t := (in.tcompleted[j] - in.tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}
	format := float64(mbUnit)
	if in.gbits {
		format = gbUnit
	}
	last := uint64(0)
	if !in.noPeak {
		last = n - 1
	}
	sum := float64(in.tcompleted[last] - in.tposted[0])
	r := bwReport{Size: in.size, Iters: n}
	r.Avg = float64(in.size) * float64(n) * cyclesPerSec / (sum * format)
	r.MsgRateAvg = float64(n) * cyclesPerSec / (sum * 1e6)
	peakUp := uint64(0)
	if !in.noPeak {
		peakUp = in.size * uint64(cyclesPerSec)
	}
	r.Peak = float64(peakUp) / float64(optDelta*uint64(format))
	return r
}

// roundUp is ROUND_UP(value, alignment).
func roundUp(v, a uint64) uint64 {
	if v%a == 0 {
		return v
	}
	return (v/a + 1) * a
}

// latReport is a latency test's result row (REPORT_FMT_LAT), in microseconds.
type latReport struct {
	Size, Iters                              uint64
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// latencyReport computes print_report_lat from the post times of iters messages: the
// iters-1 gaps between consecutive posts, sorted, the two largest dropped; the median of
// the rest (in integer cycles), their mean, the standard deviation over deviations
// truncated to whole microseconds, and the 99th and 99.9th percentile samples. rttFactor
// is 2 for write and send (a gap is a round trip) and 1 for read and atomic. The sorted
// gaps are left in scratch (len ≥ iters-1) and returned, for -U and -H.
func latencyReport(size uint64, tposted []cycles, rttFactor int, scratch []cycles) (latReport, []cycles) {
	iters := len(tposted)
	r := latReport{Size: size, Iters: uint64(iters)}
	cnt := iters - 1
	if cnt < 3 {
		return r, nil
	}
	delta := scratch[:cnt]
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	slices.Sort(delta)
	q := cyclesPerUsec * float64(rttFactor)
	n := cnt - 2 // LAT_MEASURE_TAIL
	var median cycles
	if (n-1)%2 != 0 {
		median = (delta[n/2] + delta[n/2-1]) / 2
	} else {
		median = delta[n/2]
	}
	sum := 0.0
	for _, d := range delta[:n] {
		sum += float64(d) / q
	}
	r.Avg = sum / float64(n)
	var sq float64
	for _, d := range delta[:n] {
		dev := int64(r.Avg - float64(d)/q) // truncated to an int, as perftest does
		sq += float64(int64(math.Pow(float64(dev), 2)))
	}
	r.Min = float64(delta[0]) / q
	r.Max = float64(delta[n]) / q
	r.Typical = float64(median) / q
	r.Stdev = math.Sqrt(sq / float64(n))
	r.P99 = float64(delta[int(math.Ceil(float64(n)*0.99))]) / q
	r.P999 = float64(delta[int(math.Ceil(float64(n)*0.999))]) / q
	return r, delta
}

// latencyDuration is print_report_lat_duration: the average one-way (or, for read,
// round-trip) time and the transactions per second over the sample window.
func latencyDuration(iters uint64, window cycles, rttFactor int) (avg, tps float64) {
	t := float64(window)
	avg = t / cyclesPerUsec / float64(rttFactor) / float64(iters)
	tps = float64(iters) / (t / (cyclesPerUsec * 1e6))
	return avg, tps
}
