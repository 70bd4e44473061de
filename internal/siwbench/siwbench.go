// Package siwbench is the record format of the softrnic-against-siw measurement: one JSON
// line of Meta, then one Run per perftest run. tests/interop's TestSiwVsSoftrnic writes it
// (SOFTRNIC_SIW_BENCH_OUT) and bench/report -siw reads it into bench/SIW.md.
package siwbench

// Meta describes the measurement (the first line of the file).
type Meta struct {
	Meta        bool     `json:"meta"`
	Pairs       int      `json:"pairs"`
	GuestKernel string   `json:"guest_kernel"`
	GuestCPUs   string   `json:"guest_cpus"`
	Clocksource string   `json:"guest_clocksource"`
	QEMU        string   `json:"qemu"`
	Build       string   `json:"softrnic_build"`
	Cases       []string `json:"cases"`
}

// Run is one run's result.
type Run struct {
	Pair      int      `json:"pair"`
	Impl      string   `json:"impl"` // "siw" or "softrnic"
	Case      string   `json:"case"`
	Size      int      `json:"size"`
	Iters     int      `json:"iters"`
	BWAvg     float64  `json:"bw_avg_mbs,omitempty"` // perftest's "BW average[MB/sec]"
	BWPeak    float64  `json:"bw_peak_mbs,omitempty"`
	LatMin    float64  `json:"lat_min_us,omitempty"`
	LatTyp    float64  `json:"lat_typical_us,omitempty"` // perftest's t_typical (the median)
	LatAvg    float64  `json:"lat_avg_us,omitempty"`
	LatP99    float64  `json:"lat_p99_us,omitempty"`
	WallS     float64  `json:"client_wall_s"` // the client's run, from /proc/uptime (10 ms), set-up included
	Attempts  int      `json:"attempts"`      // 1 unless siw's run had to be repeated (see Rejected)
	Rejected  []string `json:"rejected,omitempty"`
	ServerCmd string   `json:"server_cmd"`
	ClientCmd string   `json:"client_cmd"`
}
