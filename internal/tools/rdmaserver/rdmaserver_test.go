package rdmaserver

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// TestSilentClient: a client that connects and sends nothing is given up on after --idle
// (rdma_server would wait forever), with rdma_server's "end -1".
func TestSilentClient(t *testing.T) {
	o := DefaultOptions()
	o.Addr, o.Port, o.Idle, o.Timeout = "127.0.0.1", 0, time.Second, 20*time.Second
	ready := make(chan net.Addr, 1)
	o.Listening = func(a net.Addr) { ready <- a }
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), o, &out, &errOut) }()
	addr := (<-ready).String()
	dev, tr, err := tool.OpenCM(false, "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	defer tr.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(4)
	qp, _ := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	c, err := tr.Dial(context.Background(), qp, addr, cm.Param{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = <-done
	if err == nil || !strings.Contains(errOut.String(), "no message from the client for 1s") || out.String() != "rdma_server: start\nrdma_server: end -1\n" {
		t.Fatalf("%v: %q %q", err, out.String(), errOut.String())
	}
}
