//go:build linux

package xdp

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// BenchmarkLink moves batches of 32 packets of 1024 bytes (a RoCE MTU-1024
// packet's size class) one way across the veth pair, AF_XDP to AF_XDP
// beside kernel UDP sockets (sendmmsg/recvmmsg) in the same run. One op is
// one packet.
func BenchmarkLink(b *testing.B) {
	netnstest.RequirePriv(b)
	for _, kind := range []string{"xdp", "udp"} {
		b.Run(kind, func(b *testing.B) {
			e := newNetEnv(b, 1500)
			tx := e.openLink(b, 0, kind == "xdp", ModeAuto, nil)
			rx := e.openLink(b, 1, kind == "xdp", ModeAuto, nil)
			defer tx.Close()
			defer rx.Close()
			const batch = 32
			out := make([][]byte, batch)
			for i := range out {
				out[i] = make([]byte, 1024)
				out[i][0] = byte(i)
			}
			in := make([][]byte, batch)
			for i := range in {
				in[i] = make([]byte, rocev2.MaxPacket)
			}
			sizes := make([]int, batch)
			from := make([]netip.AddrPort, batch)
			dst := rx.LocalAddr()
			// warm up (neighbour resolution): send until one packet arrives
			stop := make(chan struct{})
			go func() {
				tk := time.NewTicker(10 * time.Millisecond)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						_ = tx.Send(out[:1], dst)
					}
				}
			}()
			_, err := rx.Recv(in, sizes, from)
			close(stop)
			if err != nil {
				b.Fatal(err)
			}
			watchdog := time.AfterFunc(time.Minute, func() { rx.Close() })
			defer watchdog.Stop()
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += batch {
				if err := tx.Send(out, dst); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < batch; {
					n, err := rx.Recv(in, sizes, from)
					if err != nil {
						b.Fatalf("after %d packets: %v (lost packets?)", sent+got, err)
					}
					got += n
				}
			}
		})
	}
}

// BenchmarkRCWrite measures RC RDMA WRITE throughput (one signaled WRITE
// at a time, path MTU 1024) between endpoints in the two namespaces, over
// AF_XDP links and over UDP links in the same run.
func BenchmarkRCWrite(b *testing.B) {
	netnstest.RequirePriv(b)
	for _, kind := range []string{"xdp", "udp"} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				e := newNetEnv(b, 1500)
				cfg := rocev2.DefaultConfig()
				cfg.MTU = roce.MTU1024
				cfg.Timeout = 16 // 268 ms: no RetryExc on a loaded shared machine
				x, y := newSide(b, e.openLink(b, 0, kind == "xdp", ModeAuto, nil), cfg), newSide(b, e.openLink(b, 1, kind == "xdp", ModeAuto, nil), cfg)
				connect(b, x, y)
				smr, _ := x.reg(b, size)
				dmr, _ := y.reg(b, size)
				wr := &rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, size)},
					RemoteAddr: dmr.Addr(), RKey: dmr.RKey()}
				wc := make([]rnic.Completion, 1)
				ctx := context.Background()
				// warm up: the first frames to a peer wait for its neighbour
				// entry (the port queues a bounded number, the transport
				// retransmits the rest after its ACK timeout): not in the timing
				if err := x.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				if _, err := x.scq.Wait(ctx, wc); err != nil || wc[0].Status != 0 {
					b.Fatal(err, wc[0])
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := x.qp.PostSend(wr); err != nil {
						b.Fatal(err)
					}
					if _, err := x.scq.Wait(ctx, wc); err != nil || wc[0].Status != 0 {
						b.Fatal(err, wc[0])
					}
				}
			})
		}
	}
}
