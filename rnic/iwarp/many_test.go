package iwarp

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

func TestThousandQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	noLeak(t)
	const n = 1000
	cd, _ := rnic.Open(rnic.Config{})
	sd, _ := rnic.Open(rnic.Config{})
	defer cd.Close()
	defer sd.Close()
	cpd, _ := cd.AllocPD()
	spd, _ := sd.AllocPD()
	ccq, _ := cd.CreateCQ(4 * n)
	scq, _ := sd.CreateCQ(4 * n)
	srq, err := sd.CreateSRQ(spd, rnic.SRQAttr{MaxWR: n, MaxSGE: 1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, 8*n)
	rmr, _ := spd.RegMR(rbuf, rnic.AccessLocalWrite)
	for i := 0; i < n; i++ {
		if err := srq.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(8*i, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := Listen(sd, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	accErr := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			r, err := ln.Accept(ctx)
			if err != nil {
				accErr <- err
				return
			}
			qp, err := sd.CreateQP(spd, rnic.QPAttr{SendCQ: scq, RecvCQ: scq, SRQ: srq, Cap: rnic.QPCap{MaxSendWR: 4}})
			if err == nil {
				_, err = r.Accept(qp, ConnParam{})
			}
			if err != nil {
				accErr <- err
				return
			}
		}
		accErr <- nil
	}()
	sbuf := make([]byte, 8)
	smr, _ := cpd.RegMR(sbuf, 0)
	qps := make([]*rnic.QP, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		qp, err := cd.CreateQP(cpd, rnic.QPAttr{SendCQ: ccq, RecvCQ: ccq, Cap: rnic.QPCap{MaxSendWR: 4, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qps[i] = qp
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := Dial(ctx, qp, ln.Addr().String(), nil, ConnParam{}); err != nil {
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
	// All 1000 connected at once: each sends one message into the shared SRQ.
	for i, qp := range qps {
		if err := qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]rnic.Completion, 64)
	for got := 0; got < n; {
		k, err := scq.Wait(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:k] {
			if c.Status != rnic.StatusSuccess || !c.SRQ {
				t.Fatalf("recv %+v", c)
			}
		}
		got += k
	}
	for got := 0; got < n; {
		k, err := ccq.Wait(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	limit := false
	for !limit {
		select {
		case e := <-sd.Events():
			limit = e.Type == rnic.EventSRQLimitReached && e.SRQ == srq
		case <-ctx.Done():
			t.Fatal("no SRQ limit event")
		}
	}
	for _, qp := range qps {
		_ = qp.Destroy()
	}
}
