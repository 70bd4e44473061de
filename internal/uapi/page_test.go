package uapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// qpTable is a handler with many synthetic QPs, paging them as the daemon does.
type qpTable struct {
	qpns []uint32 // increasing
}

func synthQP(n uint32) QPStatus {
	return QPStatus{QPN: n, Transport: "rocev2", State: "RTS", Peer: fmt.Sprintf("10.%d.%d.%d:4791", n>>16&255, n>>8&255, n&255),
		Counters: Counters{TxBytes: uint64(n) * 3, RxBytes: uint64(n) << 20, NAKs: uint64(n % 7)}}
}

func (h *qpTable) Get(q Query) ([]Pair, error) {
	sel, next, more := q.Select(h.qpns)
	if q.One && len(sel) == 0 {
		return nil, Errorf(ENOENT, "qp=%d: no such QP", q.QP)
	}
	s := Status{Device: "big0", QPCount: uint64(len(h.qpns)), QPNext: next, QPNextSet: more,
		Counters: Counters{TxBytes: uint64(len(h.qpns))}}
	for _, n := range sel {
		s.QPs = append(s.QPs, synthQP(n))
	}
	return s.Pairs(), nil
}

func (h *qpTable) Set([]Pair) error { return nil }

// TestStatusPaging100k: a device with 100,000 QPs is read whole through the control
// socket (one get answer holds at most MaxPageQPs QPs; GetStatus asks page after page on
// one connection), and any one QP can be asked for by number.
func TestStatusPaging100k(t *testing.T) {
	const n = 100000
	h := &qpTable{}
	for i := range n {
		h.qpns = append(h.qpns, uint32(2+3*i)) // gaps, as after QPs come and go
	}
	path := sockPath(t)
	srv, err := Listen(path, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	s, err := GetStatus(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d QPs in %v", len(s.QPs), time.Since(t0))
	if len(s.QPs) != n || s.QPCount != n || s.Device != "big0" || s.QPNextSet {
		t.Fatalf("%d QPs, count %d, device %q, next %v", len(s.QPs), s.QPCount, s.Device, s.QPNextSet)
	}
	for i, q := range s.QPs {
		if want := synthQP(h.qpns[i]); q != want {
			t.Fatalf("QP %d: %+v, want %+v", i, q, want)
		}
	}
	// One page by hand: at most MaxPageQPs, and qp_next where the next starts.
	resp, err := Do(ctx, path, Request{Op: OpGet, Pairs: Query{From: 3, Max: 1000}.Pairs()})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Pairs) > MaxPairs {
		t.Fatalf("%d lines", len(resp.Pairs))
	}
	p, err := DecodeStatus(resp.Pairs)
	if err != nil || len(p.QPs) != MaxPageQPs || p.QPs[0].QPN != 5 || !p.QPNextSet || p.QPNext != h.qpns[1+MaxPageQPs] {
		t.Fatalf("page from 3: %d QPs, first %d, next %v/%d; %v", len(p.QPs), p.QPs[0].QPN, p.QPNextSet, p.QPNext, err)
	}
	// One QP.
	q, err := GetQP(ctx, path, h.qpns[n/2])
	if err != nil || q != synthQP(h.qpns[n/2]) {
		t.Fatal(q, err)
	}
	var e *Error
	if _, err := GetQP(ctx, path, 3); !errors.As(err, &e) || e.Errno != ENOENT {
		t.Fatalf("absent QP: %v", err)
	}
	for _, bad := range [][]Pair{{{"qp", "x"}}, {{"qp_from", "-1"}}, {{"qp", "1"}, {"qp_max", "2"}}} {
		if _, err := Do(ctx, path, Request{Op: OpGet, Pairs: bad}); !errors.As(err, &e) || e.Errno != EINVAL {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestQuerySelect(t *testing.T) {
	qpns := []uint32{1, 2, 5, 9, 10}
	for _, c := range []struct {
		q    Query
		want []uint32
		next uint32
		more bool
	}{
		{Query{}, qpns, 0, false},
		{Query{Max: 2}, []uint32{1, 2}, 5, true},
		{Query{From: 3, Max: 2}, []uint32{5, 9}, 10, true},
		{Query{From: 10, Max: 2}, []uint32{10}, 0, false},
		{Query{From: 11}, []uint32{}, 0, false},
		{Query{One: true, QP: 9}, []uint32{9}, 0, false},
		{Query{One: true, QP: 8}, nil, 0, false},
	} {
		sel, next, more := c.q.Select(qpns)
		if fmt.Sprint(sel) != fmt.Sprint(c.want) || next != c.next || more != c.more {
			t.Errorf("%+v: %v %d %v", c.q, sel, next, more)
		}
	}
	// The query's wire form round-trips, and a get with other keys is malformed.
	for _, q := range []Query{{}, {From: 7}, {From: 7, Max: 3}, {One: true, QP: 4}} {
		r := Request{Op: OpGet, Pairs: q.Pairs()}
		got, err := ReadRequest(rd(string(r.Append(nil))))
		if err != nil {
			t.Fatal(q, err)
		}
		pq, err := ParseQuery(got.Pairs)
		want := q
		if !want.One && (want.Max == 0 || want.Max > MaxPageQPs) {
			want.Max = MaxPageQPs
		}
		if err != nil || pq != want {
			t.Errorf("%+v: %+v %v", q, pq, err)
		}
	}
	for _, in := range []string{"get=1\nqp=1\nqp=2\n\n", "get=1\nqp_max=" + strconv.Itoa(1) + "\nqp_max=2\n\n", "get=1\nx=1\n\n"} {
		if _, err := ReadRequest(rd(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// resTable is a handler with many synthetic resources of every kind, paged as the daemon
// pages them (Query.SelectRes).
type resTable struct{ res []Res } // by Key

func (h *resTable) Get(q Query) ([]Pair, error) {
	if q.Res == "" {
		return (&Status{Device: "big0"}).Pairs(), nil
	}
	var kind []Res
	for _, r := range h.res {
		if r.Kind == q.Res {
			kind = append(kind, r)
		}
	}
	s := Status{Device: "big0", ResCount: uint64(len(kind))}
	s.Res, s.ResNext, s.ResNextSet = q.SelectRes(kind)
	return s.Pairs(), nil
}

func (h *resTable) Set([]Pair) error { return nil }

// TestResPaging: 10,000 MRs of 5 processes (more than one answer holds), CQs and PDs are
// read whole, in order, every field intact (a process name with a comma included).
func TestResPaging(t *testing.T) {
	h := &resTable{}
	for pid := 100; pid < 105; pid++ {
		comm := fmt.Sprintf("proc,%d", pid)
		for i := range 2000 {
			h.res = append(h.res, Res{Kind: "mr", PID: pid, Comm: comm, Num: uint32(i<<8 | 1), PD: uint32(i%3 + 1), Size: uint64(i) << 12,
				IOVA: 0x7f00_0000_0000 + uint64(i)<<20, Flags: "LocalWrite|RemoteRead"})
		}
		h.res = append(h.res, Res{Kind: "cq", PID: pid, Comm: comm, Num: 1, Size: 256, Used: 3, Flags: "overflow"},
			Res{Kind: "pd", PID: pid, Comm: comm, Num: 1, Used: 2001})
	}
	path := sockPath(t)
	srv, err := Listen(path, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, kind := range ResKinds {
		var want []Res
		for _, r := range h.res {
			if r.Kind == kind {
				want = append(want, r)
			}
		}
		s, err := GetRes(ctx, path, kind)
		if err != nil {
			t.Fatal(kind, err)
		}
		if s.Device != "big0" || len(s.Res) != len(want) {
			t.Fatalf("%s: device %q, %d resources, want %d", kind, s.Device, len(s.Res), len(want))
		}
		for i := range want {
			if s.Res[i] != want[i] {
				t.Fatalf("%s %d: %+v, want %+v", kind, i, s.Res[i], want[i])
			}
		}
	}
	if _, err := Do(ctx, path, Request{Op: OpGet, Pairs: []Pair{{"res", "qp"}}}); err == nil {
		t.Fatal("res=qp accepted")
	}
	if _, err := Do(ctx, path, Request{Op: OpGet, Pairs: []Pair{{"res", "cq"}, {"qp", "3"}}}); err == nil {
		t.Fatal("res= with qp= accepted")
	}
}
