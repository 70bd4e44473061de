package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The memory an idle connected QP costs. TestManyQPs connects SOFTRNIC_MANYQP QPs (both
// ends of SOFTRNIC_MANYQP/2 connections, in this process; 400 by default, 10000 for the
// figure in README) with default capacities, lets them go idle, and reports the heap
// (runtime.MemStats HeapInuse after a GC), the goroutine stacks and the resident set
// per QP. It fails if the heap per QP exceeds maxHeapPerQP or, at 10,000 QPs and more,
// the resident set exceeds 512 MiB.
const maxHeapPerQP = 16 << 10

func manyQPCount(t *testing.T) int {
	n := 400
	if s := os.Getenv("SOFTRNIC_MANYQP"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 2 {
			t.Fatalf("SOFTRNIC_MANYQP=%q: want a QP count ≥ 2", s)
		}
		n = v
	}
	return n &^ 1
}

// memSample is the process's memory at one point.
type memSample struct {
	heap, stack, rss uint64
	goroutines       int
}

func sampleMem() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapInuse, stack: ms.StackInuse, rss: rssBytes(), goroutines: runtime.NumGoroutine()}
}

// rssBytes is the resident set of the process (/proc/self/statm).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res uint64
	_, _ = fmt.Sscan(string(b), &size, &res)
	return res * uint64(os.Getpagesize())
}

// report logs and checks the cost of n QPs between two samples; it returns the heap per QP.
func reportMem(t *testing.T, what string, n int, m0, m1 memSample) float64 {
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	heap := per(m0.heap, m1.heap)
	t.Logf("%s: %d connected idle QPs: heap %.1f KiB/QP, goroutine stacks %.1f KiB/QP, RSS %.1f KiB/QP "+
		"(process RSS %.0f MiB), goroutines %.1f/QP",
		what, n, heap/1024, per(m0.stack, m1.stack)/1024, per(m0.rss, m1.rss)/1024, float64(m1.rss)/(1<<20),
		float64(m1.goroutines-m0.goroutines)/float64(n))
	// Machine-readable line for bench/report.
	fmt.Printf("MANYQP %s qps=%d heap_per_qp=%.0f stack_per_qp=%.0f rss_per_qp=%.0f rss_total=%d goroutines_per_qp=%.2f\n",
		what, n, heap, per(m0.stack, m1.stack), per(m0.rss, m1.rss), m1.rss, float64(m1.goroutines-m0.goroutines)/float64(n))
	if heap > maxHeapPerQP {
		t.Errorf("%s: heap per idle QP %.1f KiB > %d KiB", what, heap/1024, maxHeapPerQP>>10)
	}
	if n >= 10000 && m1.rss > 512<<20 {
		t.Errorf("%s: %d QPs: RSS %d MiB > 512 MiB", what, n, m1.rss>>20)
	}
	return heap
}

// heapProfile writes a heap profile of the idle QPs to $SOFTRNIC_MANYQP_PROFILE.what.
func heapProfile(t *testing.T, what string) {
	p := os.Getenv("SOFTRNIC_MANYQP_PROFILE")
	if p == "" {
		return
	}
	f, err := os.Create(p + "." + what)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func TestManyQPsIWARP(t *testing.T) {
	n := manyQPCount(t)
	pairs := n / 2
	p := newDevPair(t)
	ln, cfg := p.iwarpListen(t)
	m0 := sampleMem()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	accErr := make(chan error, 1)
	sqps := make([]*rnic.QP, 0, pairs)
	go func() {
		for i := 0; i < pairs; i++ {
			r, err := ln.Accept(ctx)
			if err != nil {
				accErr <- err
				return
			}
			qp, err := p.serverQP()
			if err == nil {
				_, err = r.Accept(qp, iwarp.ConnParam{})
			}
			if err != nil {
				accErr <- err
				return
			}
			sqps = append(sqps, qp)
		}
		accErr <- nil
	}()
	cqps := make([]*rnic.QP, pairs)
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	sem := make(chan struct{}, 32)
	for i := range cqps {
		qp, err := p.clientQP()
		if err != nil {
			t.Fatal(err)
		}
		cqps[i] = qp
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := iwarp.Dial(ctx, qp, ln.Addr().String(), cfg, iwarp.ConnParam{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-accErr; err != nil {
		t.Fatal(err)
	}
	// Idle: the RTR exchange is over on every connection.
	for _, qp := range append(cqps, sqps...) {
		if qp.State() != rnic.QPRTS {
			t.Fatalf("QP %d in %v", qp.Num(), qp.State())
		}
	}
	time.Sleep(200 * time.Millisecond) // let the connections' goroutines settle into their idle waits
	m1 := sampleMem()
	heapProfile(t, "iwarp")
	reportMem(t, "iwarp", n, m0, m1)
	for _, qp := range append(cqps, sqps...) {
		_ = qp.Destroy()
	}
}

func TestManyQPsRoCEv2(t *testing.T) {
	n := manyQPCount(t)
	pairs := n / 2
	p := newDevPair(t)
	open := func(d *rnic.Device) *rocev2.Endpoint {
		l, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), &roceUDPOpts)
		if err != nil {
			t.Fatal(err)
		}
		return rocev2.NewEndpoint(d, l, nil)
	}
	cep, sep := open(p.cd), open(p.sd)
	defer cep.Close()
	defer sep.Close()
	m0 := sampleMem()
	qps := make([]*rnic.QP, 0, n)
	for i := 0; i < pairs; i++ {
		cq, err := p.clientQP()
		if err != nil {
			t.Fatal(err)
		}
		sq, err := p.serverQP()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cep.Connect(cq, rocev2.ConnAttr{Remote: sep.LocalAddr(), RemoteQPN: sq.Num(), SendPSN: 1, RecvPSN: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := sep.Connect(sq, rocev2.ConnAttr{Remote: cep.LocalAddr(), RemoteQPN: cq.Num(), SendPSN: 2, RecvPSN: 1}); err != nil {
			t.Fatal(err)
		}
		qps = append(qps, cq, sq)
	}
	time.Sleep(200 * time.Millisecond)
	m1 := sampleMem()
	heapProfile(t, "rocev2")
	reportMem(t, "rocev2", n, m0, m1)
	for _, qp := range qps {
		_ = qp.Destroy()
	}
}
