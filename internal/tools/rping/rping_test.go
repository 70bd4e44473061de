package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

func TestParseRpingArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-c", "-vV", "-a", "10.0.0.1", "-p9999", "-C", "7", "-S", "4096", "--crc", "--timeout=3s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Server || !o.Verbose || !o.Validate || o.Debug || o.Addr != "10.0.0.1" ||
		o.Port != 9999 || o.Count != 7 || o.Size != 4096 || !o.CRC || o.Timeout != 3*time.Second {
		t.Fatalf("parsed %+v", o)
	}
	o, err = ParseArgs([]string{"-s"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Server || o.Port != 7174 || o.Size != 64 || o.Count != 0 || o.Addr != "" || o.Dev != "" {
		t.Fatalf("defaults: %+v", o)
	}
	// -d alone is rping's debug flag; -d NAME (a word after it) and --dev NAME name a device
	for _, c := range []struct {
		args  []string
		dev   string
		debug bool
	}{
		{[]string{"-c", "-a", "h", "-d"}, "", true},
		{[]string{"-c", "-d", "-a", "h"}, "", true},
		{[]string{"-c", "-vd", "-a", "h"}, "", true},
		{[]string{"-c", "-d", "softrnic0", "-a", "h"}, "softrnic0", false},
		{[]string{"-c", "--dev", "x1", "-d", "-a", "h"}, "x1", true},
	} {
		o, err := ParseArgs(c.args)
		if err != nil || o.Dev != c.dev || o.Debug != c.debug {
			t.Fatalf("%q: dev %q debug %v err %v; want %q %v", c.args, o.Dev, o.Debug, err, c.dev, c.debug)
		}
	}
	// rping's size range: sizeof("2147483647") + sizeof("rdma-ping-%d: ") .. 64 KiB - 1.
	for _, c := range []struct {
		size string
		ok   bool
	}{{"25", false}, {"26", true}, {"65535", true}, {"65536", false}, {"x", false}} {
		_, err := ParseArgs([]string{"-s", "-S", c.size})
		if (err == nil) != c.ok {
			t.Errorf("-S %s: err %v, want ok=%v", c.size, err, c.ok)
		}
	}
	for _, bad := range [][]string{
		{}, {"-s", "-c", "-a", "x"}, {"-c"}, {"-s", "-x"}, {"-s", "-C", "-1"}, {"-s", "-p"},
		{"-s", "--fault", "sink-oob"}, {"-c", "-a", "x", "--fault", "write-bad-stag"}, {"-s", "--fault", "nope"},
		{"-s", "--timeout", "x"}, {"-s", "stray"}, {"-c", "-a", "x", "--settle", "1s"},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestFillSource checks the rping payload: the "rdma-ping-%d: " prefix, then printable
// ASCII 'A'..'z' from a start letter that advances per ping, NUL in the last byte.
func TestFillSource(t *testing.T) {
	for _, c := range []struct{ ping, size int }{{0, 26}, {0, 64}, {57, 100}, {58, 100}, {12345, 4096}} {
		buf := make([]byte, c.size)
		start := byte('A' + c.ping%58)
		fillSource(buf, c.ping, start)
		prefix := "rdma-ping-" + strconv.Itoa(c.ping) + ": "
		if !bytes.HasPrefix(buf, []byte(prefix)) {
			t.Fatalf("ping %d: prefix %q", c.ping, buf[:len(prefix)])
		}
		if buf[c.size-1] != 0 {
			t.Fatalf("ping %d: last byte %#x", c.ping, buf[c.size-1])
		}
		for i := len(prefix); i < c.size-1; i++ {
			want := byte('A' + (int(start-'A')+i-len(prefix))%58)
			if buf[i] != want {
				t.Fatalf("ping %d size %d: byte %d = %q, want %q", c.ping, c.size, i, buf[i], want)
			}
		}
	}
}

type rpingRun struct {
	srvErr, cliErr error
	srvOut, cliOut string
	req, rep       mpa.Frame // the MPA Request and Reply, as the relay saw them
	srvC, cliC     rnic.Stats
}

// mpaRelay relays one TCP connection from a listener on 127.0.0.1 to target and returns
// the listener's port and a function that waits for the MPA Request and Reply it relayed.
func mpaRelay(t *testing.T, target string) (int, func() (req, rep mpa.Frame, err error)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type res struct {
		f   mpa.Frame
		err error
	}
	reqc, repc := make(chan res, 1), make(chan res, 1)
	// pipe copies src to dst; the first MPA frame it sees goes to first.
	pipe := func(dst, src net.Conn, first chan<- res) {
		defer dst.Close()
		hdr := make([]byte, mpa.HeaderLen)
		if _, err := io.ReadFull(src, hdr); err != nil {
			first <- res{err: err}
			return
		}
		n, err := mpa.FrameLen(hdr)
		if err != nil {
			first <- res{err: err}
			return
		}
		b := append(hdr, make([]byte, n-mpa.HeaderLen)...)
		if _, err := io.ReadFull(src, b[mpa.HeaderLen:]); err != nil {
			first <- res{err: err}
			return
		}
		f, err := mpa.ParseFrame(b)
		first <- res{f, err}
		if _, err := dst.Write(b); err != nil {
			return
		}
		_, _ = io.Copy(dst, src)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			reqc <- res{err: err}
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			reqc <- res{err: err}
			return
		}
		go pipe(s, c, reqc)
		go pipe(c, s, repc)
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() (mpa.Frame, mpa.Frame, error) {
		q := <-reqc
		if q.err != nil {
			return q.f, mpa.Frame{}, q.err
		}
		p := <-repc
		return q.f, p.f, p.err
	}
}

// runPair runs softrnic rping server and client over loopback TCP, through a relay that
// records the MPA Request and Reply.
func runPair(t *testing.T, srv, cli Options) rpingRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var r rpingRun
	var so, co syncbuf.Buffer
	srv.Server, srv.Addr, srv.Port = true, "127.0.0.1", 0
	cli.Server, cli.Addr = false, "127.0.0.1"
	ready := make(chan net.Addr, 1)
	srv.Listening = func(a net.Addr) { ready <- a }
	srv.collectCounters = func(c *rnic.Counters) { r.srvC = c.Snapshot() }
	cli.collectCounters = func(c *rnic.Counters) { r.cliC = c.Snapshot() }
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv, &so, &so) }()
	var frames func() (mpa.Frame, mpa.Frame, error)
	select {
	case a := <-ready:
		cli.Port, frames = mpaRelay(t, a.String())
	case err := <-done:
		t.Fatalf("server: %v", err)
	}
	r.cliErr = Run(ctx, cli, &co, &co)
	r.srvErr = <-done
	var err error
	if r.req, r.rep, err = frames(); err != nil {
		t.Fatalf("relay: %v", err)
	}
	r.srvOut, r.cliOut = so.String(), co.String()
	return r
}

func TestRpingLoopback(t *testing.T) {
	for _, size := range []int{MinSize, 64, 4096, MaxSize} {
		for _, crc := range []bool{false, true} {
			t.Run(fmt.Sprintf("S%d/crc=%v", size, crc), func(t *testing.T) {
				const count = 20
				o := Options{Size: size, Count: count, Verbose: true, Validate: true, CRC: crc}
				r := runPair(t, Options{Size: size, Verbose: true, CRC: false}, o)
				if r.cliErr != nil || r.srvErr != nil {
					t.Fatalf("client: %v\nserver: %v\n%s\n%s", r.cliErr, r.srvErr, r.cliOut, r.srvOut)
				}
				for i := 0; i < count; i++ {
					buf := make([]byte, size)
					fillSource(buf, i, byte('A'+i%58))
					line := string(buf[:size-1])
					if !strings.Contains(r.cliOut, "ping data: "+line+"\n") {
						t.Fatalf("client output lacks ping %d (%q):\n%s", i, line, r.cliOut)
					}
					if !strings.Contains(r.srvOut, "server ping data: "+line+"\n") {
						t.Fatalf("server output lacks ping %d", i)
					}
				}
				if n := strings.Count(r.cliOut, "ping data: "); n != count {
					t.Fatalf("client printed %d pings, want %d", n, count)
				}
				if !strings.Contains(r.srvOut, "server DISCONNECT EVENT...") {
					t.Fatalf("server did not see the disconnect:\n%s", r.srvOut)
				}
				// The client asks for CRC when told; the server (not told) follows in its
				// Reply (RFC 5044 §7.1.1); rping asks for IRD=ORD=1, client-server model.
				if r.req.CRC != crc || r.rep.CRC != crc || !r.req.Enhanced || r.req.Rev != 2 || r.rep.Rev != 2 ||
					r.req.IRD != 1 || r.req.ORD != 1 || r.req.P2P || r.rep.Reject {
					t.Fatalf("MPA Request %+v Reply %+v", r.req, r.rep)
				}
				// Per ping: the client sends 2×16 bytes, the server 2×16 + Read response + Write.
				if want := uint64(count * 2 * infoLen); r.cliC.TxBytes < want || r.cliC.CRCErrors != 0 || r.srvC.CRCErrors != 0 {
					t.Fatalf("counters client %+v server %+v", r.cliC, r.srvC)
				}
			})
		}
	}
}

func TestRpingFaults(t *testing.T) {
	cases := []struct {
		name          string
		srv, cli      Options
		srvWant       string // in the server's error
		cliWant       string // in the client's error
		clientNoPings bool
	}{
		{
			name: "server writes to an invalid STag",
			srv:  Options{Size: 64, Fault: FaultWriteBadSTag},
			cli:  Options{Size: 64, Count: 3, Verbose: true},
			// RFC 5041 §7.2: tagged buffer error, invalid STag (DDP layer 1, type 1, code 0).
			srvWant: "Terminate received: DDP tagged buffer error: invalid STag (1/1/0x00)",
			cliWant: "Terminate sent: DDP tagged buffer error: invalid STag (1/1/0x00)", clientNoPings: true,
		},
		{
			name: "server reads from an invalid STag",
			srv:  Options{Size: 64, Fault: FaultReadBadSTag},
			cli:  Options{Size: 64, Count: 3, Verbose: true},
			// The Read completes with a remote access error (RFC 5040 §7.4.1).
			srvWant: "status 9 (RemAccessErr) opcode Read: Terminate received: RDMAP remote protection error: invalid STag (0/1/0x00)",
			cliWant: "Terminate sent: RDMAP remote protection error: invalid STag (0/1/0x00)", clientNoPings: true,
		},
		{
			name: "client advertises a sink the server's Write overruns",
			srv:  Options{Size: 64},
			cli:  Options{Size: 64, Count: 3, Verbose: true, Fault: FaultSinkOOB},
			// RFC 5041 §7.2: tagged buffer error, base or bounds violation (1/1/0x01).
			srvWant: "Terminate received: DDP tagged buffer error: base or bounds violation (1/1/0x01)",
			cliWant: "Terminate sent: DDP tagged buffer error: base or bounds violation (1/1/0x01)", clientNoPings: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runPair(t, c.srv, c.cli)
			t.Logf("server: %v\nclient: %v", r.srvErr, r.cliErr)
			if r.srvErr == nil || !strings.Contains(r.srvErr.Error(), c.srvWant) {
				t.Errorf("server error %v, want %q\n%s", r.srvErr, c.srvWant, r.srvOut)
			}
			if r.cliErr == nil || !strings.Contains(r.cliErr.Error(), c.cliWant) {
				t.Errorf("client error %v, want %q\n%s", r.cliErr, c.cliWant, r.cliOut)
			}
			if c.clientNoPings && strings.Contains(r.cliOut, "ping data: ") {
				t.Errorf("client completed a ping despite the fault:\n%s", r.cliOut)
			}
			if errors.Is(r.srvErr, context.DeadlineExceeded) || errors.Is(r.cliErr, context.DeadlineExceeded) {
				t.Errorf("timed out: server %v client %v", r.srvErr, r.cliErr)
			}
		})
	}
}

// TestFillSourceAllocs: building a ping's payload allocates nothing.
func TestFillSourceAllocs(t *testing.T) {
	buf := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { fillSource(buf, 123456, 'Q') }); n != 0 {
		t.Fatalf("fillSource allocates %v times per call", n)
	}
	if want := fmt.Sprintf(msgFmt, 123456); !bytes.HasPrefix(buf, []byte(want)) {
		t.Fatalf("prefix %q, want %q", buf[:len(want)], want)
	}
}

// BenchmarkRpingLoopback measures one rping round (Send, Read, Send, Send, Write, Send)
// between softrnic server and client over loopback TCP; bytes are the pinged buffer read
// and written back.
func BenchmarkRpingLoopback(b *testing.B) {
	for _, size := range []int{64, 4096, 65535} {
		b.Run(fmt.Sprintf("S%d", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(2 * size))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ready := make(chan net.Addr, 1)
			srv := Options{Server: true, Addr: "127.0.0.1", Size: size, Listening: func(a net.Addr) { ready <- a }}
			done := make(chan error, 1)
			go func() { done <- Run(ctx, srv, nil, nil) }()
			var a net.Addr
			select {
			case a = <-ready:
			case err := <-done:
				b.Fatal(err)
			}
			cli := Options{Addr: "127.0.0.1", Port: a.(*net.TCPAddr).Port, Size: size, Count: b.N, Validate: true}
			b.ResetTimer()
			if err := Run(ctx, cli, nil, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
