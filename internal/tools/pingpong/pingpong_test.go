package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePingpongArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-p", "1234", "-d", "rxe0", "-g", "1", "-s", "64", "host", "-n5", "--mtu=4096", "-ec"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != RC || o.Port != 1234 || o.Dev != "rxe0" || o.GIDIdx != 1 || o.Size != 64 || o.Iters != 5 || o.MTU != 4096 ||
		o.Peer != "host" || !o.Events || !o.Validate {
		t.Fatalf("%+v", o)
	}
	o, err = ParseArgs(nil)
	if err != nil || o.Peer != "" || o.Port != 18515 || o.Size != 4096 || o.Iters != 1000 || o.MTU != 1024 || o.RxDepth != 500 ||
		o.GIDIdx != -1 || o.Idle != DefaultIdle || o.Timeout != 0 {
		t.Fatalf("defaults %+v %v", o, err)
	}
	// ud_pingpong's default size is 1024 (its help text says 2048); srq_pingpong's -q 16.
	if o, err = ParseArgs([]string{"--ud"}); err != nil || o.Mode != UD || o.Size != 1024 {
		t.Fatalf("--ud %+v %v", o, err)
	}
	if o, err = ParseArgs([]string{"--srq", "--num-qp", "0x4", "--timeout", "3s", "--idle=0"}); err != nil || o.Mode != SRQ ||
		o.NumQP != 4 || o.Timeout != 3*time.Second || o.Idle != 0 {
		t.Fatalf("--srq %+v %v", o, err)
	}
	if o, err = ParseArgs([]string{"--uc"}); err != nil || o.Mode != UC {
		t.Fatalf("--uc %+v %v", o, err)
	}
	for _, bad := range [][]string{{"-m", "1000"}, {"a", "b"}, {"-n", "0"}, {"-x"}, {"-p"}, {"--srq", "-q", "256"},
		{"--srq", "-q", "8", "-r", "4"}, {"-i", "2"}, {"--timeout", "x"}, {"-s", "abc"}, {"--nope"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// pair runs server and client with the same args; the server's RoCE link is
// 127.0.0.1:udp, the client's 127.0.0.2:udp (one free UDP port for both, as rxe's 4791).
func pair(t *testing.T, args ...string) (sout, cout string, serr, cerr error) {
	t.Helper()
	udp := freeUDPPort(t)
	base := append([]string{"-p", "0", "-u", strconv.Itoa(udp), "-g", "1", "--timeout", "30s"}, args...)
	so, err := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	co, err := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.2", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { ready <- a }
	var sb, cb bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), so, &sb, nil) }()
	select {
	case a := <-ready:
		co.Port = a.(*net.TCPAddr).Port
	case err := <-done:
		return sb.String(), "", err, nil
	}
	cerr = Run(context.Background(), co, &cb, nil)
	serr = <-done
	return sb.String(), cb.String(), serr, cerr
}

// freeUDPPort returns a free UDP port below 0xC000: RoCEv2 links may not bind the
// entropy range (rnic/rocev2.Addr).
func freeUDPPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if p := c.LocalAddr().(*net.UDPAddr).Port; p < 0xC000 {
			return p
		}
	}
	t.Fatal("no UDP port below 0xC000 in 100 tries")
	return 0
}

// outputRE matches a run's output: nq local lines, nq remote lines and the two result
// lines, as the examples print them.
func outputRE(m Mode, nq, bytes, iters int) *regexp.Regexp {
	sep := ","
	if m == UD {
		sep = ":"
	}
	line := `0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})`
	var b strings.Builder
	b.WriteString("^")
	for range nq {
		b.WriteString(`  local address:  LID ` + line + sep + ` GID ::ffff:127\.0\.0\.[12]\n`)
	}
	for range nq {
		b.WriteString(`  remote address: LID ` + line + `, GID ::ffff:127\.0\.0\.[12]\n`)
	}
	fmt.Fprintf(&b, `%d bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec\n%d iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter\n$`, bytes, iters)
	return regexp.MustCompile(b.String())
}

// TestPingpongLoopback runs softrnic pingpong against itself in every mode and checks
// both outputs, and that each side's remote QPN/PSN is the other's local one.
func TestPingpongLoopback(t *testing.T) {
	cases := []struct {
		mode        Mode
		flag        string
		size, iters int
		nq          int
	}{
		{RC, "", 1, 200, 1}, {RC, "", 4096, 200, 1}, {RC, "", 10000, 100, 1},
		{UC, "--uc", 64, 200, 1}, {UC, "--uc", 4096, 200, 1},
		{UD, "--ud", 1, 200, 1}, {UD, "--ud", 1024, 200, 1},
		{SRQ, "--srq", 4096, 300, 16}, {SRQ, "--srq", 100, 100, 3},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%d/%d", c.mode, c.size, c.nq), func(t *testing.T) {
			args := []string{"-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters), "-c"}
			if c.flag != "" {
				args = append(args, c.flag)
			}
			if c.mode == SRQ {
				args = append(args, "-q", strconv.Itoa(c.nq))
			}
			sout, cout, serr, cerr := pair(t, args...)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s\n%s", serr, cerr, sout, cout)
			}
			re := outputRE(c.mode, c.nq, c.size*c.iters*2, c.iters)
			sm, cm := re.FindStringSubmatch(sout), re.FindStringSubmatch(cout)
			if sm == nil || cm == nil {
				t.Fatalf("output:\nserver:\n%s\nclient:\n%s", sout, cout)
			}
			for i := range 2 * c.nq {
				j := (i + c.nq) % (2 * c.nq)
				if sm[1+2*i] != cm[1+2*j] || sm[2+2*i] != cm[2+2*j] {
					t.Fatalf("address exchange mismatch:\n%s\n%s", sout, cout)
				}
			}
		})
	}
}

// TestPingpongSRQMismatch: a server with fewer QPs than the client is refused by the
// client with one line (srq_pingpong would send to QP 0 and hang); the server, whose QPs
// all have peers, is then left without messages and gives up after --idle.
func TestPingpongSRQMismatch(t *testing.T) {
	udp := freeUDPPort(t)
	base := []string{"--srq", "-p", "0", "-u", strconv.Itoa(udp), "-g", "1", "-n", "50", "--idle", "1s"}
	so, _ := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.1", "-q", "2"))
	co, _ := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.2", "-q", "4", "127.0.0.1"))
	ready := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { ready <- a }
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), so, &bytes.Buffer{}, nil) }()
	co.Port = (<-ready).(*net.TCPAddr).Port
	cerr := Run(context.Background(), co, &bytes.Buffer{}, nil)
	if cerr == nil || !strings.Contains(cerr.Error(), "the peer has 2 QPs, this side 4: both sides need the same -q") {
		t.Fatalf("client: %v", cerr)
	}
	serr := <-done
	if serr == nil || !strings.Contains(serr.Error(), "no completion from the peer for 1s") {
		t.Fatalf("server: %v", serr)
	}
}

// TestPingpongTimeout: a client whose server never answers the exchange ends at
// --timeout with the reason.
func TestPingpongTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(5 * time.Second)
		}
	}()
	o, _ := ParseArgs([]string{"-a", "127.0.0.2", "-u", strconv.Itoa(freeUDPPort(t)), "-p", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port),
		"--timeout", "300ms", "127.0.0.1"})
	t0 := time.Now()
	err = Run(context.Background(), o, &bytes.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") || time.Since(t0) > 4*time.Second {
		t.Fatalf("%v after %v", err, time.Since(t0))
	}
}
