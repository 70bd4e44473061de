package bench

import (
	"flag"
	"testing"

	"github.com/softrnic/softrnic/rnic"
)

// TestDataPathAllocs runs the data-path benchmarks for 2,000 operations each and fails on
// any allocation per operation (issue 14: "0 allocs/op stays on every data-path
// benchmark"). Only what runs with the benchmark's timer on is counted: the operations,
// not set-up or the raw baselines.
func TestDataPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not checked under the race detector (its instrumentation allocates)")
	}
	if testing.Short() {
		t.Skip("-short: the benchmarks take a few seconds")
	}
	setBenchtime(t, "2000x")
	type benchCase struct {
		name string
		f    func(b *testing.B)
	}
	cases := []benchCase{
		{"Latency/nocrc/64B", func(b *testing.B) { benchLatency(b, false, 64, rnic.Config{}) }},
		{"Latency/crc/64B", func(b *testing.B) { benchLatency(b, true, 64, rnic.Config{}) }},
		{"Latency/drive/64B", func(b *testing.B) {
			benchLatency(b, false, 64, rnic.Config{WaitDrivesReceive: driveHold})
		}},
		{"RoCEv2Write/4KiB", func(b *testing.B) { benchRoCEv2OneSided(b, rnic.OpWrite, 4<<10) }},
		{"RoCEv2Read/4KiB", func(b *testing.B) { benchRoCEv2OneSided(b, rnic.OpRead, 4<<10) }},
		{"RoCEv2Send/default/4KiB", func(b *testing.B) { benchRoCEv2Send(b, rnic.Config{}, 4<<10) }},
		{"RoCEv2Send/drive/4KiB", func(b *testing.B) { benchRoCEv2Send(b, rnic.Config{WaitDrivesReceive: driveHold}, 4<<10) }},
		{"RoCEv2Latency/default", func(b *testing.B) { benchRoCEv2Latency(b, rnic.Config{}) }},
		{"RoCEv2Latency/drive", func(b *testing.B) { benchRoCEv2Latency(b, rnic.Config{WaitDrivesReceive: driveHold}) }},
	}
	for _, crc := range []bool{false, true} {
		for _, n := range []int{64, 64 << 10} {
			name := crcName(crc) + "/" + sizeName(n)
			cases = append(cases,
				benchCase{"Write/" + name, func(b *testing.B) { benchOneSided(b, rnic.OpWrite, crc, n) }},
				benchCase{"Read/" + name, func(b *testing.B) { benchOneSided(b, rnic.OpRead, crc, n) }},
				benchCase{"Send/" + name, func(b *testing.B) { benchSend(b, crc, n) }})
		}
	}
	for _, c := range cases {
		r := testing.Benchmark(c.f)
		if r.N == 0 {
			t.Errorf("%s: the benchmark failed", c.name)
			continue
		}
		if a := r.AllocsPerOp(); a != 0 {
			t.Errorf("%s: %d allocs/op (%d B/op) over %d operations", c.name, a, r.AllocedBytesPerOp(), r.N)
		}
	}
}

// setBenchtime sets -test.benchtime (for testing.Benchmark run from a test) until t ends.
func setBenchtime(t *testing.T, v string) {
	t.Helper()
	old := flag.Lookup("test.benchtime").Value.String()
	if err := flag.Set("test.benchtime", v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("test.benchtime", old) })
}
