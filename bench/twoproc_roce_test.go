package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// BenchmarkRoCEv2Write2P is BenchmarkRoCEv2Write with the target in the server process
// (twoproc_test.go), as two programs on one host run it, beside raw UDP GSO datagrams sent
// to a sink in that process, measured just before and just after.
//
// In one process the Go scheduler runs both ends on one thread: each hand-off (the
// sender's batch, the target's receive, its ACK, the completion, the next post) finds the
// next goroutine by polling the network from the thread that just parked, so the idle
// thread is never woken: BenchmarkRoCEv2Write/4KiB uses about one CPU (user plus system
// time ~0.9 of the elapsed time under /usr/bin/time), and an execution trace (-trace)
// shows these goroutines taking turns on one thread. Here each end has its own threads, and
// each hand-off between the ends is a wake-up of another process's thread.

// Server side: a RoCEv2 endpoint with a listener answering with a 1 MiB region open to
// remote writes and reads, the raw UDP sink, and a UDP request/response server (the
// baseline of BenchmarkRoCEv2ReadLatency2P).

// serveRoCE starts the server process's RoCEv2 listener, raw UDP sink and UDP
// request/response server and returns "roce=ADDR udp=ADDR udprpc=ADDR".
func serveRoCE(dev *rnic.Device, pd *rnic.PD) (string, error) {
	cq, err := dev.CreateCQ(4096)
	if err != nil {
		return "", err
	}
	region := filled(1 << 20)
	mr, err := pd.RegMR(region, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	if err != nil {
		return "", err
	}
	link, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &roceUDPOpts)
	if err != nil {
		return "", err
	}
	ep := rocev2.NewEndpoint(dev, link, roceConfig())
	ln, err := rocev2.Listen(ep, "127.0.0.1:0", nil)
	if err != nil {
		return "", err
	}
	pdata := mr.RemoteBuffer(0, len(region)).Append(nil)
	go func() {
		for {
			r, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024}})
			if err == nil {
				_, err = r.Accept(qp, rocev2.ConnParam{PrivateData: pdata})
			}
			if err != nil {
				fmt.Println("accept:", err)
			}
		}
	}()
	sink, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &roceUDPOpts)
	if err != nil {
		return "", err
	}
	go udpSink(sink)
	rpc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", err
	}
	go udpRPC(rpc)
	return fmt.Sprintf("roce=%s udp=%s udprpc=%s", ln.Addr(), sink.LocalAddr(), rpc.LocalAddr()), nil
}

// udpRPC answers each datagram whose first 4 bytes are a big-endian size with a datagram
// of that many bytes (at most 64 KiB - 1): TCP's request/response server of
// BenchmarkReadLatency2P, over UDP.
func udpRPC(c *net.UDPConn) {
	req := make([]byte, 64)
	resp := filled(65507)
	for {
		n, from, err := c.ReadFromUDPAddrPort(req)
		if err != nil {
			return
		}
		if n < 4 {
			continue
		}
		k := min(int(binary.BigEndian.Uint32(req)), len(resp))
		_, _ = c.WriteToUDPAddrPort(resp[:k], from)
	}
}

// The raw sink's protocol: datagrams of rawPkt bytes are data; a datagram of
// sinkQueryLen bytes asks for the count so far, answered with sinkReplyLen bytes (payload
// bytes received, big-endian, then the nanoseconds from the first data datagram to the
// last). The first data datagram after a query starts a new count.
const (
	sinkQueryLen = 8
	sinkReplyLen = 16
)

func udpSink(l *rocev2.UDPLink) {
	bufs, sizes, from := recvBatch(l.BatchSize())
	var n int64
	var first, last time.Time
	queried := true
	reply := make([]byte, sinkReplyLen)
	for {
		k, err := l.Recv(bufs, sizes, from)
		if err != nil {
			return
		}
		now := time.Now()
		for i, s := range sizes[:k] {
			if s == sinkQueryLen {
				binary.BigEndian.PutUint64(reply, uint64(n))
				binary.BigEndian.PutUint64(reply[8:], uint64(last.Sub(first)))
				_ = l.Send([][]byte{reply}, from[i])
				queried = true
				continue
			}
			if queried {
				n, first, queried = 0, now, false
			}
			n += int64(s - rawHdr)
			last = now
		}
	}
}

// rawUDPGSO2P sends total bytes to the server process's sink as rawUDPGSO does (sendRaw)
// and returns the goodput the sink saw in MB/s.
func rawUDPGSO2P(b *testing.B, sink netip.AddrPort, total, size int) float64 {
	src := rawSource(size, nil)
	tx, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &roceUDPOpts)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	sendRaw(b, tx, sink, total, src, nil)
	// Ask for the count until an answer comes (a query can be dropped with the data when
	// the sink's socket buffer is full).
	answers := make(chan []byte, 1)
	go func() {
		rb, sizes, from := recvBatch(1)
		for {
			k, err := tx.Recv(rb, sizes, from)
			if err != nil {
				close(answers)
				return
			}
			if k == 1 && sizes[0] == sinkReplyLen {
				answers <- rb[0][:sinkReplyLen]
				return
			}
		}
	}()
	query := [][]byte{make([]byte, sinkQueryLen)}
	for range 50 {
		if err := tx.Send(query, sink); err != nil {
			b.Fatal(err)
		}
		select {
		case r, ok := <-answers:
			if !ok {
				b.Fatal("raw UDP sink: no answer")
			}
			n, ns := binary.BigEndian.Uint64(r), binary.BigEndian.Uint64(r[8:])
			if ns == 0 {
				return 0
			}
			return float64(n) / (float64(ns) / 1e9) / 1e6
		case <-time.After(100 * time.Millisecond):
		}
	}
	b.Fatal("raw UDP sink: no answer to 50 queries")
	return 0
}

func BenchmarkRoCEv2Write2P(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(roceSizeName(size), func(b *testing.B) { benchRoCEv2Write2P(b, size) })
	}
}

func benchRoCEv2Write2P(b *testing.B, size int) {
	b.StopTimer()
	addrs := serverProcess(b)
	sink := netip.MustParseAddrPort(addrs["udp"])
	cl := roceClient2P(b, addrs, rnic.Config{}, 4096, rnic.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024})
	if int(cl.rb.Len) < size {
		b.Fatalf("server region %d bytes, want %d", cl.rb.Len, size)
	}
	src := filled(size)
	smr, _ := cl.pd.RegMR(src, rnic.AccessLocalWrite)
	wr := rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, size)},
		RemoteAddr: cl.rb.Addr, RKey: cl.rb.RKey}
	roceWriteRun(b, cl.qp, cl.cq, &wr, size, func() float64 { return rawUDPGSO2P(b, sink, 256<<20, size) }, nil)
}

// BenchmarkRoCEv2ReadLatency2P is BenchmarkReadLatency2P over RoCEv2: one 4 KiB RDMA READ
// at a time from a server in another process (its READ response is the only packet back:
// it acknowledges the request, no separate ACK), beside a 4 KiB UDP request/response to the
// same process. In "4KiB-drive" the client's Wait runs its endpoint's receive itself
// (Config.WaitDrivesReceive).
func BenchmarkRoCEv2ReadLatency2P(b *testing.B) {
	const size = 4 << 10
	b.Run(roceSizeName(size), func(b *testing.B) { benchRoCEv2ReadLatency2P(b, size, rnic.Config{}) })
	b.Run(roceSizeName(size)+"-drive", func(b *testing.B) {
		benchRoCEv2ReadLatency2P(b, size, rnic.Config{WaitDrivesReceive: driveHold})
	})
}

func benchRoCEv2ReadLatency2P(b *testing.B, size int, dcfg rnic.Config) {
	b.StopTimer()
	addrs := serverProcess(b)
	cl := roceClient2P(b, addrs, dcfg, 64, rnic.QPCap{})
	buf := make([]byte, size)
	mr, _ := cl.pd.RegMR(buf, rnic.AccessLocalWrite)
	read := readOnce(cl.qp, cl.cq, &rnic.SendWR{Opcode: rnic.OpRead, Flags: rnic.Signaled,
		SGL: []rnic.SGE{mr.SGE(0, size)}, RemoteAddr: cl.rb.Addr, RKey: cl.rb.RKey})
	uc, err := net.Dial("udp", addrs["udprpc"])
	if err != nil {
		b.Fatal(err)
	}
	defer uc.Close()
	var req [8]byte
	binary.BigEndian.PutUint32(req[:], uint32(size))
	resp := make([]byte, size+1)
	rpc := func() error {
		if _, err := uc.Write(req[:]); err != nil {
			return err
		}
		n, err := uc.Read(resp)
		if err == nil && n != size {
			err = fmt.Errorf("UDP response of %d bytes, want %d", n, size)
		}
		return err
	}
	b.SetBytes(int64(size))
	alternate(b, "udp", rpc, read)
}

// roceClient is the client end of the RoCEv2 two-process benchmarks (roceClient2P): a device opened
// with dcfg, a QP with cap on a CQ of cqe entries, connected through its own endpoint to
// the server process's listener; rb is the region the server offered.
type roceClient struct {
	pd *rnic.PD
	cq *rnic.CQ
	qp *rnic.QP
	rb rnic.RemoteBuffer
}

func roceClient2P(b *testing.B, addrs map[string]string, dcfg rnic.Config, cqe int, cap rnic.QPCap) roceClient {
	dev, pd, cq := clientDevice(b, dcfg, cqe)
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: cap})
	if err != nil {
		b.Fatal(err)
	}
	link, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &roceUDPOpts)
	if err != nil {
		b.Fatal(err)
	}
	ep := rocev2.NewEndpoint(dev, link, roceConfig())
	b.Cleanup(func() {
		_ = qp.Destroy()
		_ = ep.Close()
	})
	conn, err := rocev2.Dial(context.Background(), ep, qp, addrs["roce"], nil, rocev2.ConnParam{})
	if err != nil {
		b.Fatal(err)
	}
	rb, err := rnic.ParseRemoteBuffer(conn.PrivateData())
	if err != nil {
		b.Fatal(err)
	}
	return roceClient{pd: pd, cq: cq, qp: qp, rb: rb}
}
