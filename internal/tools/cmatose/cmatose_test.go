package cmatose

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-s", "10.0.0.1", "-b", "10.0.0.2", "-p", "9000", "-c", "4", "-C", "20", "-S", "4096", "-t", "0x10",
		"-a", "18", "-m", "--roce", "--timeout=5s", "--idle", "2s", "-f", "ip", "-P", "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Server != "10.0.0.1" || o.Bind != "10.0.0.2" || o.Port != 9000 || o.Conns != 4 || o.Count != 20 || o.Size != 4096 ||
		o.TOS != 16 || o.AckTimeout != 18 || !o.Migrate || !o.RoCE || o.Timeout != 5*time.Second || o.Idle != 2*time.Second {
		t.Fatalf("%+v", o)
	}
	if o, _ := ParseArgs(nil); o.Port != 7471 || o.Conns != 1 || o.Count != 10 || o.Size != 100 || o.Server != "" || o.Idle != DefaultIdle {
		t.Fatalf("defaults %+v", o)
	}
	for _, bad := range [][]string{{"-P", "ib"}, {"-f", "gid"}, {"-c", "0"}, {"-c", "x"}, {"stray"}, {"-p", "70000"}, {"-x"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// pair runs a softrnic cmatose server and client over loopback iWARP, or RoCEv2 on a
// random pair of 127.73/16 addresses.
func pair(t *testing.T, roce bool, args ...string) (srv, cli string, serr, cerr error) {
	t.Helper()
	so, err := ParseArgs(append([]string{"-p", "0", "--timeout", "30s"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	co := so
	so.Bind = "127.0.0.1"
	co.Server = "127.0.0.1"
	if roce {
		b := rand.IntN(256)
		so.RoCE, co.RoCE = true, true
		so.Bind, co.Bind = fmt.Sprintf("127.73.%d.1", b), fmt.Sprintf("127.73.%d.2", b)
		co.Server = so.Bind
	}
	ready := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { ready <- a }
	var sb, cb bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), so, &sb, nil) }()
	select {
	case a := <-ready:
		hp, _, _ := strings.Cut(a.String(), "@")
		_, p, _ := net.SplitHostPort(hp)
		fmt.Sscan(p, &co.Port)
	case err := <-done:
		t.Fatalf("server: %v\n%s", err, sb.String())
	}
	cerr = Run(context.Background(), co, &cb, nil)
	serr = <-done
	return sb.String(), cb.String(), serr, cerr
}

const (
	serverOut = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	clientOut = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
)

// TestLoopback: ucmatose's exchange between softrnic's server and client, with
// ucmatose's lines exactly.
func TestLoopback(t *testing.T) {
	for _, c := range []struct {
		roce bool
		args []string
	}{
		{false, nil}, {false, []string{"-c", "4", "-C", "50", "-S", "4096"}},
		{true, nil}, {true, []string{"-c", "3", "-C", "20", "-S", "1000"}},
	} {
		t.Run(fmt.Sprintf("roce=%v/%s", c.roce, strings.Join(c.args, "")), func(t *testing.T) {
			srv, cli, serr, cerr := pair(t, c.roce, c.args...)
			if serr != nil || cerr != nil || srv != serverOut || cli != clientOut {
				t.Fatalf("server %v:\n%s\nclient %v:\n%s", serr, srv, cerr, cli)
			}
		})
	}
	t.Run("no messages", func(t *testing.T) {
		srv, cli, serr, cerr := pair(t, false, "-C", "0")
		if serr != nil || cerr != nil || srv != "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n" ||
			cli != "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n" {
			t.Fatalf("server %v:\n%s\nclient %v:\n%s", serr, srv, cerr, cli)
		}
	})
}

// TestNoServer: a client with nobody listening reports the rejection and status 1.
func TestNoServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out bytes.Buffer
	o := DefaultOptions()
	o.Server, o.Port, o.Timeout = "127.0.0.1", port, 10*time.Second
	if err := Run(context.Background(), o, &out, nil); err == nil ||
		!strings.Contains(out.String(), "cmatose: event: RDMA_CM_EVENT_REJECTED, error:") || !strings.HasSuffix(out.String(), "test complete\nreturn status 1\n") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestSilentPeer: a client whose server accepts but never sends gives up after --idle
// (ucmatose would poll forever).
func TestSilentPeer(t *testing.T) {
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
		c, err := req.Accept(qp, cm.Param{})
		if err == nil {
			<-c.Done()
		}
	}()
	o := DefaultOptions()
	o.Server, o.Port, o.Idle, o.Timeout = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port, time.Second, 20*time.Second
	var out bytes.Buffer
	t0 := time.Now()
	err = Run(context.Background(), o, &out, nil)
	if err == nil || !strings.Contains(out.String(), "no completion for 1s") || time.Since(t0) > 10*time.Second {
		t.Fatalf("%v after %v:\n%s", err, time.Since(t0), out.String())
	}
}
