package rping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
)

// TestRpingRoCELoopback runs softrnic rping --roce in both roles over loopback UDP 4791:
// the IB CM exchange (REQ/REP/RTU, DREQ/DREP) and rping's Read/Write/Send protocol over
// RoCEv2 RC. The two ends bind distinct 127/8 addresses (each link owns UDP 4791 there).
func TestRpingRoCELoopback(t *testing.T) {
	for _, size := range []int{MinSize, 4096, MaxSize} {
		t.Run(fmt.Sprintf("S%d", size), func(t *testing.T) {
			const count = 20
			b := 1 + rand.IntN(200)
			srvAddr, cliAddr := fmt.Sprintf("127.71.%d.1", b), fmt.Sprintf("127.71.%d.2", b)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var so, co syncbuf.Buffer
			srv := Options{Server: true, RoCE: true, Addr: srvAddr, Port: DefaultPort, Size: size, Verbose: true}
			cli := Options{RoCE: true, Addr: srvAddr, Local: cliAddr, Port: DefaultPort, Size: size,
				Count: count, Verbose: true, Validate: true}
			ready := make(chan net.Addr, 1)
			srv.Listening = func(a net.Addr) { ready <- a }
			done := make(chan error, 1)
			go func() { done <- Run(ctx, srv, &so, &so) }()
			select {
			case a := <-ready:
				if a.String() != fmt.Sprintf("%s:%d", srvAddr, DefaultPort) {
					t.Fatalf("listening on %v", a)
				}
			case err := <-done:
				t.Fatalf("server: %v", err)
			}
			cliErr := Run(ctx, cli, &co, &co)
			srvErr := <-done
			if cliErr != nil || srvErr != nil {
				t.Fatalf("client: %v\nserver: %v\n%s\n%s", cliErr, srvErr, co.String(), so.String())
			}
			cliOut, srvOut := co.String(), so.String()
			for i := 0; i < count; i++ {
				buf := make([]byte, size)
				fillSource(buf, i, byte('A'+i%58))
				line := string(buf[:size-1])
				if !strings.Contains(cliOut, "ping data: "+line+"\n") {
					t.Fatalf("client output lacks ping %d:\n%s", i, cliOut)
				}
				if !strings.Contains(srvOut, "server ping data: "+line+"\n") {
					t.Fatalf("server output lacks ping %d", i)
				}
			}
			if n := strings.Count(cliOut, "ping data: "); n != count {
				t.Fatalf("client printed %d pings, want %d", n, count)
			}
			if !strings.Contains(srvOut, "server DISCONNECT EVENT...") {
				t.Fatalf("server did not see the disconnect:\n%s", srvOut)
			}
		})
	}
}

// TestRpingRoCEArgs checks the RoCE option rules.
func TestRpingRoCEArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-c", "-a", "192.168.78.2", "--roce", "--local", "192.168.78.1"})
	if err != nil || !o.RoCE || o.Local != "192.168.78.1" {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range [][]string{
		{"-s", "--roce"}, {"-c", "-a", "x", "--roce", "--crc"}, {"-c", "-a", "x", "--roce", "--local", "nope"},
		{"-s", "-a", "1.2.3.4", "--roce", "--fault", "write-bad-stag"},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
