package bench

import (
	"net"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// BenchmarkRoCEv2Latency measures the round trip of a 64 B RC SEND ping-pong between two
// RoCEv2 QPs in one process over loopback UDP (the echo side reposts its receive and
// answers from its CQ waiter, as BenchmarkLatency does over iWARP), in rounds alternating
// with a UDP ping-pong of 64 B datagrams between two sockets of the same process
// (udp-ns/op; x-udp = UDP RTT ÷ RoCEv2 RTT).
//
// In "drive" each side's Wait runs its endpoint's receive itself (Config.WaitDrivesReceive).
func BenchmarkRoCEv2Latency(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchRoCEv2Latency(b, rnic.Config{}) })
	b.Run("drive", func(b *testing.B) { benchRoCEv2Latency(b, rnic.Config{WaitDrivesReceive: driveHold}) })
}

func benchRoCEv2Latency(b *testing.B, dcfg rnic.Config) {
	const size = 64
	b.StopTimer()
	cli, srv := roceConnect(b, dcfg)
	defer cli.close()
	defer srv.close()
	raw, d := sendPingPong(b, size, pingEnd{cli.pd, cli.qp, cli.cq}, pingEnd{srv.pd, srv.qp, srv.cq},
		func(k int) time.Duration { return udpPingPong(b, k, size) })
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "udp-ns/op")
	b.ReportMetric(raw.Seconds()/d.Seconds(), "x-udp")
}

// udpPingPong measures n round trips of size-byte datagrams between two loopback UDP
// sockets: the RoCEv2 latency baseline.
func udpPingPong(b *testing.B, n, size int) time.Duration {
	a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, size)
		for i := 0; i < n; i++ {
			k, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if _, err := c.WriteToUDPAddrPort(buf[:k], from); err != nil {
				return
			}
		}
	}()
	dst := c.LocalAddr().(*net.UDPAddr).AddrPort()
	buf := make([]byte, size)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := a.WriteToUDPAddrPort(buf, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := a.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(t0)
	<-done
	return el
}
