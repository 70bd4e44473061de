package rdmaclient

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/tools/rdmaserver"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-s", "10.0.0.1", "-p", "9000", "--roce", "--bind=10.0.0.2", "--idle", "3s", "--timeout", "9s"})
	if err != nil || o.Server != "10.0.0.1" || o.Port != 9000 || !o.RoCE || o.Bind != "10.0.0.2" || o.Idle != 3*time.Second || o.Timeout != 9*time.Second {
		t.Fatalf("%+v %v", o, err)
	}
	if o, _ := ParseArgs(nil); o.Server != "127.0.0.1" || o.Port != 7471 {
		t.Fatalf("defaults %+v", o)
	}
	for _, bad := range [][]string{{"-p", "x"}, {"stray"}, {"-q"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if o, err := rdmaserver.ParseArgs([]string{"-s", "10.0.0.1", "-p", "9"}); err != nil || o.Addr != "10.0.0.1" || o.Port != 9 {
		t.Fatalf("server %+v %v", o, err)
	}
}

// TestPair: softrnic rdma-client against softrnic rdma-server over iWARP and RoCEv2; both
// print rdma_client's and rdma_server's lines.
func TestPair(t *testing.T) {
	for _, roce := range []bool{false, true} {
		t.Run(fmt.Sprintf("roce=%v", roce), func(t *testing.T) {
			so, co := rdmaserver.DefaultOptions(), DefaultOptions()
			so.Addr, so.Port, so.Timeout = "127.0.0.1", 0, 20*time.Second
			co.Timeout = 20 * time.Second
			if roce {
				b := rand.IntN(256)
				so.RoCE, co.RoCE = true, true
				so.Addr, co.Bind = fmt.Sprintf("127.74.%d.1", b), fmt.Sprintf("127.74.%d.2", b)
			}
			co.Server = so.Addr
			ready := make(chan net.Addr, 1)
			so.Listening = func(a net.Addr) { ready <- a }
			var sb, cb, se, ce bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- rdmaserver.Run(context.Background(), so, &sb, &se) }()
			hp, _, _ := strings.Cut((<-ready).String(), "@")
			_, p, _ := net.SplitHostPort(hp)
			fmt.Sscan(p, &co.Port)
			cerr := Run(context.Background(), co, &cb, &ce)
			serr := <-done
			if cerr != nil || serr != nil || sb.String() != "rdma_server: start\nrdma_server: end 0\n" ||
				cb.String() != "rdma_client: start\nrdma_client: end 0\n" {
				t.Fatalf("server %v %q %q\nclient %v %q %q", serr, sb.String(), se.String(), cerr, cb.String(), ce.String())
			}
		})
	}
}

// TestSilentServer: a server that accepts and never answers (the daemon's memory target
// did) is given up on after --idle, with rdma_client's "end -1".
func TestSilentServer(t *testing.T) {
	dev, tr, err := tool.OpenCM(false, "127.0.0.1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	defer tr.Close()
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		req, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(4)
		qp, _ := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
		mr, _ := pd.RegMR(make([]byte, 16), rnic.AccessLocalWrite)
		_ = qp.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{mr.SGE(0, 16)}})
		if c, err := req.Accept(qp, cm.Param{}); err == nil {
			<-c.Done()
		}
	}()
	o := DefaultOptions()
	o.Port, o.Idle, o.Timeout = ln.Addr().(*net.TCPAddr).Port, time.Second, 20*time.Second
	var out, errOut bytes.Buffer
	t0 := time.Now()
	err = Run(context.Background(), o, &out, &errOut)
	if err == nil || !strings.Contains(errOut.String(), "no answer from the server for 1s") || out.String() != "rdma_client: start\nrdma_client: end -1\n" ||
		time.Since(t0) > 10*time.Second {
		t.Fatalf("%v after %v: %q %q", err, time.Since(t0), out.String(), errOut.String())
	}
}
