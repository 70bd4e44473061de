package rocev2

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

func TestUD(t *testing.T) {
	cli, srv := newPair(t, &pairOpts{noConnect: true})
	const qkey = 0x11111111
	cu, err := cli.ep.CreateUD(cli.qp, qkey)
	if err != nil {
		t.Fatal(err)
	}
	su, err := srv.ep.CreateUD(srv.qp, qkey)
	if err != nil {
		t.Fatal(err)
	}
	smr, sbuf := cli.reg(t, 4096, allAccess)
	rmr, rbuf := srv.reg(t, 4096, allAccess)
	fill(sbuf, 3)
	ah := AH{Addr: srvAddr, QPN: srv.qp.Num(), QKey: qkey}
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 4096)}})
	if err := cu.PostSend(ah, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSendImm, Imm: 99, Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, 1000)}}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, cli.scq, 1)[0]; c.Status != 0 {
		t.Fatalf("%+v", c)
	}
	c := wait(t, srv.rcq, 1)[0]
	if c.Status != 0 || c.ByteLen != GRHLen+1000 || c.Imm != 99 || c.Flags&rnic.WCWithImm == 0 {
		t.Fatalf("%+v", c)
	}
	if !bytes.Equal(rbuf[GRHLen:GRHLen+1000], sbuf[:1000]) {
		t.Fatal("payload")
	}
	// GRH: the IPv4 header in bytes 20-39, source 10.0.0.1, destination 10.0.0.2.
	if rbuf[20] != 0x45 || netip.AddrFrom4([4]byte(rbuf[32:36])) != cliAddr.Addr() || netip.AddrFrom4([4]byte(rbuf[36:40])) != srvAddr.Addr() {
		t.Fatalf("GRH % x", rbuf[:40])
	}
	if from, qpn := su.LastSource(); from != cliAddr || qpn != cli.qp.Num() {
		t.Fatalf("source %v %d", from, qpn)
	}
	// Wrong Q_Key: dropped and counted; a controlled Q_Key (high bit) uses the QP's own.
	postRecv(t, srv.qp, &rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{rmr.SGE(0, 4096)}})
	_ = cu.PostSend(AH{Addr: srvAddr, QPN: srv.qp.Num(), QKey: 0x22}, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 10)}})
	_ = cu.PostSend(AH{Addr: srvAddr, QPN: srv.qp.Num(), QKey: 0x80000000}, &rnic.SendWR{WRID: 3, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 20)}})
	wait(t, cli.scq, 2)
	if c := wait(t, srv.rcq, 1)[0]; c.WRID != 2 || c.ByteLen != GRHLen+20 {
		t.Fatalf("%+v", c)
	}
	deadline := time.Now().Add(2 * time.Second)
	for su.QKeyViolations.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if su.QKeyViolations.Load() != 1 {
		t.Fatal("Q_Key violation not counted")
	}
	// Larger than the path MTU: local length error.
	_ = cu.PostSend(ah, &rnic.SendWR{WRID: 4, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 2000)}})
	if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusLocLenErr {
		t.Fatalf("%+v", c)
	}
}
