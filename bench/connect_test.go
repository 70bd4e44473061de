package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// BenchmarkConnect measures iWARP connection set-up in one process: each operation is
// one connection from Dial to established at both ends (TCP connect, MPA Request and
// Reply, the RTR exchange of the default peer-to-peer configuration, both QPs in RTS),
// with connectInFlight dials at a time. QP creation is included; the teardown of the
// connections happens after each round, outside the timed part. conns/s is the rate.
func BenchmarkConnect(b *testing.B) {
	const connectInFlight = 16
	p := newDevPair(b)
	ln, cfg := p.iwarpListen(b)
	ctx := context.Background()
	const round = 512 // connections per round (file descriptors: 2 per connection)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	var el time.Duration
	for done := 0; done < b.N; {
		n := min(round, b.N-done)
		qps := make([]*rnic.QP, 0, 2*n)
		var mu sync.Mutex
		keep := func(qp *rnic.QP) {
			mu.Lock()
			qps = append(qps, qp)
			mu.Unlock()
		}
		errs := make(chan error, 2*n+1)
		// every connection ends twice: accepted at the server (RTS) and dialed at the client
		var ends sync.WaitGroup
		ends.Add(2 * n)
		b.StartTimer()
		t0 := time.Now()
		go func() {
			for i := 0; i < n; i++ {
				r, err := ln.Accept(ctx)
				if err != nil {
					errs <- err
					ends.Add(-(n - i))
					return
				}
				go func() {
					defer ends.Done()
					qp, err := p.serverQP()
					if err == nil {
						_, err = r.Accept(qp, iwarp.ConnParam{})
					}
					if err != nil {
						errs <- err
						return
					}
					keep(qp)
				}()
			}
		}()
		sem := make(chan struct{}, connectInFlight)
		for i := 0; i < n; i++ {
			sem <- struct{}{}
			go func() {
				defer ends.Done()
				defer func() { <-sem }()
				qp, err := p.clientQP()
				if err == nil {
					_, err = iwarp.Dial(ctx, qp, ln.Addr().String(), cfg, iwarp.ConnParam{})
				}
				if err != nil {
					errs <- err
					return
				}
				keep(qp)
			}()
		}
		ends.Wait()
		el += time.Since(t0)
		b.StopTimer()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		for _, qp := range qps {
			_ = qp.Destroy()
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "conns/s")
}
