package cm_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
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
