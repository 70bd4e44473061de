package rocev2

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// cmIdle waits until neither agent holds any connection (Timewait expired).
func cmIdle(t *testing.T, sides ...*side) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, s := range sides {
			a := s.ep.cma
			a.mu.Lock()
			n += len(a.byLocal) + len(a.byRemote) + len(a.byQPN) + a.pending + a.conns
			a.mu.Unlock()
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d CM entries left", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCMReliability: the IB CM's own reliability (IBTA Vol.1 ch. 12) on the in-memory link,
// with each MAD type lost once and duplicated once: the connection is set up, carries
// a message, and is torn down on both sides; the application sees one request; no CM
// state is left once Timewait ends.
func TestCMReliability(t *testing.T) {
	type sideF int
	const (
		cliSide sideF = iota
		srvSide
	)
	cases := []struct {
		attr roce.AttrID
		from sideF
	}{
		{roce.AttrREQ, cliSide}, {roce.AttrREP, srvSide}, {roce.AttrRTU, cliSide},
		{roce.AttrDREQ, cliSide}, {roce.AttrDREP, srvSide},
	}
	for _, c := range cases {
		for _, dup := range []bool{false, true} {
			name := fmt.Sprintf("%v/drop", c.attr)
			if dup {
				name = fmt.Sprintf("%v/duplicate", c.attr)
			}
			t.Run(name, func(t *testing.T) {
				drop, dupl := map[roce.AttrID]int{}, map[roce.AttrID]int{}
				if dup {
					dupl[c.attr] = 1
				} else {
					drop[c.attr] = 1
				}
				o := &pairOpts{}
				var fl *madFaultLink
				w := func(l Link) Link { fl = newMADFaults(drop, dupl)(l).(*madFaultLink); return fl }
				if c.from == cliSide {
					o.cliWrap = w
				} else {
					o.srvWrap = w
				}
				var requests atomic.Int32
				cli, srv, res, err := cmPair(t, o, func(srv *side, r *ConnRequest) (*Conn, error) {
					requests.Add(1)
					return r.Accept(srv.qp, ConnParam{})
				})
				if err != nil || res.err != nil {
					t.Fatal(err, res.err)
				}
				smr, _ := cli.reg(t, 100, allAccess)
				rmr, _ := srv.reg(t, 100, allAccess)
				postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 100)}})
				post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 100)}})
				if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 {
					t.Fatalf("%+v", c)
				}
				wait(t, cli.scq, 1)
				cli.qp.Disconnect()
				for _, s := range []*side{srv, cli} {
					select {
					case <-s.qp.Done():
					case <-time.After(5 * time.Second):
						t.Fatal("QP not disconnected")
					}
				}
				if err := srv.conn.Err(); !errors.Is(err, ErrPeerDisconnected) {
					t.Fatalf("server conn ended with %v", err)
				}
				if err := cli.conn.Err(); err != nil {
					t.Fatalf("client conn ended with %v", err)
				}
				if n := requests.Load(); n != 1 {
					t.Fatalf("the application saw %d requests", n)
				}
				cmIdle(t, cli, srv)
				// A lost MAD was sent again — except the RTU: the first
				// packet on the QP establishes the connection instead
				// (IBTA Vol.1 ch. 12, communication established), so the REP need not be repeated.
				if n := fl.sent(c.attr); n < 1 || !dup && n < 2 && c.attr != roce.AttrRTU {
					t.Fatalf("%v sent %d times", c.attr, n)
				}
			})
		}
	}
}

// TestCMRejectLostOrDuplicated: a REJ lost or duplicated: the REQ retransmission
// gets the same REJ from Timewait, not a second request for the application.
func TestCMRejectLostOrDuplicated(t *testing.T) {
	for _, dup := range []bool{false, true} {
		t.Run(fmt.Sprint("duplicate=", dup), func(t *testing.T) {
			drop, dupl := map[roce.AttrID]int{roce.AttrREJ: 1}, map[roce.AttrID]int{}
			if dup {
				drop, dupl = dupl, drop
			}
			var requests atomic.Int32
			cli, srv, res, err := cmPair(t, &pairOpts{srvWrap: newMADFaults(drop, dupl)}, func(srv *side, r *ConnRequest) (*Conn, error) {
				requests.Add(1)
				return nil, r.Reject([]byte("no"))
			})
			var re *RejectError
			if res.err != nil || !errors.As(err, &re) || re.Reason != roce.RejConsumerDefined || requests.Load() != 1 {
				t.Fatalf("dial %v, accept %v, %d requests", err, res.err, requests.Load())
			}
			cmIdle(t, cli, srv)
		})
	}
}

// TestCMMRA: the application takes longer than the initiator's retries allow; the
// duplicate REQs are answered with MRAs (the first one lost or duplicated), which
// extend the initiator's wait, and the connection succeeds.
func TestCMMRA(t *testing.T) {
	for _, mode := range []string{"clean", "drop", "duplicate"} {
		t.Run(mode, func(t *testing.T) {
			drop, dupl := map[roce.AttrID]int{}, map[roce.AttrID]int{}
			switch mode {
			case "drop":
				drop[roce.AttrMRA] = 1
			case "duplicate":
				dupl[roce.AttrMRA] = 1
			}
			var fl *madFaultLink
			o := &pairOpts{cm: &CMConfig{ResponseTimeout: 14, MaxRetries: 3}, // gives up after ≈ 270 ms without MRA
				srvWrap: func(l Link) Link { fl = newMADFaults(drop, dupl)(l).(*madFaultLink); return fl }}
			cli, srv, res, err := cmPair(t, o, func(srv *side, r *ConnRequest) (*Conn, error) {
				time.Sleep(600 * time.Millisecond) // the application deciding slowly
				return r.Accept(srv.qp, ConnParam{})
			})
			if err != nil || res.err != nil {
				t.Fatal(err, res.err)
			}
			if fl.sent(roce.AttrMRA) == 0 {
				t.Fatal("no MRA sent")
			}
			cli.qp.Disconnect()
			<-srv.qp.Done()
			cmIdle(t, cli, srv)
		})
	}
}

// TestCMRetriesExhausted: REP and DREQ retransmission stop after MaxRetries. A REP
// never answered (no RTU, no traffic) ends the passive connection with
// ErrCMTimeout and a REJ "timeout" that ends the active one; a DREQ never
// answered ends in Timewait all the same.
func TestCMRetriesExhausted(t *testing.T) {
	cm := &CMConfig{ResponseTimeout: 12, MaxRetries: 2} // 16.8 ms
	t.Run("REP", func(t *testing.T) {
		var sl *madFaultLink
		o := &pairOpts{cm: cm, cliWrap: newMADFaults(map[roce.AttrID]int{roce.AttrRTU: 1000}, nil),
			srvWrap: func(l Link) Link { sl = newMADFaults(nil, nil)(l).(*madFaultLink); return sl }}
		cli, srv, res, err := cmPair(t, o, acceptWith(""))
		if err != nil || res.err != nil {
			t.Fatal(err, res.err)
		}
		for _, s := range []*side{srv, cli} {
			select {
			case <-s.qp.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("QP not ended: server %v client %v", srv.conn.Err(), cli.conn.Err())
			}
		}
		var re *RejectError
		if err := srv.conn.Err(); !errors.Is(err, ErrCMTimeout) {
			t.Fatalf("server conn: %v", err)
		}
		if err := cli.conn.Err(); !errors.As(err, &re) || re.Reason != roce.RejTimeout {
			t.Fatalf("client conn: %v", err)
		}
		cmIdle(t, cli, srv)
		if n := sl.sent(roce.AttrREP); n != 1+cm.MaxRetries {
			t.Fatalf("REP sent %d times, want %d", n, 1+cm.MaxRetries)
		}
	})
	t.Run("DREQ", func(t *testing.T) {
		var cl *madFaultLink
		o := &pairOpts{cm: cm, srvWrap: newMADFaults(map[roce.AttrID]int{roce.AttrDREP: 1000}, nil),
			cliWrap: func(l Link) Link { cl = newMADFaults(nil, nil)(l).(*madFaultLink); return cl }}
		cli, srv, res, err := cmPair(t, o, acceptWith(""))
		if err != nil || res.err != nil {
			t.Fatal(err, res.err)
		}
		cli.qp.Disconnect()
		<-srv.qp.Done()
		<-cli.qp.Done()
		cmIdle(t, cli, srv)
		if n := cl.sent(roce.AttrDREQ); n != 1+cm.MaxRetries {
			t.Fatalf("client sent %d DREQs, want %d", n, 1+cm.MaxRetries)
		}
	})
}
