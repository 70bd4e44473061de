package pingpong

import (
	"bytes"
	"context"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePingpongArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-p", "1234", "-d", "rxe0", "-g", "1", "-s", "64", "-n", "5", "-m", "4096", "host"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Port != 1234 || o.Dev != "rxe0" || o.GIDIdx != 1 || o.Size != 64 || o.Iters != 5 || o.MTU != 4096 || o.Peer != "host" {
		t.Fatalf("%+v", o)
	}
	o, err = ParseArgs(nil, io.Discard)
	if err != nil || o.Peer != "" || o.Port != 18515 || o.Size != 4096 || o.Iters != 1000 || o.MTU != 1024 || o.RxDepth != 500 || o.GIDIdx != -1 {
		t.Fatalf("defaults %+v %v", o, err)
	}
	for _, bad := range [][]string{{"-m", "1000"}, {"a", "b"}, {"-n", "0"}} {
		if _, err := ParseArgs(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func freePort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp": // below 0xC000: RoCEv2 links may not bind the entropy range
		for i := 0; i < 100; i++ {
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
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
}

// TestPingpongLoopback runs softrnic pingpong against itself: server on
// 127.0.0.1, client on 127.0.0.2, both on one free UDP port (the peer's
// RoCE port is always the same as one's own, as with rxe's 4791).
func TestPingpongLoopback(t *testing.T) {
	for _, size := range []int{1, 64, 4096, 10000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			tcp, udp := freePort(t, "tcp"), freePort(t, "udp")
			base := []string{"-p", strconv.Itoa(tcp), "-u", strconv.Itoa(udp), "-g", "1", "-s", strconv.Itoa(size), "-n", "200", "-m", "1024"}
			so, err := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.1"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			co, err := ParseArgs(append(append([]string{}, base...), "-a", "127.0.0.2", "127.0.0.1"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var sout, cout bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- Run(ctx, so, &sout, nil) }()
			var cerr error
			for i := 0; i < 100; i++ { // wait for the server's listener
				cout.Reset()
				if cerr = Run(ctx, co, &cout, nil); cerr == nil || !strings.Contains(cerr.Error(), "Couldn't connect") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if cerr != nil {
				t.Fatal("client:", cerr)
			}
			if err := <-done; err != nil {
				t.Fatal("server:", err)
			}
			re := regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID ::ffff:127\.0\.0\.[12]
  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID ::ffff:127\.0\.0\.[12]
(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec
200 iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter
$`)
			sm, cm := re.FindStringSubmatch(sout.String()), re.FindStringSubmatch(cout.String())
			if sm == nil || cm == nil {
				t.Fatalf("output:\nserver:\n%s\nclient:\n%s", sout.String(), cout.String())
			}
			// Each side's remote QPN/PSN is the other's local one.
			if sm[1] != cm[3] || sm[2] != cm[4] || cm[1] != sm[3] || cm[2] != sm[4] {
				t.Fatalf("address exchange mismatch:\n%s\n%s", sout.String(), cout.String())
			}
			if sm[5] != strconv.Itoa(size*200*2) {
				t.Fatalf("byte count %s", sm[5])
			}
		})
	}
}
