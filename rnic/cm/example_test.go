package cm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/link/netdev"
	"github.com/softrnic/softrnic/link/netstack"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2/xdp"
)

// A server advertises a region in its accept private data; the client connects and writes
// into it one-sided. Swap "iwarp" for "rocev2" and nothing else changes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// server: a device, a region and a listener
	sdev, _ := rnic.Open(rnic.Config{})
	defer sdev.Close()
	spd, _ := sdev.AllocPD()
	scq, _ := sdev.CreateCQ(16)
	sqp, _ := sdev.CreateQP(spd, rnic.QPAttr{SendCQ: scq, RecvCQ: scq})
	region := make([]byte, 4096)
	smr, _ := spd.RegMR(region, rnic.AccessLocalWrite|rnic.AccessRemoteWrite)
	st, err := cm.Open(sdev, "iwarp", "127.0.0.1", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ln, err := st.Listen(":0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		adv := smr.RemoteBuffer(0, len(region)).Append(nil)
		_, _ = req.Accept(sqp, cm.Param{PrivateData: adv})
	}()

	// client: connect, read the advertisement, write
	cdev, _ := rnic.Open(rnic.Config{})
	defer cdev.Close()
	cpd, _ := cdev.AllocPD()
	ccq, _ := cdev.CreateCQ(16)
	cqp, _ := cdev.CreateQP(cpd, rnic.QPAttr{SendCQ: ccq, RecvCQ: ccq})
	msg := []byte("hello")
	cmr, _ := cpd.RegMR(msg, 0)
	ct, _ := cm.Open(cdev, "iwarp", "127.0.0.1", nil)
	defer ct.Close()
	conn, err := ct.Dial(ctx, cqp, ln.Addr().String(), cm.Param{})
	if err != nil {
		log.Fatal(err)
	}
	rb, _ := rnic.ParseRemoteBuffer(conn.PrivateData())
	_ = cqp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled,
		SGL: []rnic.SGE{cmr.SGE(0, len(msg))}, RemoteAddr: rb.Addr, RKey: rb.RKey})
	var wc [1]rnic.Completion
	if _, err := ccq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	_ = conn.Disconnect(ctx)
	<-sqp.Done()
	fmt.Println(wc[0].Status, string(region[:5]))
	// Output: Success hello
}

// One AF_XDP port on eth0 carries both networks: the RoCEv2 link and the user-space TCP
// stack for iWARP share its XDP program and UMEM; everything else on eth0 (ARP, ssh …)
// still goes to the kernel. Needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF).
func Example_afxdp() {
	addr := netip.MustParseAddr("192.0.2.10") // one of eth0's addresses
	in, err := netdev.Inspect("eth0")
	if err != nil {
		log.Fatal(err)
	}
	po := netdev.Choose(in, netdev.Prefs{}).Options("eth0") // zero-copy, mode … as eth0 allows
	po.Addr = addr
	port, err := afxdp.Open(po)
	if err != nil {
		log.Fatal(err)
	}
	defer port.Close()
	stack, err := netstack.New(port, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer stack.Close()
	link, err := xdp.New(xdp.Options{Port: port, Addr: netip.AddrPortFrom(addr, 4791)})
	if err != nil {
		log.Fatal(err)
	}

	dev, _ := rnic.Open(rnic.Config{LocalAddr: addr.String()})
	defer dev.Close()
	iw, err := cm.Open(dev, "iwarp", addr.String(), &cm.Options{TCP: stack})
	if err != nil {
		log.Fatal(err)
	}
	defer iw.Close()
	roce, err := cm.Open(dev, "rocev2", "", &cm.Options{Link: link}) // closes the link
	if err != nil {
		log.Fatal(err)
	}
	defer roce.Close()
	// iw.Listen, iw.Dial, roce.Listen, roce.Dial as over the kernel
}
