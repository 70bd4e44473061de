// Command remotemem is a two-process example of one-sided RDMA with softrnic: a server
// registers a region and advertises it ({addr, rkey, len}, rnic.RemoteBuffer) in its
// accept private data; a client connects, then writes the region and reads it back with
// RDMA WRITE and RDMA READ — the server's CPU takes no part in either. The same program
// runs over iWARP or RoCEv2; -net picks which.
//
//	go run ./examples/remotemem -serve                 # terminal 1
//	go run ./examples/remotemem -connect 127.0.0.1     # terminal 2
//	go run ./examples/remotemem -net rocev2 -serve
//	go run ./examples/remotemem -net rocev2 -connect 127.0.0.1
//
// RoCEv2 note: the server's RoCE link takes UDP 4791 (what kernel peers use); a client on
// the same IP takes another UDP port (-udp, default: a free one) and the server replies to
// it there.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

func main() {
	network := flag.String("net", "iwarp", `network: "iwarp" or "rocev2"`)
	serve := flag.Bool("serve", false, "serve a region")
	connect := flag.String("connect", "", "connect to the server at this IP")
	local := flag.String("local", "127.0.0.1", "local IP")
	port := flag.Int("port", 7471, "service port (TCP for iWARP, RDMA-CM for RoCEv2)")
	udp := flag.Int("udp", -1, "RoCEv2: local UDP port (default 4791 for -serve, a free port for -connect)")
	peerUDP := flag.Int("peer-udp", 0, "RoCEv2: the server's UDP port (default 4791)")
	size := flag.Int("size", 1<<20, "region size in bytes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dev, err := rnic.Open(rnic.Config{LocalAddr: *local})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	addr := *local
	if *network == cm.RoCEv2 {
		switch {
		case *udp >= 0:
			addr = net.JoinHostPort(*local, strconv.Itoa(*udp))
		case !*serve:
			addr = net.JoinHostPort(*local, "0")
		}
	}
	tr, err := cm.Open(dev, *network, addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	switch {
	case *serve:
		err = runServer(ctx, tr, *port, *size)
	case *connect != "":
		target := net.JoinHostPort(*connect, strconv.Itoa(*port))
		if *peerUDP != 0 {
			target += "@" + strconv.Itoa(*peerUDP)
		}
		err = runClient(ctx, tr, target)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// node is a device's protection domain, CQ and a fresh QP.
type node struct {
	pd *rnic.PD
	cq *rnic.CQ
}

func newNode(dev *rnic.Device) (*node, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		return nil, err
	}
	return &node{pd: pd, cq: cq}, nil
}

func (n *node) qp(dev *rnic.Device) (*rnic.QP, error) {
	return dev.CreateQP(n.pd, rnic.QPAttr{SendCQ: n.cq, RecvCQ: n.cq})
}

// runServer serves one region to one client at a time until ctx ends. It posts no work:
// clients access the region one-sided.
func runServer(ctx context.Context, tr *cm.Transport, port, size int) error {
	dev := tr.Device()
	n, err := newNode(dev)
	if err != nil {
		return err
	}
	region := make([]byte, size)
	mr, err := n.pd.RegMR(region, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	if err != nil {
		return err
	}
	ln, err := tr.Listen(":" + strconv.Itoa(port))
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("serving %d bytes over %s on %s\n", size, tr.Network(), ln.Addr())
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		qp, err := n.qp(dev)
		if err != nil {
			_ = req.Reject(nil)
			return err
		}
		conn, err := req.Accept(qp, cm.Param{PrivateData: mr.RemoteBuffer(0, size).Append(nil)})
		if err != nil {
			log.Printf("accept: %v", err)
			_ = qp.Destroy()
			continue
		}
		fmt.Printf("client %s connected\n", conn.RemoteAddr())
		select {
		case <-conn.Done():
		case <-ctx.Done():
			_ = conn.Close()
		}
		fmt.Printf("client %s gone (%v)\n", conn.RemoteAddr(), conn.Err())
		_ = qp.Destroy()
	}
}

// runClient connects, writes a pattern into the whole region, reads it back and checks it.
func runClient(ctx context.Context, tr *cm.Transport, target string) error {
	dev := tr.Device()
	n, err := newNode(dev)
	if err != nil {
		return err
	}
	qp, err := n.qp(dev)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := tr.Dial(dctx, qp, target, cm.Param{})
	if err != nil {
		return err
	}
	dialed := time.Now()
	defer conn.Close()
	rb, err := rnic.ParseRemoteBuffer(conn.PrivateData())
	if err != nil {
		return err
	}
	out := make([]byte, rb.Len)
	for i := range out {
		out[i] = byte(i*7 + 1)
	}
	in := make([]byte, rb.Len)
	omr, err := n.pd.RegMR(out, 0)
	if err != nil {
		return err
	}
	imr, err := n.pd.RegMR(in, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}
	// one-sided: WRITE the region, then READ it back (the READ sees the WRITE: RFC 5040
	// §5.5 / IBTA §9.5 ordering on one connection)
	if err := post(ctx, qp, n.cq, &rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{omr.SGE(0, len(out))}, RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	first := time.Since(dialed)
	start := time.Now()
	if err := post(ctx, qp, n.cq, &rnic.SendWR{Opcode: rnic.OpRead, SGL: []rnic.SGE{imr.SGE(0, len(in))}, RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	readTime := time.Since(start)
	if !bytes.Equal(in, out) {
		return errors.New("read back differs from what was written")
	}
	fmt.Printf("wrote and read back %d bytes over %s: first operation done %v after connect; read %.1f MB/s; verified\n",
		rb.Len, tr.Network(), first.Round(time.Microsecond), float64(rb.Len)/readTime.Seconds()/1e6)
	return conn.Disconnect(ctx)
}

func post(ctx context.Context, qp *rnic.QP, cq *rnic.CQ, wr *rnic.SendWR) error {
	wr.Flags |= rnic.Signaled
	if err := qp.PostSend(wr); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wc [1]rnic.Completion
	if _, err := cq.Wait(tctx, wc[:]); err != nil {
		return err
	}
	if wc[0].Status != rnic.StatusSuccess {
		return fmt.Errorf("completion %v (%v)", wc[0].Status, qp.Err())
	}
	return nil
}
