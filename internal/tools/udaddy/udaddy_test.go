package udaddy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-s", "10.0.0.1", "-b", "10.0.0.2", "-c", "3", "-C", "0x20", "-S", "512", "-t", "4", "-p", "0x111",
		"-P", "udp", "-f", "name", "--port", "9000", "--roce", "--idle=2s", "--timeout", "9s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Server != "10.0.0.1" || o.Bind != "10.0.0.2" || o.Conns != 3 || o.Count != 32 || o.Size != 512 || o.Port != 9000 ||
		o.Idle != 2*time.Second || o.Timeout != 9*time.Second {
		t.Fatalf("%+v", o)
	}
	if o, _ := ParseArgs(nil); o.Port != 7174 || o.Conns != 1 || o.Count != 10 || o.Size != 100 {
		t.Fatalf("defaults %+v", o)
	}
	for _, bad := range [][]string{{"-P", "ipoib"}, {"-p", "2"}, {"-f", "gid"}, {"-c", "0"}, {"stray"}, {"--port", "x"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// pair runs softrnic udaddy server and client on a random pair of 127.75/16 addresses.
func pair(t *testing.T, args ...string) (srv, cli string, serr, cerr error) {
	t.Helper()
	so, err := ParseArgs(append([]string{"--port", "0", "--timeout", "30s"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	co := so
	b := rand.IntN(256)
	so.Bind, co.Bind = fmt.Sprintf("127.75.%d.1", b), fmt.Sprintf("127.75.%d.2", b)
	co.Server = so.Bind
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

// TestLoopback: udaddy's exchange between softrnic's server and client over SIDR, with
// udaddy's lines exactly.
func TestLoopback(t *testing.T) {
	for _, args := range [][]string{nil, {"-c", "3", "-C", "20", "-S", "1024"}} {
		t.Run(strings.Join(args, ""), func(t *testing.T) {
			srv, cli, serr, cerr := pair(t, args...)
			if serr != nil || cerr != nil ||
				srv != "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n" ||
				cli != "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n" {
				t.Fatalf("server %v:\n%s\nclient %v:\n%s", serr, srv, cerr, cli)
			}
		})
	}
}

// TestRefusals: a message larger than the MTU is refused as udaddy does; a client with no
// server gives up after the SIDR retries.
func TestRefusals(t *testing.T) {
	o := DefaultOptions()
	o.Server, o.Bind, o.Size, o.Timeout = "127.75.0.9", "127.75.0.8", 2000, 10*time.Second
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out, nil); err == nil || !strings.Contains(out.String(), "udaddy: message_size 2000 is larger than active mtu 1024") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
