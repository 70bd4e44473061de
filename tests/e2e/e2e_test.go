// Package e2e runs softrnic end to end through its public API and its command line.
package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// TestDemoCommand builds cmd/softrnic and runs "softrnic demo" as a user would.
func TestDemoCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "softrnic")
	build := exec.Command("go", "build", "-o", bin, "github.com/softrnic/softrnic/cmd/softrnic")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "demo", "-size", "4194304").CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"connection request", "RDMA WRITE 4194304 bytes", "verified", "RDMA READ 4194304 bytes", "demo: OK"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
}

type host struct {
	dev *rnic.Device
	pd  *rnic.PD
	cq  *rnic.CQ
}

func newHost(t *testing.T) *host {
	d, err := rnic.Open(rnic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{dev: d}
	h.pd, _ = d.AllocPD()
	h.cq, _ = d.CreateCQ(1024)
	go func() {
		for range d.Events() {
		}
	}()
	return h
}

// TestEchoService runs a small RDMA service: clients register a region, tell the server
// its STag with a Send; the server RDMA-reads it, transforms it, RDMA-writes it back and
// answers with a Send. Then every client disconnects gracefully.
func TestEchoService(t *testing.T) {
	g0 := runtime.NumGoroutine()
	const clients, size = 8, 256 << 10
	srv := newHost(t)
	srq, _ := srv.dev.CreateSRQ(srv.pd, rnic.SRQAttr{MaxWR: 64, MaxSGE: 1})
	msgs := make([]byte, 64*16)
	msgMR, _ := srv.pd.RegMR(msgs, rnic.AccessLocalWrite)
	for i := 0; i < 64; i++ {
		_ = srq.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{msgMR.SGE(16*i, 16)}})
	}
	ln, err := iwarp.Listen(srv.dev, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Server: one goroutine accepting, one serving completions.
	qps := map[uint32]*rnic.QP{}
	var mu sync.Mutex
	go func() {
		for {
			r, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			qp, _ := srv.dev.CreateQP(srv.pd, rnic.QPAttr{SendCQ: srv.cq, RecvCQ: srv.cq, SRQ: srq})
			mu.Lock()
			qps[qp.Num()] = qp
			mu.Unlock()
			if _, err := r.Accept(qp, iwarp.ConnParam{}); err != nil {
				t.Error(err)
			}
		}
	}()
	work := make([]byte, clients*size)
	workMR, _ := srv.pd.RegMR(work, rnic.AccessLocalWrite)
	reply := make([]byte, 4)
	replyMR, _ := srv.pd.RegMR(reply, 0)
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		wc := make([]rnic.Completion, 16)
		slot := map[uint32]int{}
		dest := map[uint32]rnic.RemoteBuffer{}
		for {
			n, err := srv.cq.Wait(ctx, wc)
			if err != nil {
				return
			}
			for _, c := range wc[:n] {
				if c.Status != rnic.StatusSuccess {
					continue // flushes at disconnect
				}
				mu.Lock()
				qp := qps[c.QPNum]
				s, ok := slot[c.QPNum]
				if !ok {
					s = len(slot)
					slot[c.QPNum] = s
				}
				mu.Unlock()
				buf := workMR.SGE(s*size, size)
				switch c.Opcode {
				case rnic.WCRecv:
					m := msgs[16*c.WRID : 16*c.WRID+16]
					rb, err := rnic.ParseRemoteBuffer(m)
					if err != nil {
						t.Error(err)
						continue
					}
					_ = srq.PostRecv(&rnic.RecvWR{WRID: c.WRID, SGL: []rnic.SGE{msgMR.SGE(16*int(c.WRID), 16)}})
					dest[c.QPNum] = rb
					_ = qp.PostSend(&rnic.SendWR{WRID: uint64(s), Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{buf}, RemoteAddr: rb.Addr, RKey: rb.RKey})
				case rnic.WCRead:
					b := work[s*size : (s+1)*size]
					for i := range b {
						b[i] ^= 0xff
					}
					d := dest[c.QPNum]
					_ = qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, SGL: []rnic.SGE{buf}, RemoteAddr: d.Addr + size, RKey: d.RKey})
					_ = qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{replyMR.SGE(0, 4)}})
				}
			}
		}
	}()

	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newHost(t)
			defer c.dev.Close()
			qp, _ := c.dev.CreateQP(c.pd, rnic.QPAttr{SendCQ: c.cq, RecvCQ: c.cq})
			mem := make([]byte, 2*size)
			for j := range mem[:size] {
				mem[j] = byte(j*7 + i)
			}
			mr, _ := c.pd.RegMR(mem, rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite)
			m := mr.RemoteBuffer(0, len(mem)).Append(nil)
			mm, _ := c.pd.RegMR(m, 0)
			rb := make([]byte, 4)
			rbm, _ := c.pd.RegMR(rb, rnic.AccessLocalWrite)
			_ = qp.PostRecv(&rnic.RecvWR{WRID: 9, SGL: []rnic.SGE{rbm.SGE(0, 4)}})
			if _, err := iwarp.Dial(ctx, qp, ln.Addr().String(), nil, iwarp.ConnParam{}); err != nil {
				t.Error(err)
				return
			}
			_ = qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{mm.SGE(0, 16)}})
			var wc [1]rnic.Completion
			if _, err := c.cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess || wc[0].WRID != 9 {
				t.Errorf("client %d: %v %+v", i, err, wc[0])
				return
			}
			for j := 0; j < size; j++ {
				if mem[size+j] != ^mem[j] {
					t.Errorf("client %d: byte %d not transformed", i, j)
					return
				}
			}
			qp.Disconnect()
			<-qp.Done()
		}()
	}
	wg.Wait()
	if !bytes.Equal(reply, make([]byte, 4)) {
		t.Fatal("reply buffer modified")
	}
	cancel()
	<-serverDone
	ln.Close()
	srv.dev.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Fatalf("goroutines: %d > %d", g, g0)
	}
}
