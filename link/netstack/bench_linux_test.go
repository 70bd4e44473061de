//go:build linux

package netstack

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
)

// sink serves connections of l: each starts with the 8-byte count of bytes
// to follow; the sink reads them and answers one byte.
func sink(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				var hdr [8]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					for n := int64(binary.BigEndian.Uint64(hdr[:])); n > 0; {
						k, err := c.Read(buf[:min(int64(len(buf)), n)])
						if err != nil {
							return
						}
						n -= int64(k)
					}
					if _, err := c.Write([]byte{1}); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// pongs serves connections of l by echoing fixed-size messages.
func pongs(l net.Listener, size int) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// stream sends n messages of size bytes on c and waits for the sink's
// acknowledgement; it returns the elapsed time.
func stream(b *testing.B, c net.Conn, n, size int) time.Duration {
	msg := make([]byte, size)
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n)*uint64(size))
	start := time.Now()
	if _, err := c.Write(hdr[:]); err != nil {
		b.Fatal(err)
	}
	for range n {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := io.ReadFull(c, hdr[:1]); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// pingpong does n round trips of size bytes on c.
func pingpong(b *testing.B, c net.Conn, n, size int) time.Duration {
	buf := make([]byte, size)
	start := time.Now()
	for range n {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkTCP compares the userspace TCP over AF_XDP with kernel TCP over
// the same veth pair in the same run: namespace 0 sends (or pings), a
// kernel TCP server in namespace 1 receives (or answers). The kernel
// client runs in namespace 0 beside the AF_XDP port, whose program passes
// its segments to the kernel. Reported: both throughputs (or round-trip
// times) and x-kernel, the AF_XDP figure over the kernel's (>1: faster).
func BenchmarkTCP(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
		ping bool
	}{{"stream-1MiB", 1 << 20, false}, {"pingpong-64B", 64, true}} {
		b.Run(bc.name, func(b *testing.B) {
			r := newRig(b, 0, false)
			var kl net.Listener
			netnstest.In(b, r.env.NS[1], func() {
				var err error
				if kl, err = net.Listen("tcp", r.env.Addr[1].String()+":0"); err != nil {
					b.Fatal(err)
				}
			})
			defer kl.Close()
			if bc.ping {
				pongs(kl, bc.size)
			} else {
				sink(kl)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			uc, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer uc.Close()
			var kc net.Conn
			netnstest.In(b, r.env.NS[0], func() {
				if kc, err = net.Dial("tcp", kl.Addr().String()); err != nil {
					b.Fatal(err)
				}
			})
			defer kc.Close()
			run := stream
			if bc.ping {
				run = pingpong
			}
			run(b, uc, 4, bc.size) // warm up: windows open, neighbours known
			run(b, kc, 4, bc.size)
			b.SetBytes(int64(bc.size))
			b.ResetTimer()
			xdp := run(b, uc, b.N, bc.size)
			b.StopTimer()
			kern := run(b, kc, b.N, bc.size)
			if bc.ping {
				b.ReportMetric(float64(kern.Nanoseconds())/float64(b.N), "kernel-ns/op")
			} else {
				b.ReportMetric(float64(bc.size)*float64(b.N)/kern.Seconds()/1e6, "kernel-MB/s")
			}
			b.ReportMetric(kern.Seconds()/xdp.Seconds(), "x-kernel")
		})
	}
}
