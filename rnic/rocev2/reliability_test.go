package rocev2

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// dropNth returns a filter dropping the n-th (1-based) packet with opcode op.
func dropNth(op roce.Opcode, n int32) func([]byte) bool {
	var k atomic.Int32
	return func(b []byte) bool {
		if roce.Opcode(b[0]) == op && k.Add(1) == n {
			return false
		}
		return true
	}
}

func TestRNRRetry(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 10, allAccess)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	time.Sleep(20 * time.Millisecond) // several RNR NAKs (timer 0.01 ms, rnr_retry 7 = infinite)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 3, SGL: []rnic.SGE{rmr.SGE(0, 10)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("send %+v", c)
	}
	if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || c.WRID != 3 {
		t.Fatalf("recv %+v", c)
	}
	if cli.qp.Counters().NAKs.Load() == 0 {
		t.Fatal("no RNR NAK seen")
	}
}

// TestRNRNoSequenceNAK: SENDs that follow one the responder answered with an RNR NAK
// are out of sequence there, and are dropped silently, as after a PSN-sequence NAK (one NAK
// per expected PSN): answered with a sequence NAK, they made the requester take each RNR
// wait for a loss, cut its window and spend a retry (BenchmarkRoCEv2Send's default mode
// did, on a receiver that fell behind with its receives).
func TestRNRNoSequenceNAK(t *testing.T) {
	var seqNAKs, rnrNAKs atomic.Int32
	count := func(b []byte) bool {
		if roce.Opcode(b[0]) == roce.RCAck {
			switch syn := roce.Syndrome(b[roce.BTHLen]); {
			case syn.IsRNRNAK():
				rnrNAKs.Add(1)
			case syn.IsNAK() && syn.NAKCode() == roce.NAKPSNSequenceError:
				seqNAKs.Add(1)
			}
		}
		return true
	}
	cli, srv := newPair(t, &pairOpts{srvF: Faults{Filter: count}})
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 30, allAccess)
	for i := range 3 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	}
	// Several RNR rounds (timer 0.01 ms, rnr_retry 7 = infinite), each resending all three.
	for deadline := time.Now().Add(5 * time.Second); rnrNAKs.Load() < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d RNR NAKs in 5 s", rnrNAKs.Load())
		}
	}
	for i := range 3 {
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(10*i, 10)}})
	}
	for i, c := range wait(t, cli.scq, 3) {
		if c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, c)
		}
	}
	wait(t, srv.rcq, 3)
	if n := seqNAKs.Load(); n != 0 {
		t.Errorf("%d PSN-sequence NAKs beside %d RNR NAKs", n, rnrNAKs.Load())
	}
	if n := cli.ep.WindowCuts.Load(); n != 0 {
		t.Errorf("%d window cuts", n)
	}
}

// TestRNRThenSequenceNAK: rxe's responder answers the requests behind one it RNR-NAKed
// with a PSN-sequence NAK of the same PSN (an RNR NAK does not count as its one NAK per
// expected PSN). The requester waits out the RNR timer and resends from that PSN, as for
// the RNR NAK alone: no loss counted, no window cut, no retry spent.
func TestRNRThenSequenceNAK(t *testing.T) {
	n := NewMemNet()
	cli := newSide(t, n, cliAddr, Faults{}, &pairOpts{})
	t.Cleanup(func() {
		_ = cli.qp.Destroy()
		_ = cli.ep.Close()
		_ = cli.dev.Close()
	})
	peer, err := n.NewLink(srvAddr, Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	const peerQPN, first = 0x77, roce.PSN(100)
	if _, err := cli.ep.Connect(cli.qp, ConnAttr{Remote: srvAddr, RemoteQPN: peerQPN, SendPSN: first, RecvPSN: 200}); err != nil {
		t.Fatal(err)
	}
	smr, _ := cli.reg(t, 10, allAccess)
	for i := range 3 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	}
	bufs, sizes, from := [][]byte{make([]byte, MaxPacket)}, make([]int, 1), make([]netip.AddrPort, 1)
	recvPSN := func() roce.PSN {
		t.Helper()
		timer := time.AfterFunc(5*time.Second, func() { peer.Close() })
		defer timer.Stop()
		if _, err := peer.Recv(bufs, sizes, from); err != nil {
			t.Fatal("no request:", err)
		}
		p, err := roce.ParsePacket(bufs[0][:sizes[0]])
		if err != nil || p.Opcode() != roce.RCSendOnly {
			t.Fatalf("not a SEND Only: %v % x", err, bufs[0][:sizes[0]])
		}
		return p.BTH.PSN()
	}
	ack := func(syn roce.Syndrome, psn roce.PSN) {
		h := roce.Header{Opcode: roce.RCAck, PKey: roce.DefaultPKey, DestQP: cli.qp.Num(), PSN: psn, Syndrome: syn}
		if err := peer.Send([][]byte{finish(h.Append(nil, 0), 0, srvAddr, cliAddr)}, cliAddr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if psn := recvPSN(); psn != first+roce.PSN(i) {
			t.Fatalf("request %d has PSN %v", i, psn)
		}
	}
	// What rxe sends for these three with no receive posted: an RNR NAK for the first, a
	// sequence NAK (expected PSN: the first) for the second, nothing for the third.
	ack(roce.RNRNAKSyndrome(roce.RNRTimer(14)), first)
	ack(roce.NAKSyndrome(roce.NAKPSNSequenceError), first)
	for i := range 3 { // the RNR retry
		if psn := recvPSN(); psn != first+roce.PSN(i) {
			t.Fatalf("resent request %d has PSN %v", i, psn)
		}
	}
	ack(roce.ACKSyndrome(roce.CreditsUnlimited), first+2)
	for i, c := range wait(t, cli.scq, 3) {
		if c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, c)
		}
	}
	if r, w := cli.qp.Counters().Retransmits.Load(), cli.ep.WindowCuts.Load(); r != 0 || w != 0 {
		t.Errorf("%d retransmissions counted, %d window cuts", r, w)
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	cfg := testConfig()
	cfg.RNRRetry = 2
	cli, srv := newPair(t, &pairOpts{cfg: cfg})
	smr, _ := cli.reg(t, 10, allAccess)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusRNRRetryExcErr {
		t.Fatalf("send %+v", c)
	}
	if n := srv.qp.Counters().NAKs.Load(); n != 3 {
		t.Fatalf("responder sent %d RNR NAKs, want 3 (1 + rnr_retry)", n)
	}
	// WRITE with immediate needs a receive too.
	_ = srv
}

func TestRetryExceeded(t *testing.T) {
	cfg := testConfig()
	cfg.RetryCnt = 3
	cfg.Timeout = 8 // 1 ms
	cli, _ := newPair(t, &pairOpts{cfg: cfg, cliF: Faults{Drop: 1}})
	smr, _ := cli.reg(t, 10, allAccess)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	cs := wait(t, cli.scq, 2)
	if cs[0].Status != rnic.StatusRetryExcErr || cs[1].Status != rnic.StatusWRFlushErr {
		t.Fatalf("completions %+v", cs)
	}
	if n := cli.link.Stats().Sent; n != 2*4 {
		t.Fatalf("sent %d packets, want 8 (2 packets × (1 + retry_cnt 3))", n)
	}
}

func TestPSNSequenceNAK(t *testing.T) {
	// Lose the 2nd packet of a 5-packet WRITE: the responder NAKs the gap
	// once and the requester goes back to it.
	cli, srv := newPair(t, &pairOpts{cliF: Faults{Filter: dropNth(roce.RCWriteMiddle, 1)}})
	smr, sbuf := cli.reg(t, 5000, allAccess)
	rmr, rbuf := srv.reg(t, 5000, allAccess)
	fill(sbuf, 9)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 5000)},
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	if !bytes.Equal(sbuf, rbuf) {
		t.Fatal("data")
	}
	if srv.qp.Counters().NAKs.Load() != 1 || cli.qp.Counters().Retransmits.Load() != 1 {
		t.Fatalf("NAKs sent %d, retransmits %d; want 1, 1", srv.qp.Counters().NAKs.Load(), cli.qp.Counters().Retransmits.Load())
	}
	// The device counters include their QPs' (what `softrnic stat` shows per device).
	if srv.dev.Counters().NAKs.Load() != 1 || cli.dev.Counters().Retransmits.Load() != 1 {
		t.Fatalf("device NAKs %d, retransmits %d; want 1, 1", srv.dev.Counters().NAKs.Load(), cli.dev.Counters().Retransmits.Load())
	}
}

func TestTimeoutLastPacketLost(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{cliF: Faults{Filter: dropNth(roce.RCSendOnly, 1)}})
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 10, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 3, SGL: []rnic.SGE{rmr.SGE(0, 10)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	if cli.qp.Counters().Retransmits.Load() != 1 {
		t.Fatal("expected one timeout retransmission")
	}
}

// TestTimeoutAfterProgress: the first SEND's ACK restarts the running ACK timeout
// (armAck records it, and the timer runs again from its deadline), and the lost second
// SEND is still retransmitted once that restarted timeout runs out.
//
// It runs with testConfig's 67 ms ACK timeout: with 1 ms (Timeout 8) the first SEND's ACK
// came late on a loaded machine (a CI run at 99cebd5, the other packages' tests beside
// it), and that SEND was resent too (2 retransmissions).
func TestTimeoutAfterProgress(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{cliF: Faults{Filter: dropNth(roce.RCSendOnly, 2)}})
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 20, allAccess)
	for i := range 2 {
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(10*i, 10)}})
	}
	for i := range 2 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	}
	for i, c := range wait(t, cli.scq, 2) {
		if c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, c)
		}
	}
	if n := cli.qp.Counters().Retransmits.Load(); n != 1 {
		t.Fatalf("%d retransmissions, want 1", n)
	}
}

func TestDuplicateAtomicReplay(t *testing.T) {
	// The atomic ACK is lost: the requester times out and resends the
	// request; the responder must answer from its saved result, not add twice.
	cli, srv := newPair(t, &pairOpts{srvF: Faults{Filter: dropNth(roce.RCAtomicAck, 1)}})
	lmr, lbuf := cli.reg(t, 8, allAccess)
	rmr, rbuf := srv.reg(t, 8, allAccess)
	binary.NativeEndian.PutUint64(rbuf, 10)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpAtomicFetchAdd, Compare: 1, Flags: rnic.Signaled,
		SGL: []rnic.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	if got, orig := binary.NativeEndian.Uint64(rbuf), binary.NativeEndian.Uint64(lbuf); got != 11 || orig != 10 {
		t.Fatalf("remote %d (want 11), returned %d (want 10)", got, orig)
	}
	if cli.qp.Counters().Retransmits.Load() == 0 {
		t.Fatal("no retransmission happened")
	}
}

func TestDuplicateReadReexecuted(t *testing.T) {
	// Lose a middle READ response: the requester asks again from that PSN.
	cli, srv := newPair(t, &pairOpts{srvF: Faults{Filter: dropNth(roce.RCReadResponseMiddle, 2)}})
	lmr, lbuf := cli.reg(t, 8000, allAccess)
	rmr, rbuf := srv.reg(t, 8000, allAccess)
	fill(rbuf, 77)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpRead, Flags: rnic.Signaled,
		SGL: []rnic.SGE{lmr.SGE(0, 8000)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	if !bytes.Equal(lbuf, rbuf) {
		t.Fatal("data")
	}
}

func TestDuplicateWriteNotReapplied(t *testing.T) {
	// Every packet is delivered twice, and the ACKs too. A WRITE must land
	// once: the second copy of the first packet must not be re-executed
	// after the responder's memory was changed by a later SEND's consumer.
	cli, srv := newPair(t, &pairOpts{cliF: Faults{Duplicate: 1}, srvF: Faults{Duplicate: 1}})
	smr, sbuf := cli.reg(t, 3000, allAccess)
	rmr, rbuf := srv.reg(t, 3000, allAccess)
	fill(sbuf, 1)
	for i := range 20 {
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(0, 3000)}})
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 3000)}})
	}
	cs := wait(t, srv.rcq, 20)
	for i, c := range cs {
		if c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("recv %d: %+v", i, c)
		}
	}
	wait(t, cli.scq, 20)
	if !bytes.Equal(sbuf, rbuf) {
		t.Fatal("data")
	}
	if n := srv.rcq.Len(); n != 0 {
		t.Fatalf("%d extra receive completions", n)
	}
}

func TestUC(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{typ: UC})
	smr, sbuf := cli.reg(t, 5000, allAccess)
	rmr, rbuf := srv.reg(t, 10000, allAccess)
	fill(sbuf, 4)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 5000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 5000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 5000)},
		RemoteAddr: rmr.Addr() + 5000, RKey: rmr.RKey()})
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 2})
	post(t, cli.qp, &rnic.SendWR{WRID: 3, Opcode: rnic.OpSend, Flags: rnic.Signaled})
	cs := wait(t, cli.scq, 3)
	if cs[0].Status != 0 || cs[1].Status != 0 || cs[2].Status != 0 {
		t.Fatalf("%+v", cs)
	}
	if c := wait(t, srv.rcq, 2); c[0].Status != 0 || c[0].ByteLen != 5000 || c[1].ByteLen != 0 {
		t.Fatalf("%+v", c)
	}
	// The zero-length SEND arrived after the WRITE, so the WRITE has landed.
	if !bytes.Equal(rbuf[:5000], sbuf) || !bytes.Equal(rbuf[5000:], sbuf) {
		t.Fatal("data")
	}
	// READ is not a UC operation.
	post(t, cli.qp, &rnic.SendWR{WRID: 4, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 8)},
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusLocQPOpErr {
		t.Fatalf("%+v", c)
	}
}

func TestUCSendInvRefused(t *testing.T) {
	cli, _ := newPair(t, &pairOpts{typ: UC})
	smr, _ := cli.reg(t, 8, allAccess)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSendInv, InvalidateSTag: 0x1234, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 8)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusLocQPOpErr {
		t.Fatalf("%+v", c)
	}
}

func TestUCWriteImm(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{typ: UC})
	smr, sbuf := cli.reg(t, 3000, allAccess)
	rmr, rbuf := srv.reg(t, 3000, allAccess)
	fill(sbuf, 9)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWriteImm, Imm: 5, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 3000)},
		RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || c.Opcode != rnic.WCRecvRDMAWithImm || c.Imm != 5 || c.ByteLen != 3000 || !bytes.Equal(rbuf, sbuf) {
		t.Fatalf("%+v", c)
	}
}

func TestUCLossDropsMessage(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{typ: UC, cliF: Faults{Filter: dropNth(roce.UCSendMiddle, 1)}})
	smr, sbuf := cli.reg(t, 5000, allAccess)
	rmr, rbuf := srv.reg(t, 5000, allAccess)
	fill(sbuf, 4)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 5000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 5000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 100)}})
	wait(t, cli.scq, 2)
	c := wait(t, srv.rcq, 1)[0]
	if c.Status != 0 || c.ByteLen != 100 || !bytes.Equal(rbuf[:100], sbuf[:100]) {
		t.Fatalf("the second message should land in the reused receive: %+v", c)
	}
}

// TestExactlyOnceFaulty (exactlyOnce) sends 10,000 messages of mixed sizes and operations
// (60% SEND, 20% WRITE, 10% READ, 10% FETCH_ADD) over a link that drops,
// duplicates and reorders 5% of the packets in each direction (and corrupts
// 1%), and checks every SEND arrives exactly once, in order, intact, every
// WRITE landed, every READ returned the right bytes, and every FETCH_ADD was
// applied exactly once (their results are exactly 0..n-1).
func TestExactlyOnceFaulty(t *testing.T) {
	// The fault mix: 5% drop + 5% duplicate + 5% reorder (plus 1%
	// corruption) in both directions. Every loss that leaves no later packet
	// to trigger a PSN-sequence NAK costs one local ACK timeout, a few
	// hundred per run, so the timeout is short (16.8 ms). On a loaded 2-core
	// box under -race the responder's receive thread has been seen
	// unscheduled for over 200 ms; that is a scheduling stall, not a protocol
	// loss, so the test gives the requester more retries than the 3-bit wire
	// field allows (60 × 16.8 ms ≈ 1 s) instead of weakening the fault rates.
	// (RetryCnt is a local setting when QPs are connected by hand.)
	exactlyOnce(t, 10000, Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01})
}

func exactlyOnce(t *testing.T, msgs int, f Faults) {
	cf, sf := f, f
	cf.Seed, sf.Seed = 11, 12
	cfg := testConfig()
	cfg.Timeout = 12  // 16.8 ms
	cfg.RetryCnt = 60 // see TestExactlyOnceFaulty
	cfg.Window = 16   // go-back-N: less to resend per loss
	cli, srv := newPair(t, &pairOpts{cfg: cfg, cliF: cf, srvF: sf, cap: rnic.QPCap{MaxSendWR: 256, MaxRecvWR: 512}})
	const maxLen = 5000
	smr, sbuf := cli.reg(t, 256*maxLen, allAccess)
	rmr, rbuf := srv.reg(t, 512*maxLen, allAccess)
	wmr, wbuf := srv.reg(t, msgs*8, allAccess)
	rdmr, rdbuf := cli.reg(t, 256*8, allAccess)
	amr, abuf := cli.reg(t, 256*8, allAccess)
	cmr, _ := srv.reg(t, 8, allAccess) // the FETCH_ADD counter
	seen := make(map[uint64]bool)
	fill(wbuf, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := make([]int, msgs)
	ops := make([]rnic.Opcode, msgs)
	for i := range sizes {
		sizes[i] = 8 + rng.IntN(maxLen-8)
		switch k := rng.IntN(10); {
		case k < 6:
			ops[i] = rnic.OpSend
		case k < 8:
			ops[i] = rnic.OpWrite
		case k < 9:
			ops[i] = rnic.OpRead
		default:
			ops[i] = rnic.OpAtomicFetchAdd
		}
	}
	nsend := 0
	for _, o := range ops {
		if o == rnic.OpSend {
			nsend++
		}
	}
	// receiver: keep 512 receives posted, check each arrival.
	done := make(chan error, 1)
	go func() {
		wc := make([]rnic.Completion, 64)
		posted, got := 0, 0
		for posted < min(512, nsend) {
			_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(posted), SGL: []rnic.SGE{rmr.SGE(posted%512*maxLen, maxLen)}})
			posted++
		}
		seq := 0
		for got < nsend {
			n, err := srv.rcq.Wait(t.Context(), wc)
			if err != nil {
				done <- err
				return
			}
			for _, c := range wc[:n] {
				slot := int(c.WRID) % 512
				b := rbuf[slot*maxLen : slot*maxLen+int(c.ByteLen)]
				if c.Status != 0 || int(c.WRID) != got || len(b) < 8 {
					done <- fmt.Errorf("recv %d: %+v", got, c)
					return
				}
				// find the next send in ops order
				for ops[seq] != rnic.OpSend {
					seq++
				}
				if int(binary.LittleEndian.Uint32(b)) != seq || len(b) != sizes[seq] || b[len(b)-1] != byte(seq) {
					done <- fmt.Errorf("recv %d carries message %d len %d, want %d len %d", got, binary.LittleEndian.Uint32(b), len(b), seq, sizes[seq])
					return
				}
				seq++
				got++
				if posted < nsend {
					_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(posted), SGL: []rnic.SGE{rmr.SGE(posted%512*maxLen, maxLen)}})
					posted++
				}
			}
		}
		done <- nil
	}()
	wc := make([]rnic.Completion, 64)
	inflight, completed := 0, 0
	for i := 0; i < msgs || completed < msgs; {
		for i < msgs && inflight < 256 {
			slot := i % 256
			b := sbuf[slot*maxLen : slot*maxLen+sizes[i]]
			binary.LittleEndian.PutUint32(b, uint32(i))
			b[len(b)-1] = byte(i)
			wr := rnic.SendWR{WRID: uint64(i), Opcode: ops[i], Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(slot*maxLen, sizes[i])}}
			switch ops[i] {
			case rnic.OpWrite:
				// WRITE 8 bytes of the message number to its own slot.
				wr.SGL[0].Length = 8
				binary.LittleEndian.PutUint64(b, uint64(i)+1)
				wr.RemoteAddr, wr.RKey = wmr.Addr()+uint64(i)*8, wmr.RKey()
			case rnic.OpRead:
				wr.SGL = []rnic.SGE{rdmr.SGE(i%256*8, 8)}
				wr.RemoteAddr, wr.RKey = wmr.Addr()+uint64(i)*8, wmr.RKey()
			case rnic.OpAtomicFetchAdd:
				wr.SGL = []rnic.SGE{amr.SGE(i%256*8, 8)}
				wr.RemoteAddr, wr.RKey, wr.Compare = cmr.Addr(), cmr.RKey(), 1
			}
			post(t, cli.qp, &wr)
			i++
			inflight++
		}
		n, err := cli.scq.Wait(t.Context(), wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			if ops[c.WRID] == rnic.OpRead {
				// READ i fetched slot i of wbuf, which no WRITE touches.
				var want [8]byte
				for k := range want {
					want[k] = byte((int(c.WRID)*8 + k) * 7)
				}
				if got := rdbuf[c.WRID%256*8 : c.WRID%256*8+8]; c.Status == 0 && !bytes.Equal(got, want[:]) {
					t.Fatalf("READ %d returned % x, want % x", c.WRID, got, want)
				}
			}
			if ops[c.WRID] == rnic.OpAtomicFetchAdd && c.Status == 0 {
				// Each FETCH_ADD applies once: the original values are distinct.
				v := binary.NativeEndian.Uint64(abuf[c.WRID%256*8:])
				if seen[v] {
					t.Fatalf("FETCH_ADD %d returned %d twice", c.WRID, v)
				}
				seen[v] = true
			}
			if c.Status != 0 || int(c.WRID) != completed {
				t.Fatalf("send completion %d: %+v (%v)\ncli %s\nsrv %s\nlinks cli %+v srv %+v; rx dropped %d/%d ICRC %d/%d rxseg %d/%d",
					completed, c, cli.qp.Err(), cli.conn.debugState(), srv.conn.debugState(), cli.link.Stats(), srv.link.Stats(),
					cli.ep.RxDropped.Load(), srv.ep.RxDropped.Load(), cli.ep.ICRCErrors.Load(), srv.ep.ICRCErrors.Load(),
					cli.qp.Counters().RxSegments.Load(), srv.qp.Counters().RxSegments.Load())
			}
			completed++
			inflight--
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("receiver timed out")
	}
	nfa := 0
	for _, o := range ops {
		if o == rnic.OpAtomicFetchAdd {
			nfa++
		}
	}
	for v := range nfa {
		if !seen[uint64(v)] {
			t.Fatalf("FETCH_ADD results miss %d", v)
		}
	}
	for i, o := range ops {
		if v := binary.LittleEndian.Uint64(wbuf[i*8:]); o == rnic.OpWrite && v != uint64(i)+1 {
			t.Fatalf("write %d landed as %d", i, v)
		}
	}
	s := func(ml *MemLink) string {
		l := ml.Stats()
		return fmt.Sprintf("sent %d dropped %d dup %d reord %d corrupt %d", l.Sent, l.Dropped, l.Duplicated, l.Reordered, l.Corrupted)
	}
	t.Logf("client %s; server %s; retransmits %d, NAKs %d/%d, ICRC errors %d/%d", s(cli.link), s(srv.link),
		cli.qp.Counters().Retransmits.Load(), cli.qp.Counters().NAKs.Load(), srv.qp.Counters().NAKs.Load(),
		cli.ep.ICRCErrors.Load(), srv.ep.ICRCErrors.Load())
}

// TestSoakFaultyExactlyOnce (issue 10, soak): messages over the fault link at 1%
// drop, 1% duplication and 1% reordering in each direction arrive exactly once,
// in order, intact. 10,000 by default; SOFTRNIC_SOAK=1 sends 10^6.
func TestSoakFaultyExactlyOnce(t *testing.T) {
	n := 10000
	if os.Getenv("SOFTRNIC_SOAK") != "" {
		n = 1000000
	}
	start := time.Now()
	exactlyOnce(t, n, Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01})
	t.Logf("%d messages exactly once in %v", n, time.Since(start).Round(time.Millisecond))
}

// TestInlineSendRetransmit: SENDs posted while the connection's goroutine is parked go
// out from the posting goroutine (Endpoint.InlineSends), and a lost one is still
// retransmitted at its ACK timeout: the inline sender wakes the parked goroutine when
// the ACK deadline it armed is earlier than the goroutine's own (here: none, after a
// pause longer than the timeout left it parked without a deadline). A loaded machine may
// retransmit more than the lost SEND (an ACK later than the 4 ms timeout): at least one.
func TestInlineSendRetransmit(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 10 // 4 ms
	cfg.KeepAlive = NoTimeout
	cli, srv := newPair(t, &pairOpts{cfg: cfg, cliF: Faults{Filter: dropNth(roce.RCSendOnly, 6)}})
	smr, _ := cli.reg(t, 10, allAccess)
	rmr, _ := srv.reg(t, 10, allAccess)
	for i := range 8 {
		if i == 4 {
			time.Sleep(10 * time.Millisecond) // past every ACK deadline: the goroutine parks without one
		}
		postRecv(t, srv.qp, &rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(0, 10)}})
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
		if c := wait(t, cli.scq, 1)[0]; c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, c)
		}
		if c := wait(t, srv.rcq, 1)[0]; c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("recv %d: %+v", i, c)
		}
	}
	n := cli.qp.Counters().Retransmits.Load()
	if n == 0 {
		t.Fatal("no retransmission: the lost SEND completed without one")
	}
	if n := cli.ep.InlineSends.Load(); n == 0 {
		t.Fatal("no SEND went out from the posting goroutine")
	}
	t.Logf("inline sends: %d of 8; retransmissions %d (1: the lost SEND)", cli.ep.InlineSends.Load(), n)
}

// TestInlineReadResponses: a READ posted while the connection's goroutine is parked goes
// out from the posting goroutine (its request carries no payload, whatever the READ's
// length), and the responder's receive goroutine sends the responses itself at the end of
// its batch (Endpoint.InlineResponses) while the responder's connection goroutine is
// parked; the rest of a READ longer than one batch is streamed by that goroutine, and a
// lost response is still asked again at the requester's ACK timeout.
func TestInlineReadResponses(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 8 // 1 ms
	cfg.KeepAlive = NoTimeout
	cli, srv := newPair(t, &pairOpts{cfg: cfg, srvF: Faults{Filter: dropNth(roce.RCReadResponseLast, 3)}})
	const big = 1 << 20
	rmr, rbuf := srv.reg(t, big+64, allAccess)
	fill(rbuf, 3)
	lmr, lbuf := cli.reg(t, big, allAccess)
	for i, n := range []int{4096, 4096, 8192, 4096, 4096, 2048, big, 4096} { // each > inlineMax

		clear(lbuf)
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{lmr.SGE(0, n)}, RemoteAddr: rmr.Addr() + uint64(i), RKey: rmr.RKey()})
		if c := wait(t, cli.scq, 1)[0]; c.Status != 0 || c.WRID != uint64(i) || int(c.ByteLen) != n {
			t.Fatalf("READ %d: %+v", i, c)
		}
		if !bytes.Equal(lbuf[:n], rbuf[i:i+n]) {
			t.Fatalf("READ %d of %d bytes: wrong data", i, n)
		}
	}
	if n := cli.qp.Counters().Retransmits.Load(); n == 0 {
		t.Fatal("the lost READ response was not asked again")
	}
	if n := cli.ep.InlineSends.Load(); n == 0 {
		t.Fatal("no READ request went out from the posting goroutine")
	}
	if n := srv.ep.InlineResponses.Load(); n == 0 {
		t.Fatal("no READ response went out from the receive goroutine")
	}
	t.Logf("inline READ requests: %d, inline response batches: %d (8 READs, one response lost and asked again)",
		cli.ep.InlineSends.Load(), srv.ep.InlineResponses.Load())
}

// TestReadDepthUnblocks: with MaxRdAtomic 2, forty multi-packet READs posted at once, then
// a fenced WRITE: the requester's fill stops at the depth and at the fence, and goes on
// when a READ completes (the packets of a READ response before its last unblock nothing
// and wake nobody: completer's blockState); every READ completes in order with its data,
// and the WRITE after the last READ.
func TestReadDepthUnblocks(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRdAtomic = 2
	cfg.Timeout = 20 // ~4.3 s: a fill left blocked would wait that long for its ACK timer, 20 times
	cli, srv := newPair(t, &pairOpts{cfg: cfg})
	const n, size = 40, 3000 // three packets at MTU 1024
	rmr, rbuf := srv.reg(t, n*size, allAccess)
	fill(rbuf, 9)
	lmr, lbuf := cli.reg(t, n*size, allAccess)
	for i := range n {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{lmr.SGE(i*size, size)}, RemoteAddr: rmr.Addr() + uint64(i*size), RKey: rmr.RKey()})
	}
	post(t, cli.qp, &rnic.SendWR{WRID: n, Opcode: rnic.OpWrite, Flags: rnic.Signaled | rnic.Fence,
		SGL: []rnic.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	for i, c := range wait(t, cli.scq, n+1) {
		if c.Status != 0 || c.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if !bytes.Equal(lbuf[8:], rbuf[8:]) || !bytes.Equal(rbuf[:8], lbuf[:8]) {
		t.Fatal("READ data differs from the responder's region")
	}
	// Nothing is lost on this link: a retransmission is a fill that stayed blocked until
	// its ACK timeout.
	if r := cli.qp.Counters().Retransmits.Load(); r != 0 {
		t.Fatalf("%d retransmissions on a lossless link", r)
	}
}
