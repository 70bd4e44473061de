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
	cd, _ := rnic.Open(rnic.Config{})
	sd, _ := rnic.Open(rnic.Config{})
	defer cd.Close()
	defer sd.Close()
	for _, d := range []*rnic.Device{cd, sd} {
		go func() {
			for range d.Events() {
			}
		}()
	}
	cpd, _ := cd.AllocPD()
	spd, _ := sd.AllocPD()
	ccq, _ := cd.CreateCQ(1024)
	scq, _ := sd.CreateCQ(1024)
	cfg := iwarp.DefaultConfig()
	cfg.MaxConns, cfg.MaxDeviceConns, cfg.Backlog = -1, -1, 1024
	ln, err := iwarp.Listen(sd, "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
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
		accErr := make(chan error, 1)
		var errs = make(chan error, n)
		b.StartTimer()
		t0 := time.Now()
		go func() {
			for i := 0; i < n; i++ {
				r, err := ln.Accept(ctx)
				if err != nil {
					accErr <- err
					return
				}
				go func() {
					qp, err := sd.CreateQP(spd, rnic.QPAttr{SendCQ: scq, RecvCQ: scq})
					if err == nil {
						var c *iwarp.Conn
						if c, err = r.Accept(qp, iwarp.ConnParam{}); err == nil {
							mu.Lock()
							qps = append(qps, qp)
							mu.Unlock()
							// Established at this end: the RTR arrived (gate open).
							_ = c
						}
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			accErr <- nil
		}()
		var wg sync.WaitGroup
		sem := make(chan struct{}, connectInFlight)
		for i := 0; i < n; i++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				qp, err := cd.CreateQP(cpd, rnic.QPAttr{SendCQ: ccq, RecvCQ: ccq})
				if err == nil {
					_, err = iwarp.Dial(ctx, qp, ln.Addr().String(), cfg, iwarp.ConnParam{})
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				qps = append(qps, qp)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if err := <-accErr; err != nil {
			b.Fatal(err)
		}
		for {
			mu.Lock()
			k := len(qps)
			mu.Unlock()
			if k == 2*n {
				break
			}
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			time.Sleep(10 * time.Microsecond)
		}
		el += time.Since(t0)
		b.StopTimer()
		for _, qp := range qps {
			_ = qp.Destroy()
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "conns/s")
}
