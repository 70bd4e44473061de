//go:build linux

package steer

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The benchmarks receive RoCEv2 payloads of 1024 and 4096 bytes (the
// largest RoCE MTU) on one link while a baseline link receives the same
// traffic in the same run (in alternating rounds), over loopback:
//
//	BenchmarkSteeredRecv   a process's steered socket (ModeBPF) beside a plain UDP socket
//	BenchmarkRelayRecv     a process's relay link (ModeRelay) beside a steered socket
//	BenchmarkSteeredRTT    round trips through a steered socket beside a plain one
//	BenchmarkRelayRTT      round trips through the relay beside a steered socket
//	BenchmarkSteerProgram  the SK_REUSEPORT program's own run time per packet
//
// ns/op is per packet (Recv) or per round trip (RTT). cpu-ns/pkt is the
// process's user+system CPU time per packet (sender, daemon and receiver
// are all in the test process): on a machine where the sender's loopback
// path is the bottleneck, a relay's extra work shows there before it shows
// in pkt/s.

var benchSizes = []int{1024, 4096} // UDP payload bytes

const (
	benchBatch  = 32  // packets per sendmmsg
	benchWindow = 512 // packets in flight at most (no loss on loopback)
	benchQPN    = 0x100
)

// rig is a link under test and where a peer sends to reach it.
type rig struct {
	rx  rocev2.Link
	dst netip.AddrPort
}

func plainRig(b *testing.B) rig {
	l, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return rig{rx: l, dst: l.LocalAddr()}
}

// steerRig attaches one process link in mode and maps benchQPN to it. In
// ModeRelay a goroutine plays the daemon, receiving on the daemon's link.
func steerRig(b *testing.B, mode Mode) rig {
	s := newSteerer(b, "127.0.0.1", mode, Config{})
	slot, l := attach(b, s)
	if err := s.Map(slot, benchQPN, 1); err != nil {
		b.Fatal(err)
	}
	if mode == ModeRelay {
		go collect(s.Link(), "daemon", make(chan arrival, 1024))
	}
	return rig{rx: l, dst: s.LocalAddr()}
}

// recvRun sends n packets of size bytes to r.dst with sendmmsg, at most
// benchWindow unreceived, and receives them on r.rx; it returns the
// receive time.
func recvRun(b *testing.B, r rig, n, size int) time.Duration {
	tx, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &rocev2.UDPOptions{Batch: benchBatch})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	pk := make([][]byte, benchBatch)
	for i := range pk {
		pk[i] = append(packet(benchQPN, uint64(i)), make([]byte, size-len(packet(0, 0)))...)
	}
	credit := make(chan struct{}, benchWindow/benchBatch)
	for range cap(credit) {
		credit <- struct{}{}
	}
	sendErr := make(chan error, 1)
	go func() {
		for sent := 0; sent < n; {
			<-credit
			k := min(benchBatch, n-sent)
			if err := tx.Send(pk[:k], r.dst); err != nil {
				sendErr <- err
				return
			}
			sent += k
		}
		sendErr <- nil
	}()
	lost := time.AfterFunc(time.Minute, func() { r.rx.Close() })
	defer lost.Stop()
	bufs := make([][]byte, r.rx.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, rocev2.MaxPacket)
	}
	sizes := make([]int, len(bufs))
	from := make([]netip.AddrPort, len(bufs))
	start := time.Now()
	for got, pending := 0, 0; got < n; {
		m, err := r.rx.Recv(bufs, sizes, from)
		if err != nil {
			b.Fatalf("after %d of %d packets: %v (lost packets?)", got, n, err)
		}
		for i := range m {
			if sizes[i] != size {
				b.Fatalf("received %d bytes, want %d", sizes[i], size)
			}
		}
		got += m
		for pending += m; pending >= benchBatch; pending -= benchBatch {
			credit <- struct{}{}
		}
	}
	el := time.Since(start)
	if err := <-sendErr; err != nil {
		b.Fatal(err)
	}
	return el
}

// echo answers every packet r.rx receives back to its source.
func (r rig) echo() {
	bufs := make([][]byte, r.rx.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, rocev2.MaxPacket)
	}
	sizes := make([]int, len(bufs))
	from := make([]netip.AddrPort, len(bufs))
	out := make([][]byte, 1)
	for {
		n, err := r.rx.Recv(bufs, sizes, from)
		if err != nil {
			return
		}
		for i := range n {
			out[0] = bufs[i][:sizes[i]]
			r.rx.Send(out, from[i])
		}
	}
}

// rttRun makes n round trips of size bytes from a plain UDP client through r.
func rttRun(b *testing.B, r rig, n, size int) time.Duration {
	cli, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	pk := append(packet(benchQPN, 1), make([]byte, size-len(packet(0, 0)))...)
	buf := make([]byte, 2*size)
	cli.SetReadDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	for range n {
		if _, err := cli.WriteToUDPAddrPort(pk, r.dst); err != nil {
			b.Fatal(err)
		}
		if k, _, err := cli.ReadFromUDPAddrPort(buf); err != nil || k != size {
			b.Fatalf("echo: %d bytes, %v", k, err)
		}
	}
	return time.Since(start)
}

// benchRounds interleaves the measured path and its baseline, so a load
// change on the machine during the run affects both alike.
const benchRounds = 8

// cost is what a run of operations took.
type cost struct {
	wall, cpu time.Duration
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// interleave runs b.N operations of test in benchRounds parts, each
// followed by as many of base (untimed), and returns both totals.
func interleave(b *testing.B, run func(rig, int) time.Duration, base, test rig) (t, bs cost) {
	measure := func(r rig, n int, c *cost) {
		cpu := cpuTime()
		c.wall += run(r, n)
		c.cpu += cpuTime() - cpu
	}
	b.ResetTimer()
	for r := range benchRounds {
		n := b.N / benchRounds
		if r == benchRounds-1 {
			n = b.N - n*(benchRounds-1)
		}
		if n == 0 {
			continue
		}
		b.StartTimer()
		measure(test, n, &t)
		b.StopTimer()
		measure(base, n, &bs)
	}
	return t, bs
}

func perOp(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

func compareRecv(b *testing.B, base, test rig, baseName string) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			run := func(r rig, n int) time.Duration { return recvRun(b, r, n, size) }
			run(test, 4096) // warm up both paths
			run(base, 4096)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			t, bs := interleave(b, run, base, test)
			pps := float64(b.N) / t.wall.Seconds()
			basePPS := float64(b.N) / bs.wall.Seconds()
			b.ReportMetric(pps, "pkt/s")
			b.ReportMetric(basePPS, baseName+"-pkt/s")
			b.ReportMetric(pps/basePPS, "ratio")
			b.ReportMetric(perOp(t.cpu, b.N), "cpu-ns/pkt")
			b.ReportMetric(perOp(bs.cpu, b.N), baseName+"-cpu-ns/pkt")
		})
	}
}

func compareRTT(b *testing.B, base, test rig, baseName string) {
	go base.echo()
	go test.echo()
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			run := func(r rig, n int) time.Duration { return rttRun(b, r, n, size) }
			run(test, 1000)
			run(base, 1000)
			b.ReportAllocs()
			t, bs := interleave(b, run, base, test)
			b.ReportMetric(perOp(bs.wall, b.N), baseName+"-ns/rtt")
			b.ReportMetric(perOp(t.wall-bs.wall, b.N), "added-ns/rtt")
		})
	}
}

// BenchmarkSteeredRecv: the steering path adds no copy, so a steered
// socket receives about as fast as a plain one at any size (ratio ≈ 1; what
// it costs is the program's constant per-packet time).
func BenchmarkSteeredRecv(b *testing.B) {
	compareRecv(b, plainRig(b), steerRig(b, ModeBPF), "plain")
}

// BenchmarkRelayRecv: what the relay fallback costs in packets/s and CPU.
func BenchmarkRelayRecv(b *testing.B) {
	compareRecv(b, steerRig(b, ModeBPF), steerRig(b, ModeRelay), "steered")
}

// BenchmarkSteeredRTT: the latency steering adds beside a plain socket.
func BenchmarkSteeredRTT(b *testing.B) {
	compareRTT(b, plainRig(b), steerRig(b, ModeBPF), "plain")
}

// BenchmarkRelayRTT: the latency the relay adds (one more hop through the
// daemon and a unix socket) beside a steered socket.
func BenchmarkRelayRTT(b *testing.B) {
	compareRTT(b, steerRig(b, ModeBPF), steerRig(b, ModeRelay), "steered")
}

// BenchmarkSteerProgram reports the steering program's run time per
// packet, from the kernel's BPF statistics (kernel.bpf_stats_enabled, on
// for the benchmark only; the figure includes the statistics' own clock
// reads).
func BenchmarkSteerProgram(b *testing.B) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, ebpf.ErrNotSupported) {
			b.Skipf("SKIP (privileged): BPF run-time statistics need CAP_SYS_ADMIN and kernel 5.8: %v", err)
		}
		b.Fatal(err)
	}
	defer stats.Close()
	s := newSteerer(b, "127.0.0.1", ModeBPF, Config{})
	slot, l := attach(b, s)
	if err := s.Map(slot, benchQPN, 1); err != nil {
		b.Fatal(err)
	}
	r := rig{rx: l, dst: s.LocalAddr()}
	before, err := s.prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	recvRun(b, r, b.N, 1024)
	b.StopTimer()
	after, err := s.prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	runs := after.RunCount - before.RunCount
	if runs < uint64(b.N) {
		b.Fatalf("program ran %d times for %d packets", runs, b.N)
	}
	b.ReportMetric(float64((after.Runtime-before.Runtime).Nanoseconds())/float64(runs), "bpf-ns/pkt")
}
