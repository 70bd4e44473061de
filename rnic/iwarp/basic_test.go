package iwarp

import (
	"bytes"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/softrnic/softrnic/rnic"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func TestSendWriteRead(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, nil)
	const n = 3<<20 + 17
	smr, sbuf := srv.reg(t, n, allAccess)
	cmr, cbuf := cli.reg(t, n, allAccess)
	fill(cbuf, 1)

	// SEND: client → server.
	rmr, rbuf := srv.reg(t, 64, allAccess)
	if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 7, SGL: []rnic.SGE{rmr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 40)}}); err != nil {
		t.Fatal(err)
	}
	expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
	c := wait(t, srv.rcq)
	expect(t, c, rnic.WCRecv, rnic.StatusSuccess)
	if c.WRID != 7 || c.ByteLen != 40 || !bytes.Equal(rbuf[:40], cbuf[:40]) {
		t.Fatalf("recv %+v", c)
	}

	// WRITE client → server.
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
		SGL: []rnic.SGE{cmr.SGE(0, n)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
		t.Fatal(err)
	}
	expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
	settle(t, cli, srv)
	// READ server ← client into a second half... read back client's buffer into server's via server READ.
	clear(cbuf[:0])
	rb, rbb := srv.reg(t, n, allAccess)
	if err := srv.qp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpRead, Flags: rnic.Signaled,
		SGL: []rnic.SGE{rb.SGE(0, n)}, RemoteAddr: cmr.Addr(), RKey: cmr.RKey()}); err != nil {
		t.Fatal(err)
	}
	c = wait(t, srv.scq)
	expect(t, c, rnic.WCRead, rnic.StatusSuccess)
	if !bytes.Equal(rbb, cbuf) || !bytes.Equal(sbuf, cbuf) {
		t.Fatal("data mismatch")
	}
}

func TestInterfaceAddress(t *testing.T) {
	d, _ := rnic.Open(rnic.Config{Interface: "lo"})
	defer d.Close()
	ln, err := Listen(d, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if h, _, _ := net.SplitHostPort(ln.Addr().String()); h != "127.0.0.1" {
		t.Fatalf("listening on %v", ln.Addr())
	}
}
