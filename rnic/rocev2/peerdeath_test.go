package rocev2

import (
	"errors"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// TestPeerDeath (issue 10, "peer death"): the peer vanishes mid-transfer or while
// idle (its link is gone: no DREQ, no packets); the survivor's QP reaches Error
// with every WQE completed (the oldest RetryExcErr, the rest flushed) through
// retry exhaustion — within (1+RetryCnt) × the ACK timeout when requests are
// outstanding, and KeepAlive later when idle (the keepalive probe is what
// exhausts its retries).
func TestPeerDeath(t *testing.T) {
	for _, survivor := range []string{"client", "server"} {
		for _, busy := range []bool{true, false} {
			name := survivor + "/idle"
			if busy {
				name = survivor + "/mid-transfer"
			}
			t.Run(name, func(t *testing.T) {
				cfg := testConfig()
				cfg.Timeout = 12 // 16.8 ms
				cfg.KeepAlive = 100 * time.Millisecond
				cli, srv, res, err := cmPair(t, &pairOpts{cfg: cfg}, acceptWith(""))
				if err != nil || res.err != nil {
					t.Fatal(err, res.err)
				}
				me, peer := cli, srv
				if survivor == "server" {
					me, peer = srv, cli
				}
				lmr, _ := me.reg(t, 1<<20, allAccess)
				rmr, _ := peer.reg(t, 1<<20, allAccess)
				const n = 32
				write := func(i int) {
					post(t, me.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled,
						SGL: []rnic.SGE{lmr.SGE(0, 64<<10)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
				}
				if busy {
					write(0)
					wait(t, me.scq, 1) // the transfer is under way
				}
				killed := time.Now()
				peer.link.Close() // kill -9: the peer's packets stop, nothing answers
				if busy {
					for i := 1; i < n; i++ {
						write(i)
					}
				}
				select {
				case <-me.qp.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the survivor's QP did not reach Error")
				}
				took := time.Since(killed)
				if me.qp.State() != rnic.QPError || !errors.Is(me.qp.Err(), ErrRetryExceeded) {
					t.Fatalf("QP %v, %v", me.qp.State(), me.qp.Err())
				}
				if busy {
					cs := wait(t, me.scq, n-1)
					retryExc := 0
					for _, c := range cs {
						switch c.Status {
						case rnic.StatusSuccess, rnic.StatusWRFlushErr:
						case rnic.StatusRetryExcErr:
							retryExc++
						default:
							t.Fatalf("%+v", c)
						}
					}
					if retryExc != 1 {
						t.Fatalf("%d RetryExcErr completions", retryExc)
					}
				}
				bound := 8 * 16800 * time.Microsecond
				if !busy {
					bound += cfg.KeepAlive
				}
				t.Logf("survivor's QP in Error %v after the peer died (bound %v + scheduling)", took.Round(time.Millisecond), bound)
			})
		}
	}
}

// TestKeepAlive: an idle RC connection to a live peer is probed (zero-length WRITEs,
// which the peer ACKs) and stays up; the probes and their ACKs do not count as use,
// so an accepted connection that carries nothing else still ends at its
// first-message timeout.
func TestKeepAlive(t *testing.T) {
	cfg := testConfig()
	cfg.KeepAlive = 20 * time.Millisecond
	cli, srv, res, err := cmPair(t, &pairOpts{cfg: cfg, cm: &CMConfig{ResponseTimeout: 14, MaxRetries: 5,
		FirstMessageTimeout: 400 * time.Millisecond}}, acceptWith(""))
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	select {
	case <-srv.qp.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the idle accepted connection outlived its first-message timeout")
	}
	if !errors.Is(srv.conn.Err(), ErrFirstMessageTimeout) {
		t.Fatalf("server conn ended with %v", srv.conn.Err())
	}
	probes := cli.link.Stats().Sent + srv.link.Stats().Sent
	t.Logf("%d packets on the idle connection in 400 ms (keepalive every 20-25 ms, and ACKs)", probes)
	// Either side may be the one that probes: a side that receives the other's probes
	// every 20-25 ms is idle for less than 20 ms at times and then never probes itself
	// (an ACK is not counted as a transmitted segment).
	if cli.qp.Counters().TxSegments.Load()+srv.qp.Counters().TxSegments.Load() == 0 {
		t.Fatal("no keepalive probes")
	}
	if cli.qp.Counters().Retransmits.Load() != 0 {
		t.Fatal("a live peer's probes were retransmitted")
	}
}
