package rocev2_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// Two RoCEv2 endpoints on one IP — one on UDP 4791, one on another port, as two processes
// on a host would be — connect through the IB CM (REQ/REP/RTU, RDMA-CM service IDs) and
// the active side SENDs its greeting. An in-memory network stands in for UDP sockets
// (rocev2.ListenUDP gives real ones).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mem := rocev2.NewMemNet()
	type side struct {
		ep  *rocev2.Endpoint
		qp  *rnic.QP
		cq  *rnic.CQ
		mr  *rnic.MR
		buf []byte
	}
	open := func(addr string) *side {
		s := &side{buf: make([]byte, 64)}
		dev, _ := rnic.Open(rnic.Config{})
		pd, _ := dev.AllocPD()
		s.cq, _ = dev.CreateCQ(16)
		s.qp, _ = dev.CreateQP(pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq})
		s.mr, _ = pd.RegMR(s.buf, rnic.AccessLocalWrite)
		link, err := mem.NewLink(netip.MustParseAddrPort(addr), rocev2.Faults{})
		if err != nil {
			log.Fatal(err)
		}
		s.ep = rocev2.NewEndpoint(dev, link, nil) // nil: the defaults (a zero Config is the same)
		return s
	}
	srv, cli := open("10.0.0.1:4791"), open("10.0.0.1:4792")
	defer srv.ep.Close()
	defer cli.ep.Close()

	ln, err := rocev2.Listen(srv.ep, ":7471", nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = srv.qp.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{srv.mr.SGE(0, 64)}})
	accepted := make(chan rocev2.Addr, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		if _, err := req.Accept(srv.qp, rocev2.ConnParam{}); err == nil {
			accepted <- req.RemoteAddr()
		}
	}()
	peer, _ := rocev2.ParseAddr("10.0.0.1:7471") // no "@udpport": the server is on 4791
	conn, err := rocev2.DialAddr(ctx, cli.ep, cli.qp, peer, nil, rocev2.ConnParam{})
	if err != nil {
		log.Fatal(err)
	}
	from := <-accepted
	n := copy(cli.buf, "hello")
	_ = cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{cli.mr.SGE(0, n)}})
	var wc [1]rnic.Completion
	if _, err := srv.cq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println("server saw the client at UDP port", from.UDPPort, "and received", string(srv.buf[:wc[0].ByteLen]))
	fmt.Println("client connected to", conn.RemoteAddr().LinkAddr())
	// Output:
	// server saw the client at UDP port 4792 and received hello
	// client connected to 10.0.0.1:4791
}
