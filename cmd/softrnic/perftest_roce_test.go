package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPerftestRoCELoopback runs write and read with softrnic at both ends over RoCEv2
// (rnic/rocev2 with the IB CM: two CM connections to one port, as perftest -R makes) and
// checks both reports.
func TestPerftestRoCELoopback(t *testing.T) {
	for _, c := range []struct {
		verb  string
		size  int
		iters int
	}{{"write", 65536, 200}, {"write", 4096, 500}, {"read", 65536, 200}, {"read", 100, 333}} {
		t.Run(c.verb+"/"+strconv.Itoa(c.size), func(t *testing.T) {
			bind := fmt.Sprintf("127.72.%d.1", 1+rand.IntN(200))
			so, err := parsePerftestArgs([]string{c.verb, "--roce", "--bind", bind, "-p", "0", "-R",
				"-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters)})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var sb, cb bytes.Buffer
			var srvRep, cliRep []ptReport
			so.stdout, so.timeout = &sb, 60*time.Second
			addrc := make(chan net.Addr, 1)
			so.listening = func(a net.Addr) { addrc <- a }
			so.gotReport = func(r ptReport) { mu.Lock(); srvRep = append(srvRep, r); mu.Unlock() }
			co := so
			co.listening, co.bind, co.linger = nil, "", 10*time.Millisecond
			done := make(chan error, 1)
			go func() { done <- perftest(context.Background(), so) }()
			select {
			case a := <-addrc:
				co.port = a.(*net.UDPAddr).Port
			case err := <-done:
				t.Fatalf("server: %v", err)
			}
			co.server, co.stdout = bind, &cb
			co.gotReport = func(r ptReport) { mu.Lock(); cliRep = append(cliRep, r); mu.Unlock() }
			cerr := perftest(context.Background(), co)
			serr := <-done
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sb.String(), cerr, cb.String())
			}
			if len(srvRep) != 1 || len(cliRep) != 1 || srvRep[0] != cliRep[0] {
				t.Fatalf("reports: server %v client %v", srvRep, cliRep)
			}
			if r := cliRep[0]; r.Size != uint64(c.size) || r.Iters != uint64(c.iters) || !(r.Avg > 0) {
				t.Errorf("report %+v", r)
			}
			if !strings.Contains(cb.String(), "Transport type : IB") {
				t.Errorf("client output:\n%s", cb.String())
			}
		})
	}
}

func TestPerftestRoCEArgs(t *testing.T) {
	for _, bad := range [][]string{
		{"send", "--roce", "--bind", "127.0.0.1"}, {"write", "--roce"}, {"write", "--roce", "--crc", "--bind", "127.0.0.1"},
	} {
		if _, err := parsePerftestArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if o, err := parsePerftestArgs([]string{"read", "--roce", "-x", "1", "-R", "192.168.78.2"}); err != nil || !o.roce {
		t.Errorf("%+v %v", o, err)
	}
}
