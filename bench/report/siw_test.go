package main

import (
	"strings"
	"testing"
)

// siwSample is what tests/interop's TestSiwVsSoftrnic writes: the metadata, then one line
// per run (here two pairs of two cases).
const siwSample = `{"meta":true,"pairs":2,"guest_kernel":"6.1.0-56-amd64","guest_cpus":"2","guest_clocksource":"hpet","qemu":"QEMU emulator version 7.2.0","softrnic_build":"CGO_ENABLED=0 go build ./cmd/softrnic","cases":["write_bw_65536","write_lat_64"]}
{"pair":1,"impl":"siw","case":"write_bw_65536","size":65536,"iters":2000,"bw_avg_mbs":100,"bw_peak_mbs":120,"client_wall_s":2.5,"attempts":1,"server_cmd":"ib_write_bw -d siw0 -R -F -s 65536 -n 2000 -p 20501","client_cmd":"ib_write_bw -d siw0 -R -F -s 65536 -n 2000 -p 20501 192.168.77.2"}
{"pair":1,"impl":"softrnic","case":"write_bw_65536","size":65536,"iters":2000,"bw_avg_mbs":50,"bw_peak_mbs":60,"client_wall_s":3.1,"attempts":1,"server_cmd":"softrnic perftest write -R -F -s 65536 -n 2000 -p 20502 --bind 192.168.77.2","client_cmd":"softrnic perftest write -R -F -s 65536 -n 2000 -p 20502 192.168.77.2"}
{"pair":1,"impl":"siw","case":"write_lat_64","size":64,"iters":1000,"lat_min_us":20,"lat_typical_us":30,"lat_avg_us":35,"lat_p99_us":150,"client_wall_s":1.2,"attempts":2,"rejected":["siw: client exit 137"],"server_cmd":"ib_write_lat -d siw0 -R -F -s 64 -n 1000 -p 20503","client_cmd":"ib_write_lat -d siw0 -R -F -s 64 -n 1000 -p 20503 192.168.77.2"}
{"pair":1,"impl":"softrnic","case":"write_lat_64","size":64,"iters":1000,"lat_min_us":100,"lat_typical_us":300,"lat_avg_us":400,"lat_p99_us":1500,"client_wall_s":1.3,"attempts":1,"server_cmd":"x","client_cmd":"y"}
{"pair":2,"impl":"siw","case":"write_bw_65536","size":65536,"iters":2000,"bw_avg_mbs":80,"client_wall_s":2.5,"attempts":1,"server_cmd":"","client_cmd":""}
{"pair":2,"impl":"softrnic","case":"write_bw_65536","size":65536,"iters":2000,"bw_avg_mbs":120,"client_wall_s":3.1,"attempts":1,"server_cmd":"","client_cmd":""}
{"pair":2,"impl":"siw","case":"write_lat_64","size":64,"iters":1000,"lat_typical_us":40,"lat_p99_us":100,"client_wall_s":1.2,"attempts":1,"server_cmd":"","client_cmd":""}
{"pair":2,"impl":"softrnic","case":"write_lat_64","size":64,"iters":1000,"lat_typical_us":20,"lat_p99_us":200,"client_wall_s":1.3,"attempts":1,"server_cmd":"","client_cmd":""}
`

func TestSiwParseAndStats(t *testing.T) {
	meta, runs, err := parseSiw([]byte(siwSample))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Pairs != 2 || meta.GuestKernel != "6.1.0-56-amd64" || len(meta.Cases) != 2 || len(runs) != 8 {
		t.Fatalf("meta %+v, %d runs", meta, len(runs))
	}
	if r := runs[2]; r.Impl != "siw" || r.LatTyp != 30 || r.LatP99 != 150 || r.Attempts != 2 || len(r.Rejected) != 1 {
		t.Fatalf("run 2: %+v", r)
	}
	// Bandwidth: softrnic ÷ siw per pair (0.5, 1.5); the median of two is their mean.
	s := siwStats(runs, siwRow{cas: "write_bw_65536", metric: bwAvg})
	if len(s.ratio) != 2 || s.ratio[0] != 0.5 || s.ratio[1] != 1.5 || median(s.siw) != 90 || median(s.srn) != 85 {
		t.Fatalf("bandwidth stats %+v", s)
	}
	// Latency: siw ÷ softrnic per pair (30/300 = 0.1, 40/20 = 2).
	s = siwStats(runs, siwRow{cas: "write_lat_64", metric: latTyp, lower: true})
	if len(s.ratio) != 2 || s.ratio[0] != 0.1 || s.ratio[1] != 2 {
		t.Fatalf("latency stats %+v", s)
	}
	// The wall-clock cross-check: 65536 × 2000 B in 2.5 s.
	if v := wallBW(runs[0]); v < 52.42 || v > 52.43 {
		t.Fatalf("wallBW %v", v)
	}
	if median([]float64{1, 2, 9}) != 2 || medRange(nil) != "—" || medRange([]float64{1, 2, 30}) != "2.00 (1.00–30.0)" {
		t.Fatal("median/medRange")
	}

	md := siwMarkdown(meta, runs, "# head\n\n", "sudo go test ...")
	for _, want := range []string{
		"| RDMA WRITE bandwidth, 64 KiB (MB/s) | 90.0 (80.0–100.0) | 85.0 (50.0–120.0) | 1.00 (0.50–1.50) | yes |",
		"| RDMA WRITE latency, 64 B, typical (µs) | 35.0 (30.0–40.0) | 160.0 (20.0–300.0) | 1.05 (0.10–2.00) | yes |",
		"| RDMA READ bandwidth, 64 KiB (MB/s) | — | — | — |  |",
		"| RDMA WRITE latency, 64 B, minimum (µs) | 20.0 (20.0–20.0) | 100.0 (100.0–100.0) | 0.20 (0.20–0.20) | no |",
		"- pair 1 siw write_lat_64: siw: client exit 137",
		"ib_write_bw -d siw0 -R -F -s 65536 -n 2000 -p PORT 192.168.77.2\n",
		"softrnic perftest write -R -F -s 65536 -n 2000 -p PORT --bind 192.168.77.2\n",
		"Linux 6.1.0-56-amd64 under QEMU TCG (QEMU emulator version 7.2.0), 2 vCPUs, clocksource hpet",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("SIW.md lacks %q:\n%s", want, md)
		}
	}

	for _, bad := range []string{"", `{"pair":1,"impl":"siw"}`, "{\"meta\":true}\n{\"impl\":\"rxe\"}"} {
		if _, _, err := parseSiw([]byte(bad)); err == nil {
			t.Errorf("parseSiw(%q) accepted", bad)
		}
	}
}
