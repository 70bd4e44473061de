package dat

import (
	"errors"
	"testing"
)

// dat_srq_resize (spec §6.5.7): grow, shrink, the error returns, buffers
// kept across resizes, and the low watermark event after a resize.
func TestSRQResizeGrowShrink(t *testing.T) {
	srv, cli := newSide(t, "server"), newSide(t, "client")
	srq, err := srv.ia.CreateSRQ(srv.pz, SRQAttr{MaxRecvDTOs: 2, MaxRecvIOV: 1})
	if err != nil {
		t.Fatal(err)
	}
	post := func(cookie uint64) error {
		return srq.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(int(cookie%8)*8, 8)}, cookie)
	}
	query := func(max, outstanding int) {
		t.Helper()
		p, err := srq.Query(SRQFieldAll)
		if err != nil || p.MaxRecvDTOs != max || p.OutstandingDTOCount != outstanding {
			t.Fatalf("%+v %v, want max %d outstanding %d", p, err, max, outstanding)
		}
	}
	for c := uint64(0); c < 2; c++ {
		if err := post(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := post(99); !errors.Is(err, ErrInsufficientResources) {
		t.Fatal("over max_recv_dtos", err)
	}
	for _, c := range []struct {
		n    int
		want error
	}{
		{0, ErrInvalidParameter},
		{-3, ErrInvalidParameter},
		{srv.ia.dev.Config().MaxQPWR + 1, ErrInsufficientResources},
		{1, ErrInvalidState}, // 2 outstanding
	} {
		if err := srq.Resize(c.n); !errors.Is(err, c.want) {
			t.Fatalf("resize %d: %v, want %v", c.n, err, c.want)
		}
	}
	query(2, 2)
	// grow: the engine takes three more
	if err := srq.Resize(5); err != nil {
		t.Fatal(err)
	}
	for c := uint64(2); c < 5; c++ {
		if err := post(c); err != nil {
			t.Fatal("after grow", c, err)
		}
	}
	if err := post(99); !errors.Is(err, ErrInsufficientResources) {
		t.Fatal("over the grown length", err)
	}
	query(5, 5)
	if p, _ := srq.Query(SRQFieldAll); p.AvailableDTOCount != 5 {
		t.Fatalf("%+v", p)
	}
	attr := DefaultEPAttr()
	if srv.ep, err = srv.ia.CreateEPWithSRQ(srv.pz, srv.dto, srv.dto, srv.conn, srq, &attr); err != nil {
		t.Fatal(err)
	}
	connectPair(t, srv, cli, nil)
	send := func(n int) {
		for i := 0; i < n; i++ {
			if err := cli.ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(0, 4)}, 0, CompletionSuppress); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(3)
	for c := uint64(0); c < 3; c++ {
		srv.waitDTO(DTOReceive, c) // dequeued: reaped
	}
	query(5, 2)
	// shrink: not below the outstanding buffers; exactly to them works
	if err := srq.Resize(1); !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
	if err := srq.Resize(2); err != nil {
		t.Fatal("shrink", err)
	}
	query(2, 2)
	if err := post(99); !errors.Is(err, ErrInsufficientResources) {
		t.Fatal("over the shrunk length", err)
	}
	// low watermark after the resizes: 2 on the SRQ, armed at 2
	if err := srq.SetLW(2); err != nil {
		t.Fatal(err)
	}
	if err := srq.Resize(1); !errors.Is(err, ErrInvalidState) {
		t.Fatal("below the low watermark", err)
	}
	send(1)
	srv.waitDTO(DTOReceive, 3)
	ev, _, err := srv.ia.AsyncEVD().Wait(nil, waitT, 1)
	if err != nil || ev.Number != SRQLowWatermarkEvent || ev.Async.Handle != srq {
		t.Fatalf("%+v %v", ev, err)
	}
	// grow beyond every length so far; the new slots carry data
	if err := srq.Resize(8); err != nil {
		t.Fatal(err)
	}
	for c := uint64(10); c < 17; c++ {
		if err := post(c); err != nil {
			t.Fatal(c, err)
		}
	}
	query(8, 8)
	send(8)
	srv.waitDTO(DTOReceive, 4)
	for c := uint64(10); c < 17; c++ {
		srv.waitDTO(DTOReceive, c)
	}
	query(8, 0)
	if n, _, _ := srv.ep.RecvQuery(); n != 0 {
		t.Fatal(n)
	}
	if err := srq.Resize(1); !errors.Is(err, ErrInvalidState) {
		t.Fatal("below the low watermark", err)
	}
	if err := srq.SetLW(0); err != nil {
		t.Fatal(err)
	}
	if err := srq.Resize(1); err != nil {
		t.Fatal("shrink an empty SRQ", err)
	}
	query(1, 0)
	if err := srv.ep.Disconnect(CloseAbrupt); err != nil {
		t.Fatal(err)
	}
}
