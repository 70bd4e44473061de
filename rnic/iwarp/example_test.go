package iwarp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// An iWARP connection on loopback TCP through this package's own connection manager
// (MPA Request/Reply, RFC 5044 §7.1; rnic/cm offers the same over either network) and one
// RDMA READ of the responder's region, advertised in the MPA Reply's private data.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, _ := rnic.Open(rnic.Config{})
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	newQP := func() *rnic.QP {
		qp, _ := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
		return qp
	}

	// responder: a region to read and a listener
	src := []byte("data placed directly")
	srcMR, _ := pd.RegMR(src, rnic.AccessRemoteRead)
	ln, err := iwarp.Listen(dev, "127.0.0.1:0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		adv := srcMR.RemoteBuffer(0, len(src)).Append(nil)
		_, _ = req.Accept(newQP(), iwarp.ConnParam{PrivateData: adv})
	}()

	// initiator: connect (MPA rev 2, CRC, peer-to-peer) and read
	qp := newQP()
	conn, err := iwarp.Dial(ctx, qp, ln.Addr().String(), nil, iwarp.ConnParam{})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	rb, _ := rnic.ParseRemoteBuffer(conn.PeerPrivateData())
	dst := make([]byte, rb.Len)
	dstMR, _ := pd.RegMR(dst, rnic.AccessLocalWrite)
	err = qp.PostSend(&rnic.SendWR{Opcode: rnic.OpRead, Flags: rnic.Signaled,
		SGL: []rnic.SGE{dstMR.SGE(0, len(dst))}, RemoteAddr: rb.Addr, RKey: rb.RKey})
	if err != nil {
		log.Fatal(err)
	}
	var wc [1]rnic.Completion
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(wc[0].Opcode, wc[0].Status, conn.Params().CRC, string(dst))
	// Output: Read Success true data placed directly
}
