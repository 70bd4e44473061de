package iwarp

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// TestSoak runs connect / transfer / disconnect cycles between two devices over one
// listener and checks that goroutines and the live heap stay flat (issue 10 "Soak": no
// per-connection state outlives its connection). It runs 300 cycles by default and
// SOFTRNIC_SOAK cycles when that is set (SOFTRNIC_SOAK=10000 for the full soak).
func TestSoak(t *testing.T) {
	cycles := 300
	if s := os.Getenv("SOFTRNIC_SOAK"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("SOFTRNIC_SOAK=%q: want a cycle count", s)
		}
		cycles = n
	}
	if testing.Short() {
		cycles = 50
	}
	cd, _ := rnic.Open(rnic.Config{})
	defer cd.Close()
	sd, _ := rnic.Open(rnic.Config{})
	defer sd.Close()
	go func() {
		for range cd.Events() {
		}
	}()
	go func() {
		for range sd.Events() {
		}
	}()
	cpd, _ := cd.AllocPD()
	spd, _ := sd.AllocPD()
	ccq, _ := cd.CreateCQ(64)
	scq, _ := sd.CreateCQ(64)
	const n = 64 << 10
	cmr, _ := cpd.RegMR(make([]byte, 2*n), allAccess)
	smr, _ := spd.RegMR(make([]byte, 2*n), allAccess)
	ln, err := Listen(sd, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var wc [4]rnic.Completion
	waitOne := func(cq *rnic.CQ, what string) rnic.Completion {
		k, err := cq.Wait(ctx, wc[:1])
		if err != nil || k != 1 {
			t.Fatalf("%s: %v", what, err)
		}
		if wc[0].Status != rnic.StatusSuccess {
			t.Fatalf("%s: %+v", what, wc[0])
		}
		return wc[0]
	}
	cycle := func(i int) {
		sqp, err := sd.CreateQP(spd, rnic.QPAttr{SendCQ: scq, RecvCQ: scq})
		if err != nil {
			t.Fatal(err)
		}
		cqp, err := cd.CreateQP(cpd, rnic.QPAttr{SendCQ: ccq, RecvCQ: ccq})
		if err != nil {
			t.Fatal(err)
		}
		_ = sqp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{smr.SGE(n, 64)}})
		acc := make(chan *Conn, 1)
		go func() {
			r, err := ln.Accept(ctx)
			if err != nil {
				acc <- nil
				return
			}
			c, _ := r.Accept(sqp, ConnParam{PrivateData: smr.RemoteBuffer(0, n).Append(nil)})
			acc <- c
		}()
		cc, err := Dial(ctx, cqp, ln.Addr().String(), nil, ConnParam{})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		sc := <-acc
		if sc == nil {
			t.Fatalf("cycle %d: accept failed", i)
		}
		rb, _ := rnic.ParseRemoteBuffer(cc.PeerPrivateData())
		_ = cqp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, n)}, RemoteAddr: rb.Addr, RKey: rb.RKey})
		_ = cqp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(n, n)}, RemoteAddr: rb.Addr, RKey: rb.RKey})
		_ = cqp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 64)}})
		waitOne(ccq, "read")
		waitOne(ccq, "send")
		waitOne(scq, "receive")
		cqp.Disconnect()
		<-cc.Done()
		<-sc.Done()
		_ = cqp.Destroy()
		_ = sqp.Destroy()
	}
	sample := func() (goroutines int, heap uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapInuse
	}
	rss := func() float64 { // resident set, MiB (reported, not asserted: the GC returns memory lazily)
		b, _ := os.ReadFile("/proc/self/statm")
		var size, res uint64
		_, _ = fmt.Sscan(string(b), &size, &res)
		return float64(res*uint64(os.Getpagesize())) / (1 << 20)
	}
	warm := min(50, cycles/5)
	for i := 0; i < warm; i++ {
		cycle(i)
	}
	g0, h0 := sample()
	r0 := rss()
	start := time.Now()
	for i := warm; i < cycles; i++ {
		cycle(i)
	}
	took := time.Since(start)
	// Timers of closed connections (linger, disconnect) may still be winding down.
	var g1 int
	var h1 uint64
	for deadline := time.Now().Add(5 * time.Second); ; {
		g1, h1 = sample()
		if g1 <= g0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d cycles (after %d warm-up) in %v: goroutines %d -> %d, heap in use %.1f -> %.1f MiB, RSS %.1f -> %.1f MiB, listener %+v",
		cycles-warm, warm, took, g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20), r0, rss(), ln.Stats())
	if g1 > g0 {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines grew %d -> %d\n%s", g0, g1, buf[:runtime.Stack(buf, true)])
	}
	if h1 > h0+h0/2+4<<20 {
		t.Fatalf("heap grew %d -> %d bytes", h0, h1)
	}
	if s := ln.Stats(); s.Active != 0 || devConns.count(sd) != 0 {
		t.Fatalf("connection slots held after the soak: %+v, device %d", s, devConns.count(sd))
	}
}
