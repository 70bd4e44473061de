package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

var sizes = []int{64, 1 << 10, 16 << 10, 64 << 10, 1 << 20}

// mulpdu is the FPDU size used by the benchmarks (0: derived from the TCP MSS).
var mulpdu = 0

// end is one side of an iWARP connection.
type end struct {
	dev *rnic.Device
	pd  *rnic.PD
	scq *rnic.CQ
	rcq *rnic.CQ
	qp  *rnic.QP
}

func newEnd(b *testing.B, cfg rnic.Config) *end {
	d, _ := rnic.Open(cfg)
	e := &end{dev: d}
	e.pd, _ = d.AllocPD()
	e.scq, _ = d.CreateCQ(4096)
	e.rcq, _ = d.CreateCQ(4096)
	var err error
	e.qp, err = d.CreateQP(e.pd, rnic.QPAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: rnic.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { // drain async events
		for range d.Events() {
		}
	}()
	return e
}

// connect returns a connected client/server pair over loopback TCP.
func connect(b *testing.B, crc bool) (cli, srv *end) { return connectCfg(b, crc, rnic.Config{}) }

// driveHold is Config.WaitDrivesReceive where a benchmark lets its CQ waiters drive the
// receive.
const driveHold = 10 * time.Millisecond

// connectCfg is connect with devices opened with dcfg.
func connectCfg(b *testing.B, crc bool, dcfg rnic.Config) (cli, srv *end) {
	cli, srv = newEnd(b, dcfg), newEnd(b, dcfg)
	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = crc
	cfg.MULPDU = mulpdu
	ln, err := iwarp.Listen(srv.dev, "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			_, err = r.Accept(srv.qp, iwarp.ConnParam{IRD: 16, ORD: 16})
		}
		done <- err
	}()
	if _, err := iwarp.Dial(ctx, cli.qp, ln.Addr().String(), cfg, iwarp.ConnParam{IRD: 16, ORD: 16}); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cli.dev.Close()
		srv.dev.Close()
	})
	return cli, srv
}

// tcpPair returns a connected loopback TCP pair.
func tcpPair(b *testing.B) (a, c net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		ch <- s
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c = <-ch
	b.Cleanup(func() { a.Close(); c.Close() })
	return a, c
}

// rawStream is the raw TCP baseline for Write, Read and Send bandwidth: n writes of
// size bytes over loopback TCP, timed until the reader has consumed them all.
type rawStream struct {
	w    net.Conn
	buf  []byte
	req  chan int
	done chan struct{}
}

func newRawStream(b *testing.B, size int) *rawStream {
	w, r := tcpPair(b)
	s := &rawStream{w: w, buf: filled(size), req: make(chan int), done: make(chan struct{})}
	go func() {
		rbuf := make([]byte, size)
		for n := range s.req {
			for i := 0; i < n; i++ {
				if _, err := io.ReadFull(r, rbuf); err != nil {
					break
				}
			}
			s.done <- struct{}{}
		}
	}()
	b.Cleanup(func() { close(s.req) })
	return s
}

func (s *rawStream) run(b *testing.B, n int) time.Duration {
	t0 := time.Now()
	s.req <- n
	for i := 0; i < n; i++ {
		if _, err := s.w.Write(s.buf); err != nil {
			b.Fatal(err)
		}
	}
	<-s.done
	return time.Since(t0)
}

// bulkWrite is the write size of the bulk baseline.
const bulkWrite = 1 << 20

// bulkBaseline is the second raw TCP baseline of the bandwidth benchmarks at sizes from
// 16 KiB to below bulkWrite: the same bytes written bulkWrite at a time. On loopback (MTU
// 65,536, so an MSS of 65,483 with timestamps) a Write of 64 KiB leaves as a full segment
// and a 53-byte one, and TCP's own rate depends on its write size far more than
// softrnic's FPDUs do (BenchmarkRawTCPSizes): the first baseline, one Write per
// operation, is what a program sending size-byte messages over TCP gets; this one is what
// TCP makes of the same bytes in large writes. Reported as tcp-bulk-MB/s and x-tcp-bulk
// (softrnic ÷ it).
type bulkBaseline struct {
	s     *rawStream
	size  int
	d     time.Duration
	bytes int64
}

// newBulkBaseline returns the bulk baseline for operations of size bytes, nil outside
// its range (its methods then do nothing).
func newBulkBaseline(b *testing.B, size int) *bulkBaseline {
	if size < 16<<10 || size >= bulkWrite {
		return nil
	}
	return &bulkBaseline{s: newRawStream(b, bulkWrite), size: size}
}

// run writes the bytes of n operations (rounded up to whole bulk writes).
func (k *bulkBaseline) run(b *testing.B, n int) {
	if k == nil {
		return
	}
	w := (n*k.size + bulkWrite - 1) / bulkWrite
	k.d += k.s.run(b, w)
	k.bytes += int64(w) * bulkWrite
}

// report adds the bulk baseline's rate and softrnic's ratio to it, softrnic having taken
// d for b.N operations.
func (k *bulkBaseline) report(b *testing.B, d time.Duration) {
	if k == nil || k.d <= 0 || d <= 0 {
		return
	}
	bulk := float64(k.bytes) / k.d.Seconds() / 1e6
	b.ReportMetric(bulk, "tcp-bulk-MB/s")
	b.ReportMetric(float64(k.size)*float64(b.N)/d.Seconds()/1e6/bulk, "x-tcp-bulk")
}

// onlyEnv, "soft" or "raw", makes the benchmarks that alternate rounds of softrnic and of
// its baseline (rounds) run one side's rounds only, to profile or count one side apart:
// `SOFTRNIC_BENCH_ONLY=soft perf stat ./bench.test -test.bench ...`. Their ratios are then
// not reported. The latency and one-sided WRITE/READ/SEND benchmarks and
// BenchmarkLatencyFloor read it.
const onlyEnv = "SOFTRNIC_BENCH_ONLY"

// sides reports whether an alternating benchmark runs its baseline's rounds (raw) and its
// softrnic ones (soft): both unless onlyEnv names one.
func sides() (raw, soft bool) {
	only := os.Getenv(onlyEnv)
	return only != "soft", only != "raw"
}

// alternateRounds splits n operations into rounds and runs each round's k on both sides, the
// baseline's first (raw, which times itself with the benchmark timer stopped), then
// softrnic's (soft, timed here with the timer running); onlyEnv leaves a side out. It
// returns each side's total time.
func alternateRounds(b *testing.B, n int, raw func(k int) time.Duration, soft func(k int)) (rawT, softT time.Duration) {
	runRaw, runSoft := sides()
	for _, k := range rounds(n) {
		if runRaw {
			rawT += raw(k)
		}
		if !runSoft {
			continue
		}
		b.StartTimer()
		t0 := time.Now()
		soft(k)
		softT += time.Since(t0)
		b.StopTimer()
	}
	return rawT, softT
}

// rounds splits b.N into alternating chunks of baseline and softrnic work so that the
// (noisy, shared) machine's load affects both equally.
func rounds(n int) []int {
	k := min(n, 8)
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
	}
	out[k-1] += n % k
	return out
}

// rawPingPong measures n round trips of size bytes: the latency baseline.
func rawPingPong(b *testing.B, n, size int) time.Duration {
	a, c := tcpPair(b)
	go func() {
		buf := make([]byte, size)
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, size)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := a.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(a, buf); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// report adds the same-run raw TCP baseline and the ratio (>1: faster than raw TCP); with
// one side only (onlyEnv), the baseline when it ran and no ratio.
func report(b *testing.B, raw, rdma time.Duration, size int, latency bool) {
	if raw <= 0 {
		return
	}
	if latency {
		b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "tcp-ns/op")
	} else {
		b.ReportMetric(float64(size)*float64(b.N)/raw.Seconds()/1e6, "tcp-MB/s")
	}
	if rdma > 0 {
		b.ReportMetric(raw.Seconds()/rdma.Seconds(), "x-tcp")
	}
}

const window = 256 // outstanding work requests
const signalEvery = 32

// poller drains a CQ into a fixed slice.
type poller struct {
	cq *rnic.CQ
	wc [64]rnic.Completion
}

func (p *poller) poll(b *testing.B) int {
	n, err := p.cq.Wait(context.Background(), p.wc[:])
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range p.wc[:n] {
		if c.Status != rnic.StatusSuccess {
			b.Fatalf("completion %+v", c)
		}
	}
	return n
}

func crcName(crc bool) string {
	if crc {
		return "crc"
	}
	return "nocrc"
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchOneSided runs RDMA WRITE or READ of size bytes per op.
func benchOneSided(b *testing.B, op rnic.Opcode, crc bool, size int) {
	b.StopTimer()
	cli, srv := connect(b, crc)
	lbuf := filled(size)
	rbuf := filled(size)
	lmr, _ := cli.pd.RegMR(lbuf, rnic.AccessLocalWrite)
	rmr, _ := srv.pd.RegMR(rbuf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	sgl := []rnic.SGE{lmr.SGE(0, size)}
	wr := &rnic.SendWR{Opcode: op, SGL: sgl, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}
	fence := &rnic.SendWR{Opcode: rnic.OpRead, Flags: rnic.Signaled, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()}
	p := &poller{cq: cli.scq}
	rs := newRawStream(b, size)
	bulk := newBulkBaseline(b, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	raw, d := alternateRounds(b, b.N, func(n int) time.Duration {
		t := rs.run(b, n)
		bulk.run(b, n)
		return t
	}, func(n int) {
		// Signal every signalEvery-th WR; keep at most window in flight.
		inflight := 0 // signaled WRs outstanding
		for i := 0; i < n; i++ {
			wr.Flags = 0
			if i%signalEvery == signalEvery-1 || i == n-1 {
				wr.Flags = rnic.Signaled
			}
			for inflight*signalEvery >= window {
				inflight -= p.poll(b)
			}
			if err := cli.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			if wr.Flags != 0 {
				inflight++
			}
		}
		if op == rnic.OpWrite { // a zero-length Read returns once every Write was placed
			if err := cli.qp.PostSend(fence); err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		for inflight > 0 {
			inflight -= p.poll(b)
		}
	})
	report(b, raw, d, size, false)
	bulk.report(b, d)
}

func BenchmarkWrite(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, n := range sizes {
			b.Run(crcName(crc)+"/"+sizeName(n), func(b *testing.B) { benchOneSided(b, rnic.OpWrite, crc, n) })
		}
	}
}

func BenchmarkRead(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, n := range sizes {
			b.Run(crcName(crc)+"/"+sizeName(n), func(b *testing.B) { benchOneSided(b, rnic.OpRead, crc, n) })
		}
	}
}

// BenchmarkSend measures SEND bandwidth. Receives are reposted by a server goroutine;
// the client sends only against receives known to be posted (in-process credits), since
// iWARP has no receiver-not-ready flow control.
func BenchmarkSend(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, n := range sizes {
			b.Run(crcName(crc)+"/"+sizeName(n), func(b *testing.B) { benchSend(b, crc, n) })
		}
	}
}

func benchSend(b *testing.B, crc bool, size int) {
	b.StopTimer()
	cli, srv := connect(b, crc)
	depth := min(512, max(16, (64<<20)/size)) // receives posted (≤ 64 MiB of buffers)
	sbuf := filled(size)
	rbuf := make([]byte, size*depth)
	smr, _ := cli.pd.RegMR(sbuf, 0)
	rmr, _ := srv.pd.RegMR(rbuf, rnic.AccessLocalWrite)
	recvs := make([]rnic.RecvWR, depth)
	for i := range recvs {
		recvs[i] = rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(i*size, size)}}
		if err := srv.qp.PostRecv(&recvs[i]); err != nil {
			b.Fatal(err)
		}
	}
	var posted atomic.Int64
	posted.Store(int64(depth))
	stop := make(chan struct{})
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		var wc [64]rnic.Completion
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-stop; cancel() }()
		for {
			n, err := srv.rcq.Wait(ctx, wc[:])
			if err != nil {
				return
			}
			for _, c := range wc[:n] {
				if c.Status != rnic.StatusSuccess {
					return
				}
				_ = srv.qp.PostRecv(&recvs[c.WRID])
			}
			posted.Add(int64(n))
		}
	}()
	wr := &rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{smr.SGE(0, size)}}
	p := &poller{cq: cli.scq}
	rs := newRawStream(b, size)
	bulk := newBulkBaseline(b, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	sent := 0
	raw, d := alternateRounds(b, b.N, func(n int) time.Duration {
		t := rs.run(b, n)
		bulk.run(b, n)
		return t
	}, func(n int) {
		inflight := 0
		for i := 0; i < n; i++ {
			for int64(sent) >= posted.Load() {
				time.Sleep(5 * time.Microsecond)
			}
			wr.Flags = 0
			if i%signalEvery == signalEvery-1 || i == n-1 {
				wr.Flags = rnic.Signaled
			}
			for inflight*signalEvery >= window {
				inflight -= p.poll(b)
			}
			if err := cli.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			sent++
			if wr.Flags != 0 {
				inflight++
			}
		}
		for inflight > 0 {
			inflight -= p.poll(b)
		}
		for posted.Load() < int64(sent+depth) { // every message received
			time.Sleep(5 * time.Microsecond)
		}
	})
	close(stop)
	<-srvDone
	report(b, raw, d, size, false)
	bulk.report(b, d)
}

// BenchmarkRawTCPSizes measures the raw TCP baseline alone (rawStream, 256 MiB a run) for
// several write sizes, each iteration running every size once in an order rotated per
// iteration, and reports each one's median MB/s. No softrnic: it shows what the write size
// alone does to loopback TCP (bulkBaseline).
func BenchmarkRawTCPSizes(b *testing.B) {
	sizes := []int{16 << 10, 32 << 10, 65483, 64 << 10, 128 << 10, 1 << 20}
	streams := make([]*rawStream, len(sizes))
	for j, s := range sizes {
		streams[j] = newRawStream(b, s)
	}
	res := make([][]float64, len(sizes))
	for i := 0; i < b.N; i++ {
		for k := range sizes {
			j := (k + i) % len(sizes)
			n := (256 << 20) / sizes[j]
			d := streams[j].run(b, n)
			res[j] = append(res[j], float64(n*sizes[j])/d.Seconds()/1e6)
		}
	}
	for j, s := range sizes {
		slices.Sort(res[j])
		b.ReportMetric(res[j][len(res[j])/2], strconv.Itoa(s)+"B-MB/s")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLatency measures a 64-byte SEND ping-pong round trip beside a TCP ping-pong.
//
// The "drive" case (CRC off) runs with Config.WaitDrivesReceive: each side's Wait reads
// its socket itself.
func BenchmarkLatency(b *testing.B) {
	for _, crc := range []bool{false, true} {
		b.Run(crcName(crc)+"/64B", func(b *testing.B) { benchLatency(b, crc, 64, rnic.Config{}) })
	}
	b.Run("drive/64B", func(b *testing.B) {
		benchLatency(b, false, 64, rnic.Config{WaitDrivesReceive: driveHold})
	})
}

func benchLatency(b *testing.B, crc bool, size int, dcfg rnic.Config) {
	b.StopTimer()
	cli, srv := connectCfg(b, crc, dcfg)
	raw, d := sendPingPong(b, size, pingEnd{cli.pd, cli.qp, cli.rcq}, pingEnd{srv.pd, srv.qp, srv.rcq},
		func(k int) time.Duration { return rawPingPong(b, k, size) })
	report(b, raw, d, size, true)
}

// pingEnd is one end of sendPingPong: its PD, QP and the CQ its receives complete on.
type pingEnd struct {
	pd *rnic.PD
	qp *rnic.QP
	cq *rnic.CQ
}

// sendPingPong runs b.N round trips of a size-byte SEND from cli, which srv's goroutine
// answers with a SEND from its CQ waiter as soon as its receive completes (reposting
// the receive), in rounds alternating with rounds of raw(k) round trips of the
// baseline, so that a change in the machine's load during the run falls on both sides of
// the ratio. It returns the baseline's time and softrnic's. The client's SENDs are
// unsignaled: its Waits see only the answers.
func sendPingPong(b *testing.B, size int, cli, srv pingEnd, raw func(k int) time.Duration) (rawT, d time.Duration) {
	cbuf, sbuf := filled(2*size), filled(2*size)
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
	b.SetBytes(int64(size))
	b.ReportAllocs()
	return alternateRounds(b, n, raw, func(k int) {
		for i := 0; i < k; i++ {
			_ = cli.qp.PostRecv(crecv)
			if err := cli.qp.PostSend(csend); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.cq.Wait(context.Background(), wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
				b.Fatal(err, wc[0])
			}
		}
	})
}
