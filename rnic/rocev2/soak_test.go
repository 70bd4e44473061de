package rocev2

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// TestSoakConnectCycles (issue 10, soak): connect through the CM, transfer (a SEND
// and a WRITE), disconnect and destroy both QPs, many times over; goroutines and
// heap come back to where they started. 300 cycles by default; SOFTRNIC_SOAK=1
// runs 10,000.
func TestSoakConnectCycles(t *testing.T) {
	cycles := 300
	if os.Getenv("SOFTRNIC_SOAK") != "" {
		cycles = 10000
	}
	n := NewMemNet()
	o := &pairOpts{noConnect: true}
	cli := newSide(t, n, cliAddr, Faults{}, o)
	srv := newSide(t, n, srvAddr, Faults{}, o)
	t.Cleanup(func() {
		for _, s := range []*side{cli, srv} {
			_ = s.qp.Destroy()
			_ = s.ep.Close()
			_ = s.dev.Close()
		}
	})
	// The application reads its devices' async events: rnic queues them without
	// bound until read, and each holds its QP.
	for _, s := range []*side{cli, srv} {
		go func() {
			for range s.dev.Events() {
			}
		}()
	}
	l, err := Listen(srv.ep, ":7174", testCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	smr, _ := cli.reg(t, 4096, allAccess)
	rmr, _ := srv.reg(t, 8192, allAccess)
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	cycle := func(i int) {
		cqp := cli.newQP(t)
		sqp := srv.newQP(t)
		acc := make(chan error, 1)
		go func() {
			r, err := l.Accept(ctx)
			if err == nil {
				_, err = r.Accept(sqp, ConnParam{})
			}
			acc <- err
		}()
		if err := sqp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := Dial(ctx, cli.ep, cqp, "10.0.0.2:7174", testCM, ConnParam{}); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := <-acc; err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		post(t, cqp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, SGL: []rnic.SGE{smr.SGE(0, 4096)},
			RemoteAddr: rmr.Addr() + 4096, RKey: rmr.RKey()})
		post(t, cqp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 4096)}})
		if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 {
			t.Fatalf("cycle %d: %+v", i, c)
		}
		if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
			t.Fatalf("cycle %d: %+v", i, c)
		}
		cqp.Disconnect()
		<-sqp.Done()
		<-cqp.Done()
		_ = cqp.Destroy()
		_ = sqp.Destroy()
	}
	measure := func() (int, uint64) {
		cmIdle(t, cli, srv)
		var g int
		deadline := time.Now().Add(5 * time.Second)
		for {
			runtime.GC()
			runtime.GC() // sync.Pool keeps a victim generation for one cycle
			g = runtime.NumGoroutine()
			if g <= startG || startG == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return g, ms.HeapAlloc
	}
	for i := range 20 { // warm up pools and maps
		cycle(i)
	}
	startG = 0
	g0, h0 := measure()
	startG = g0
	began := time.Now()
	for i := range cycles {
		cycle(i)
	}
	took := time.Since(began)
	g1, h1 := measure()
	t.Logf("%d cycles in %v: goroutines %d → %d, heap %.1f → %.1f MiB; QPs left %d/%d", cycles, took.Round(time.Millisecond),
		g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20), len(cli.dev.QPs()), len(srv.dev.QPs()))
	if g1 > g0 {
		t.Fatalf("goroutines grew from %d to %d", g0, g1)
	}
	if h1 > h0+8<<20 {
		t.Fatalf("heap grew from %d to %d bytes", h0, h1)
	}
	if len(cli.dev.QPs()) != 1 || len(srv.dev.QPs()) != 1 {
		t.Fatal("QPs left behind")
	}
}

var startG int
