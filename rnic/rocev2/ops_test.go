package rocev2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

func post(t testing.TB, qp *rnic.QP, wr *rnic.SendWR) {
	t.Helper()
	if err := qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, qp *rnic.QP, wr *rnic.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wr); err != nil {
		t.Fatal(err)
	}
}

func TestSendSizes(t *testing.T) {
	for _, mtu := range []roce.MTU{roce.MTU256, roce.MTU1024, roce.MTU4096} {
		m := mtu.Bytes()
		for _, n := range []int{0, 1, m - 1, m, m + 1, 3*m + 5, 100000} {
			t.Run(fmt.Sprintf("mtu%d/%d", m, n), func(t *testing.T) {
				cli, srv := newPair(t, &pairOpts{mtu: mtu})
				smr, sbuf := cli.reg(t, n+8, allAccess)
				rmr, rbuf := srv.reg(t, n+8, allAccess)
				fill(sbuf, 3)
				postRecv(t, srv.qp, &rnic.RecvWR{WRID: 9, SGL: []rnic.SGE{rmr.SGE(0, n+8)}})
				post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled | rnic.Solicited,
					SGL: []rnic.SGE{smr.SGE(0, n)}})
				sc := wait(t, cli.scq, 1)[0]
				rc := wait(t, srv.rcq, 1)[0]
				if sc.Status != rnic.StatusSuccess || sc.WRID != 1 || sc.Opcode != rnic.WCSend {
					t.Fatalf("send completion %+v", sc)
				}
				if rc.Status != rnic.StatusSuccess || rc.WRID != 9 || rc.ByteLen != uint32(n) || rc.Flags&rnic.WCSolicited == 0 {
					t.Fatalf("recv completion %+v", rc)
				}
				if !bytes.Equal(rbuf[:n], sbuf[:n]) {
					t.Fatal("data mismatch")
				}
			})
		}
	}
}

func TestMultiSGEAndImmInv(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, sbuf := cli.reg(t, 8000, allAccess)
	rmr, rbuf := srv.reg(t, 9000, allAccess)
	fill(sbuf, 1)
	// Receive into three SGEs; send from two.
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 100), rmr.SGE(1000, 3000), rmr.SGE(5000, 4000)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSendImm, Imm: 0xdeadbeef, Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, 2500), smr.SGE(4000, 2500)}})
	rc := wait(t, srv.rcq, 1)[0]
	if rc.Status != 0 || rc.ByteLen != 5000 || rc.Flags&rnic.WCWithImm == 0 || rc.Imm != 0xdeadbeef {
		t.Fatalf("recv %+v", rc)
	}
	want := append(append([]byte{}, sbuf[:2500]...), sbuf[4000:6500]...)
	got := append(append(append([]byte{}, rbuf[:100]...), rbuf[1000:4000]...), rbuf[5000:6900]...)
	if !bytes.Equal(got, want) {
		t.Fatal("scatter/gather mismatch")
	}
	wait(t, cli.scq, 1)

	// Send with Invalidate of a remote MR.
	inv, _ := srv.reg(t, 64, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{rmr.SGE(0, 64)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSendInv, InvalidateSTag: inv.RKey(), Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, 10)}})
	rc = wait(t, srv.rcq, 1)[0]
	if rc.Status != 0 || rc.Flags&rnic.WCWithInv == 0 || rc.InvalidatedSTag != inv.RKey() || inv.Valid() {
		t.Fatalf("send-inv %+v valid=%v", rc, inv.Valid())
	}
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("send-inv completion %+v", c)
	}
}

func TestWriteReadAtomics(t *testing.T) {
	for _, n := range []int{0, 1, 1023, 1024, 1025, 65536 + 3, 1 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cli, srv := newPair(t, nil)
			smr, sbuf := cli.reg(t, n, allAccess)
			dmr, dbuf := cli.reg(t, n, allAccess)
			rmr, rbuf := srv.reg(t, n, allAccess)
			fill(sbuf, 5)
			post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
				SGL: []rnic.SGE{smr.SGE(0, n)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
			post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpRead, Flags: rnic.Signaled,
				SGL: []rnic.SGE{dmr.SGE(0, n)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
			cs := wait(t, cli.scq, 2)
			if cs[0].Status != 0 || cs[0].Opcode != rnic.WCWrite || cs[1].Status != 0 || cs[1].Opcode != rnic.WCRead ||
				cs[1].ByteLen != uint32(n) {
				t.Fatalf("completions %+v", cs)
			}
			if !bytes.Equal(rbuf, sbuf) || !bytes.Equal(dbuf, sbuf) {
				t.Fatal("data mismatch")
			}
		})
	}
	cli, srv := newPair(t, nil)
	rmr, rbuf := srv.reg(t, 64, allAccess)
	lmr, lbuf := cli.reg(t, 64, allAccess)
	binary.NativeEndian.PutUint64(rbuf[8:], 100)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpAtomicFetchAdd, Compare: 5, Flags: rnic.Signaled,
		SGL: []rnic.SGE{lmr.SGE(0, 8)}, RemoteAddr: rmr.Addr() + 8, RKey: rmr.RKey()})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpAtomicCmpSwap, Compare: 105, Swap: 7, Flags: rnic.Signaled,
		SGL: []rnic.SGE{lmr.SGE(8, 8)}, RemoteAddr: rmr.Addr() + 8, RKey: rmr.RKey()})
	post(t, cli.qp, &rnic.SendWR{WRID: 3, Opcode: rnic.OpAtomicCmpSwap, Compare: 105, Swap: 9, Flags: rnic.Signaled,
		SGL: []rnic.SGE{lmr.SGE(16, 8)}, RemoteAddr: rmr.Addr() + 8, RKey: rmr.RKey()})
	cs := wait(t, cli.scq, 3)
	for i, c := range cs {
		if c.Status != 0 || c.WRID != uint64(i+1) {
			t.Fatalf("atomic completion %d: %+v", i, c)
		}
	}
	if cs[0].Opcode != rnic.WCFetchAdd || cs[1].Opcode != rnic.WCCmpSwap {
		t.Fatalf("opcodes %+v", cs)
	}
	got := []uint64{binary.NativeEndian.Uint64(lbuf), binary.NativeEndian.Uint64(lbuf[8:]),
		binary.NativeEndian.Uint64(lbuf[16:]), binary.NativeEndian.Uint64(rbuf[8:])}
	if fmt.Sprint(got) != fmt.Sprint([]uint64{100, 105, 7, 7}) {
		t.Fatalf("atomic results %v", got)
	}

	// WRITE with immediate consumes a receive and reports the length.
	smr, _ := cli.reg(t, 3000, allAccess)
	wmr, _ := srv.reg(t, 3000, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 77})
	post(t, cli.qp, &rnic.SendWR{WRID: 4, Opcode: rnic.OpWriteImm, Imm: 42, SGL: []rnic.SGE{smr.SGE(0, 3000)},
		RemoteAddr: wmr.Addr(), RKey: wmr.RKey(), Flags: rnic.Signaled})
	rc := wait(t, srv.rcq, 1)[0]
	if rc.Status != 0 || rc.Opcode != rnic.WCRecvRDMAWithImm || rc.Imm != 42 || rc.ByteLen != 3000 || rc.WRID != 77 {
		t.Fatalf("write-imm recv %+v", rc)
	}
	wait(t, cli.scq, 1)
}

func TestNAKRemoteAccess(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, _ := cli.reg(t, 100, allAccess)
	ro, _ := srv.reg(t, 100, rnic.AccessLocalWrite|rnic.AccessRemoteRead)
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, 100)}, RemoteAddr: ro.Addr(), RKey: ro.RKey()})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 1)}})
	cs := wait(t, cli.scq, 2)
	if cs[0].Status != rnic.StatusRemAccessErr || cs[1].Status != rnic.StatusWRFlushErr {
		t.Fatalf("completions %+v", cs)
	}
	<-srv.qp.Done()
	var ne *NAKError
	if !errors.As(srv.qp.Err(), &ne) || ne.Code != roce.NAKRemoteAccessError || !ne.Sent {
		t.Fatalf("responder error %v", srv.qp.Err())
	}
	if !errors.As(cli.qp.Err(), &ne) || ne.Sent {
		t.Fatalf("requester error %v", cli.qp.Err())
	}
}

func TestNAKReadAccessAndBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   rnic.Opcode
		off  uint64
		acc  rnic.Access
		want rnic.Status
	}{
		{"read-rights", rnic.OpRead, 0, rnic.AccessLocalWrite | rnic.AccessRemoteWrite, rnic.StatusRemAccessErr},
		{"read-bounds", rnic.OpRead, 64, allAccess, rnic.StatusRemAccessErr},
		{"atomic-rights", rnic.OpAtomicFetchAdd, 0, rnic.AccessLocalWrite | rnic.AccessRemoteRead, rnic.StatusRemAccessErr},
		{"atomic-misaligned", rnic.OpAtomicFetchAdd, 4, allAccess, rnic.StatusRemInvReqErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := newPair(t, nil)
			lmr, _ := cli.reg(t, 128, allAccess)
			rmr, _ := srv.reg(t, 128, tc.acc)
			n := 128
			if tc.op != rnic.OpRead {
				n = 8
			}
			post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: tc.op, Flags: rnic.Signaled, SGL: []rnic.SGE{lmr.SGE(0, n)},
				RemoteAddr: rmr.Addr() + tc.off, RKey: rmr.RKey()})
			if c := wait(t, cli.scq, 1)[0]; c.Status != tc.want {
				t.Fatalf("status %v, want %v", c.Status, tc.want)
			}
		})
	}
}

func TestNAKInvalidRequestTooLong(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, _ := cli.reg(t, 5000, allAccess)
	rmr, _ := srv.reg(t, 100, allAccess)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 5, SGL: []rnic.SGE{rmr.SGE(0, 100)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 5000)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusRemInvReqErr {
		t.Fatalf("requester %+v", c)
	}
	if c := wait(t, srv.rcq, 1)[0]; c.Status != rnic.StatusLocLenErr || c.WRID != 5 {
		t.Fatalf("responder %+v", c)
	}
}

func TestNAKRemoteOp(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, _ := cli.reg(t, 50, allAccess)
	// A receive whose SGE names a region without local write: the responder
	// cannot place the data (rxe: remote operational error).
	bad, _ := srv.reg(t, 100, rnic.AccessRemoteRead)
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 5, SGL: []rnic.SGE{bad.SGE(0, 100)}})
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 50)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusRemOpErr {
		t.Fatalf("requester %+v", c)
	}
	if c := wait(t, srv.rcq, 1)[0]; c.Status != rnic.StatusLocProtErr {
		t.Fatalf("responder %+v", c)
	}
}
