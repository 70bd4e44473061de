package rocev2

import (
	"bytes"
	"testing"

	"github.com/softrnic/softrnic/rnic"
)

func TestLocalOpsOverRoCE(t *testing.T) {
	cli, srv := newPair(t, nil)
	smr, sbuf := cli.reg(t, 4096, allAccess)
	fill(sbuf, 8)
	// The server fast-registers a region, then the client WRITEs through its new key.
	frmr, err := srv.pd.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 4096)
	post(t, srv.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpRegMR, Flags: rnic.Signaled,
		Reg: rnic.RegInfo{MR: frmr, Buf: mem, IOVA: 0x10000, Access: rnic.AccessLocalWrite | rnic.AccessRemoteWrite, Key: 7}})
	if c := wait(t, srv.scq, 1)[0]; c.Status != 0 || c.Opcode != rnic.WCRegMR {
		t.Fatalf("reg %+v", c)
	}
	post(t, cli.qp, &rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, Flags: rnic.Signaled | rnic.Fence, SGL: []rnic.SGE{smr.SGE(0, 4096)},
		RemoteAddr: 0x10000, RKey: frmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("write %+v", c)
	}
	// Send a message so the memory check is ordered after the WRITE.
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 5})
	post(t, cli.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled})
	wait(t, srv.rcq, 1)
	wait(t, cli.scq, 1)
	if !bytes.Equal(mem, sbuf) {
		t.Fatal("fast-registered region not written")
	}
	// Local invalidate, then the same WRITE is refused with a remote access error.
	post(t, srv.qp, &rnic.SendWR{WRID: 2, Opcode: rnic.OpLocalInv, InvalidateSTag: frmr.RKey(), Flags: rnic.Signaled | rnic.LocalFence})
	if c := wait(t, srv.scq, 1)[0]; c.Status != 0 || c.Opcode != rnic.WCLocalInv {
		t.Fatalf("inv %+v", c)
	}
	post(t, cli.qp, &rnic.SendWR{WRID: 3, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 16)},
		RemoteAddr: 0x10000, RKey: frmr.RKey()})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusRemAccessErr {
		t.Fatalf("write after invalidate %+v", c)
	}
}

func TestSRQ(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{noConnect: true})
	srq, err := srv.dev.CreateSRQ(srv.pd, rnic.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := srv.dev.CreateQP(srv.pd, rnic.QPAttr{SendCQ: srv.scq, RecvCQ: srv.rcq, SRQ: srq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qp.Destroy() })
	srv.qp = qp
	connect(t, cli, srv, &pairOpts{})
	smr, sbuf := cli.reg(t, 3000, allAccess)
	rmr, rbuf := srv.reg(t, 3000*4, allAccess)
	fill(sbuf, 2)
	for i := range 4 {
		if err := srq.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(i*3000, 3000)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, SGL: []rnic.SGE{smr.SGE(0, 3000)}})
	}
	for i, c := range wait(t, srv.rcq, 4) {
		if c.Status != 0 || !c.SRQ || c.WRID != uint64(i) || !bytes.Equal(rbuf[i*3000:(i+1)*3000], sbuf) {
			t.Fatalf("%d: %+v", i, c)
		}
	}
}

// TestOutstandingReadLimit: with ORD = IRD = 2, twenty 64 KiB READs all
// succeed — the requester never has more than 2 outstanding (a third would
// be answered with NAK invalid request by the responder).
func TestOutstandingReadLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRdAtomic, cfg.MaxDestRd = 2, 2
	cli, srv := newPair(t, &pairOpts{cfg: cfg})
	const n = 64 << 10
	lmr, lbuf := cli.reg(t, 20*n, allAccess)
	rmr, rbuf := srv.reg(t, n, allAccess)
	fill(rbuf, 6)
	for i := range 20 {
		post(t, cli.qp, &rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{lmr.SGE(i*n, n)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	}
	for i, c := range wait(t, cli.scq, 20) {
		if c.Status != 0 || c.WRID != uint64(i) || !bytes.Equal(lbuf[i*n:(i+1)*n], rbuf) {
			t.Fatalf("%d: %+v", i, c)
		}
	}
}
