package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestPerftestRoCELoopback runs write and read with softrnic at both ends over RoCEv2
// (rnic/rocev2 with the IB CM: two CM connections to one port, as perftest -R makes) and
// checks both reports.
//
// Each end binds its own RoCE address, a random pair in 127.72.0.0/16: without --bind the
// client's link would take the route's source, 127.0.0.1:4791, which any other test process
// running at the same time may hold (the client then fails with EADDRINUSE and the server
// waits out its timeout). A pair that is taken anyway is retried with a new one.
func TestPerftestRoCELoopback(t *testing.T) {
	for _, c := range []struct {
		verb  string
		size  int
		iters int
	}{{"write", 65536, 200}, {"write", 4096, 500}, {"read", 65536, 200}, {"read", 100, 333}} {
		t.Run(c.verb+"/"+strconv.Itoa(c.size), func(t *testing.T) {
			for try := 0; ; try++ {
				err := perftestRoCEOnce(t, c.verb, c.size, c.iters)
				if err == nil || !errors.Is(err, syscall.EADDRINUSE) || try == 4 {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				t.Logf("retrying with new addresses: %v", err)
			}
		})
	}
}

// perftestRoCEOnce runs one RoCE perftest between a server and a client on a fresh random
// pair of loopback addresses; it returns an error that wraps EADDRINUSE when either address
// was taken, and fails t for anything else.
func perftestRoCEOnce(t *testing.T, verb string, size, iters int) error {
	t.Helper()
	b := rand.IntN(256)
	bind, cbind := fmt.Sprintf("127.72.%d.%d", b, 1+rand.IntN(127)), fmt.Sprintf("127.72.%d.%d", b, 128+rand.IntN(127))
	so, err := ParseArgs([]string{verb, "--roce", "--bind", bind, "-p", "0", "-R",
		"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sb, cb bytes.Buffer
	var srvRep, cliRep []bwReport
	so.Timeout = 60 * time.Second
	addrc := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { addrc <- a }
	so.gotReport = func(r bwReport) { mu.Lock(); srvRep = append(srvRep, r); mu.Unlock() }
	co := so
	co.Listening, co.Bind, co.Linger = nil, cbind, 10*time.Millisecond
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(sctx, so, &sb, nil) }()
	select {
	case a := <-addrc:
		co.Port = a.(*net.UDPAddr).Port
	case err := <-done:
		return fmt.Errorf("server: %w", err)
	}
	co.Peer = bind
	co.gotReport = func(r bwReport) { mu.Lock(); cliRep = append(cliRep, r); mu.Unlock() }
	cerr := Run(context.Background(), co, &cb, nil)
	if errors.Is(cerr, syscall.EADDRINUSE) {
		cancel() // the server would wait out its timeout for a client that never came
		<-done
		return fmt.Errorf("client: %w", cerr)
	}
	serr := <-done
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sb.String(), cerr, cb.String())
	}
	if len(srvRep) != 1 || len(cliRep) != 1 || srvRep[0] != cliRep[0] {
		t.Fatalf("reports: server %v client %v", srvRep, cliRep)
	}
	if r := cliRep[0]; r.Size != uint64(size) || r.Iters != uint64(iters) || !(r.Avg > 0) {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(cb.String(), "Transport type : IB") {
		t.Errorf("client output:\n%s", cb.String())
	}
	return nil
}

func TestPerftestRoCEArgs(t *testing.T) {
	for _, bad := range [][]string{
		{"send", "--roce", "--bind", "127.0.0.1"}, {"write", "--roce"}, {"write", "--roce", "--crc", "--bind", "127.0.0.1"},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if o, err := ParseArgs([]string{"read", "--roce", "-x", "1", "-R", "192.168.78.2"}); err != nil || !o.RoCE {
		t.Errorf("%+v %v", o, err)
	}
}
