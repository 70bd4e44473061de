//go:build linux

package steer

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The benchmarks receive 1024-byte RoCEv2 payloads on one link while a
// baseline link receives the same traffic in the same run (in alternating
// rounds), over loopback:
//
//	BenchmarkSteeredRecv   a process's steered socket (ModeBPF) beside a plain UDP socket
//	BenchmarkRelayRecv     a process's relay link (ModeRelay) beside a steered socket
//	BenchmarkSteeredRTT    round trips through a steered socket beside a plain one
//	BenchmarkRelayRTT      round trips through the relay beside a steered socket
//	BenchmarkSteerProgram  the SK_REUSEPORT program's own run time per packet
//
// ns/op is per packet (Recv) or per round trip (RTT).

const (
	benchSize   = 1024 // UDP payload bytes
	benchBatch  = 32   // packets per sendmmsg
	benchWindow = 512  // packets in flight at most (no loss on loopback)
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

// recvRun sends n packets to r.dst with sendmmsg, at most benchWindow
// unreceived, and receives them on r.rx; it returns the receive time.
func recvRun(b *testing.B, r rig, n int) time.Duration {
	tx, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &rocev2.UDPOptions{Batch: benchBatch})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	pk := make([][]byte, benchBatch)
	for i := range pk {
		pk[i] = append(packet(benchQPN, uint64(i)), make([]byte, benchSize-len(packet(0, 0)))...)
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
			if sizes[i] != benchSize {
				b.Fatalf("received %d bytes, want %d", sizes[i], benchSize)
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

// rttRun makes n round trips from a plain UDP client through r.
func rttRun(b *testing.B, r rig, n int) time.Duration {
	cli, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	pk := append(packet(benchQPN, 1), make([]byte, benchSize-len(packet(0, 0)))...)
	buf := make([]byte, 2*benchSize)
	cli.SetReadDeadline(time.Now().Add(time.Minute))
	start := time.Now()
	for range n {
		if _, err := cli.WriteToUDPAddrPort(pk, r.dst); err != nil {
			b.Fatal(err)
		}
		if k, _, err := cli.ReadFromUDPAddrPort(buf); err != nil || k != benchSize {
			b.Fatalf("echo: %d bytes, %v", k, err)
		}
	}
	return time.Since(start)
}

// benchRounds interleaves the measured path and its baseline, so a load
// change on the machine during the run affects both alike.
const benchRounds = 8

// interleave runs b.N operations of test in benchRounds parts, each
// followed by as many of base (untimed), and returns both totals.
func interleave(b *testing.B, run func(rig, int) time.Duration, base, test rig) (el, baseEl time.Duration) {
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
		el += run(test, n)
		b.StopTimer()
		baseEl += run(base, n)
	}
	return el, baseEl
}

func compareRecv(b *testing.B, base, test rig, baseName string) {
	run := func(r rig, n int) time.Duration { return recvRun(b, r, n) }
	run(test, 4096) // warm up both paths
	run(base, 4096)
	b.SetBytes(benchSize)
	b.ReportAllocs()
	el, baseEl := interleave(b, run, base, test)
	pps := float64(b.N) / el.Seconds()
	basePPS := float64(b.N) / baseEl.Seconds()
	b.ReportMetric(pps, "pkt/s")
	b.ReportMetric(basePPS, baseName+"-pkt/s")
	b.ReportMetric(pps/basePPS, "ratio")
}

func compareRTT(b *testing.B, base, test rig, baseName string) {
	go base.echo()
	go test.echo()
	run := func(r rig, n int) time.Duration { return rttRun(b, r, n) }
	run(test, 1000)
	run(base, 1000)
	b.ReportAllocs()
	el, baseEl := interleave(b, run, base, test)
	ns := float64(el.Nanoseconds()) / float64(b.N)
	baseNs := float64(baseEl.Nanoseconds()) / float64(b.N)
	b.ReportMetric(baseNs, baseName+"-ns/rtt")
	b.ReportMetric(ns-baseNs, "added-ns/rtt")
}

// BenchmarkSteeredRecv: the steering path costs no copy, so a steered
// socket receives as fast as a plain one (ratio ≈ 1).
func BenchmarkSteeredRecv(b *testing.B) {
	compareRecv(b, plainRig(b), steerRig(b, ModeBPF), "plain")
}

// BenchmarkRelayRecv: what the relay fallback costs in packets/s.
func BenchmarkRelayRecv(b *testing.B) {
	compareRecv(b, steerRig(b, ModeBPF), steerRig(b, ModeRelay), "steered")
}

// BenchmarkSteeredRTT: steering adds no latency beside a plain socket.
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
	recvRun(b, r, b.N)
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
