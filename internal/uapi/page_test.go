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
