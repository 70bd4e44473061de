package bench

import (
	"context"
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
func BenchmarkRoCEv2Latency(b *testing.B) {
	const size = 64
	b.StopTimer()
	cli, srv := roceConnect(b)
	defer cli.close()
	defer srv.close()
	cbuf, sbuf := make([]byte, 2*size), make([]byte, 2*size)
	cmr, _ := cli.pd.RegMR(cbuf, rnic.AccessLocalWrite)
	smr, _ := srv.pd.RegMR(sbuf, rnic.AccessLocalWrite)
	crecv := &rnic.RecvWR{SGL: []rnic.SGE{cmr.SGE(size, size)}}
	srecv := &rnic.RecvWR{SGL: []rnic.SGE{smr.SGE(size, size)}}
	csend := &rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, size)}}
	ssend := &rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{smr.SGE(0, size)}}
	n := b.N
	_ = srv.qp.PostRecv(srecv)
	go func() { // echo server
		var wc [1]rnic.Completion
		for i := 0; i < n; i++ {
			if _, err := srv.cq.Wait(context.Background(), wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
				return
			}
			if i+1 < n {
				_ = srv.qp.PostRecv(srecv)
			}
			_ = srv.qp.PostSend(ssend)
		}
	}()
	var wc [1]rnic.Completion
	b.SetBytes(size)
	b.ReportAllocs()
	var raw, d time.Duration
	for _, k := range rounds(n) {
		raw += udpPingPong(b, k, size)
		b.StartTimer()
		t0 := time.Now()
		for i := 0; i < k; i++ {
			_ = cli.qp.PostRecv(crecv)
			if err := cli.qp.PostSend(csend); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.cq.Wait(context.Background(), wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
				b.Fatal(err, wc[0])
			}
		}
		d += time.Since(t0)
		b.StopTimer()
	}
	b.ReportMetric(float64(raw.Nanoseconds())/float64(n), "udp-ns/op")
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
