package rnic_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The verbs objects of a device and a SEND between two QPs. The QPs are connected here by
// a RoCEv2 transport over an in-memory network with ibv_modify_qp-style attributes; real
// programs connect through rnic/cm.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	net := rocev2.NewMemNet()
	type side struct {
		dev *rnic.Device
		cq  *rnic.CQ
		qp  *rnic.QP
		mr  *rnic.MR
		buf []byte
		ep  *rocev2.Endpoint
	}
	open := func(ip string) *side {
		s := &side{buf: make([]byte, 64)}
		s.dev, _ = rnic.Open(rnic.Config{})
		pd, _ := s.dev.AllocPD()
		s.cq, _ = s.dev.CreateCQ(16)
		s.qp, _ = s.dev.CreateQP(pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq})
		s.mr, _ = pd.RegMR(s.buf, rnic.AccessLocalWrite)
		link, _ := net.NewLink(netip.MustParseAddrPort(ip+":4791"), rocev2.Faults{})
		s.ep = rocev2.NewEndpoint(s.dev, link, nil)
		return s
	}
	a, b := open("10.0.0.1"), open("10.0.0.2")
	defer a.dev.Close()
	defer b.dev.Close()
	// b posts a receive before the connection exists; a sends into it
	if err := b.qp.PostRecv(&rnic.RecvWR{WRID: 7, SGL: []rnic.SGE{b.mr.SGE(0, len(b.buf))}}); err != nil {
		log.Fatal(err)
	}
	_, err := a.ep.Connect(a.qp, rocev2.ConnAttr{Type: rocev2.RC, Remote: b.ep.LocalAddr(), RemoteQPN: b.qp.Num(), SendPSN: 100, RecvPSN: 200})
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.ep.Connect(b.qp, rocev2.ConnAttr{Type: rocev2.RC, Remote: a.ep.LocalAddr(), RemoteQPN: a.qp.Num(), SendPSN: 200, RecvPSN: 100})
	if err != nil {
		log.Fatal(err)
	}
	n := copy(a.buf, "ping")
	if err := a.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{a.mr.SGE(0, n)}}); err != nil {
		log.Fatal(err)
	}
	var wc [1]rnic.Completion
	if _, err := b.cq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(wc[0].Opcode, wc[0].WRID, wc[0].Status, string(b.buf[:wc[0].ByteLen]))
	if _, err := a.cq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(wc[0].Opcode, wc[0].WRID, wc[0].Status)
	// Output:
	// Recv 7 Success ping
	// Send 1 Success
}
