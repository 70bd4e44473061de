package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParsePerftestArgs(t *testing.T) {
	o, err := ParseArgs([]string{"write", "-R", "-s", "4096", "-n100", "--port=9999", "-q", "1", "--report_gbits", "-F", "-d", "siw0", "-x", "0", "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Verb != Write || o.Size != 4096 || o.Iters != 100 || o.Port != 9999 || !o.Gbits || o.Peer != "10.0.0.1" ||
		o.TxDepth != 100 || o.CQMod != 100 {
		t.Fatalf("parsed %+v", o)
	}
	o, err = ParseArgs([]string{"write"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Port != 18515 || o.Size != 65536 || o.Iters != 5000 || o.TxDepth != 128 || o.Peer != "" || o.RxDepth != 1 {
		t.Fatalf("write defaults: %+v", o)
	}
	o, err = ParseArgs([]string{"send", "--iters", "7"})
	if err != nil {
		t.Fatal(err)
	}
	// force_dependecies: rx depth ≤ iters, then rounded up to even; TX depth and CQ moderation ≤ iters.
	if o.Iters != 7 || o.RxDepth != 8 || o.TxDepth != 7 || o.CQMod != 7 {
		t.Fatalf("send -n 7: %+v", o)
	}
	if o, _ = ParseArgs([]string{"read"}); o.Iters != 1000 || o.OutReads != 128 {
		t.Fatalf("read defaults: %+v", o)
	}
	for _, bad := range [][]string{
		{}, {"atomic"}, {"write", "-n", "4"}, {"write", "-q", "2"}, {"write", "-s", "0"}, {"send", "-D", "5"}, {"write", "-D", "0"},
		{"write", "-c", "UD"}, {"write", "a", "b"}, {"write", "-p"}, {"write", "--nope"}, {"write", "-Rx"},
		{"write", "--timeout", "x"}, {"write", "-p", "70000"}, {"send", "-s", "x"},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestPtDestLayout checks struct pingpong_dest's wire layout (LP64, HAVE_ENDIAN).
func TestPtDestLayout(t *testing.T) {
	d := dest{LID: 1, OutReads: 0x80, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234_5678, VAddr: 0x0102_0304_0506_0708,
		SRQN: 9, GIDIndex: 0xffffffff}
	for i := range d.GID {
		d.GID[i] = byte(0xa0 + i)
	}
	b := d.Append(nil)
	if len(b) != 56 {
		t.Fatalf("len %d, want 56", len(b))
	}
	want := []byte{0, 0, 0, 1, 0, 0, 0, 0x80, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(b[:32], want) || b[32] != 0xa0 || b[47] != 0xaf || !bytes.Equal(b[48:], []byte{0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("wire form % x", b)
	}
	got, err := parseDest(b)
	if err != nil || got != d {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for n := 0; n < 56; n++ {
		if _, err := parseDest(b[:n]); err == nil {
			t.Fatalf("parsed a %d-byte prefix", n)
		}
	}
}

func TestPtMessages(t *testing.T) {
	v := versionMsg("6.06")
	if len(v) != 16 || string(v[:5]) != "6.06\x00" {
		t.Fatalf("version message %q", v)
	}
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{{"6.06", 6.06, true}, {"5.70\x00junk", 5.70, true}, {"6.2a", 6.2, true}, {"", 0, false}, {"x", 0, false}} {
		_, f, err := parseVersion([]byte(c.in))
		if (err == nil) != c.ok || f != c.want {
			t.Errorf("parseVersion(%q) = %v, %v", c.in, f, err)
		}
	}
	if m := int32Msg(4096); !bytes.Equal(m, []byte{0, 0, 0x10, 0}) {
		t.Errorf("int message % x", m)
	}
	if n, err := parseInt32([]byte{0xff, 0xff, 0xff, 0xff}); n != -1 || err != nil {
		t.Errorf("parseInt32 = %d, %v", n, err)
	}
	if m := mtuMsg(3); !bytes.Equal(m, []byte{'3', 0}) || parseMTU(m) != 3 || parseMTU([]byte{'9', 0}) != 0 || parseMTU(nil) != 0 {
		t.Errorf("MTU message % x", m)
	}
	r := bwReport{Size: 65536, Iters: 5000, Peak: 1234.5, Avg: 1000.25, MsgRateAvg: 0.016}
	msgs := r.messages(6.06)
	if len(msgs) != 5 || binary.BigEndian.Uint64(msgs[1]) != 5000 || math.Float64frombits(binary.BigEndian.Uint64(msgs[3])) != 1000.25 {
		t.Fatalf("report messages % x", msgs)
	}
	var back bwReport
	for i, m := range msgs {
		if err := back.setField(i, m, 6.06); err != nil {
			t.Fatal(err)
		}
	}
	if back != r {
		t.Fatalf("report round trip %+v, want %+v", back, r)
	}
	// Peers older than 5.33 send a 4-byte iteration count.
	if old := r.messages(5.0); len(old[1]) != 4 {
		t.Fatalf("old iters field % x", old[1])
	}
	if err := back.setField(1, []byte{0, 0, 0}, 5.0); err == nil {
		t.Fatal("short field accepted")
	}
}

func TestLoadCredit(t *testing.T) {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b, 0x01020304)
	if v := loadCredit(&b[0]); v != 0x01020304 {
		t.Fatalf("loadCredit = %#x", v)
	}
}

// runPerftestPair runs a softrnic perftest server and client on loopback and returns
// their outputs and reports.
func runPerftestPair(t testing.TB, verb string, args []string, tweak func(srv, cli *Options)) (srvOut, cliOut string, srvRep, cliRep []bwReport, srvErr, cliErr error) {
	t.Helper()
	so, err := ParseArgs(append([]string{verb, "--bind", "127.0.0.1", "-p", "0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sb, cb bytes.Buffer
	so.Timeout = 60 * time.Second
	addrc := make(chan net.Addr, 1)
	so.Listening = func(a net.Addr) { addrc <- a }
	so.gotReport = func(r bwReport) { mu.Lock(); srvRep = append(srvRep, r); mu.Unlock() }
	ctx := context.Background()
	co := so
	co.Listening = nil
	co.Linger = 10 * time.Millisecond // our server waits for the client to close
	if tweak != nil {
		tweak(&so, &co)
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, so, &sb, nil) }()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("server: %v", err)
	}
	co.Peer = "127.0.0.1"
	co.Port = addr.(*net.TCPAddr).Port
	co.gotReport = func(r bwReport) { mu.Lock(); cliRep = append(cliRep, r); mu.Unlock() }
	cliErr = Run(ctx, co, &cb, nil)
	srvErr = <-done
	return sb.String(), cb.String(), srvRep, cliRep, srvErr, cliErr
}

// TestPerftestLoopback runs every test with softrnic at both ends, over the same
// exchange perftest uses, and checks both reports.
func TestPerftestLoopback(t *testing.T) {
	for _, c := range []struct {
		verb  string
		size  int
		iters int
	}{{"write", 65536, 200}, {"write", 2, 1000}, {"read", 65536, 200}, {"read", 100, 333}, {"send", 65536, 300}, {"send", 1, 2000}} {
		t.Run(c.verb+"/"+strconv.Itoa(c.size), func(t *testing.T) {
			args := []string{"-R", "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters)}
			so, co, sr, cr, serr, cerr := runPerftestPair(t, c.verb, args, nil)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, so, cerr, co)
			}
			if len(sr) != 1 || len(cr) != 1 {
				t.Fatalf("reports: server %v client %v", sr, cr)
			}
			for who, r := range map[string]bwReport{"server": sr[0], "client": cr[0]} {
				if r.Size != uint64(c.size) || r.Iters != uint64(c.iters) || !(r.Avg > 0) || r.Peak < r.Avg || !(r.MsgRateAvg > 0) {
					t.Errorf("%s report %+v", who, r)
				}
			}
			// Write/Read servers print the client's report, received over the exchange.
			if c.verb != "send" && sr[0] != cr[0] {
				t.Errorf("server printed %+v, client measured %+v", sr[0], cr[0])
			}
			for _, out := range []string{so, co} {
				if !strings.Contains(out, "BW average[MB/sec]") || !strings.Contains(out, "remote address: LID") {
					t.Errorf("output lacks the report table:\n%s", out)
				}
			}
			if !strings.Contains(so, "Waiting for client to connect") {
				t.Errorf("server banner missing:\n%s", so)
			}
		})
	}
}

// TestPerftestCreditsBoundSends: the Send client honours the server's credits.
func TestPerftestCreditsBoundSends(t *testing.T) {
	// A server that grants no credit: the client must stop after rx-depth - 1 sends
	// instead of overrunning the server's receives (which on iWARP is a Terminate).
	_, co, _, _, serr, cerr := runPerftestPair(t, "send", []string{"-s", "64", "-n", "100", "-r", "8"}, func(srv, cli *Options) {
		srv.testCredit = func(uint32) uint32 { return 0 }
		srv.Timeout = 3 * time.Second
		cli.Timeout = 2 * time.Second
	})
	if cerr == nil || !strings.Contains(cerr.Error(), "waiting for credits (scnt=7)") {
		t.Fatalf("client: %v\n%s", cerr, co)
	}
	if serr == nil || strings.Contains(serr.Error(), "Terminate") {
		t.Fatalf("server should time out waiting, without a Terminate: %v", serr)
	}
}

func TestPerftestReportGbits(t *testing.T) {
	so, co, sr, cr, serr, cerr := runPerftestPair(t, "write", []string{"-s", "4096", "-n", "50", "--report_gbits"}, nil)
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v\nclient: %v", serr, cerr)
	}
	if !strings.Contains(co, "BW average[Gb/sec]") || !strings.Contains(so, "BW average[Gb/sec]") {
		t.Fatalf("no Gb/s header:\n%s\n%s", so, co)
	}
	if len(sr) != 1 || len(cr) != 1 || sr[0] != cr[0] {
		t.Fatalf("reports %v %v", sr, cr)
	}
}

// TestPerftestVersionCheck: a peer older than perftest 5.70 is refused, as perftest does.
func TestPerftestVersionCheck(t *testing.T) {
	if _, f, _ := parseVersion(versionMsg("5.60")); f >= minVersion {
		t.Fatalf("5.60 parsed as %v", f)
	}
}

// BenchmarkPerftestLoopback runs each test with b.N iterations of 64 KiB over loopback;
// allocs/op shows that the posting and polling loops do not allocate (the per-run setup
// is amortised over b.N).
func BenchmarkPerftestLoopback(b *testing.B) {
	for _, verb := range []string{"write", "read", "send"} {
		b.Run(verb, func(b *testing.B) {
			n := max(b.N, MinIters)
			b.SetBytes(65536)
			b.ReportAllocs()
			b.ResetTimer()
			_, _, _, _, serr, cerr := runPerftestPair(b, verb, []string{"-s", "65536", "-n", strconv.Itoa(n)}, func(srv, cli *Options) {
			})
			if serr != nil || cerr != nil {
				b.Fatalf("server: %v client: %v", serr, cerr)
			}
		})
	}
}

// FuzzPtMessages feeds arbitrary peer messages to every decoder of the exchange: none may
// panic, and a decoded pingpong_dest re-encodes to the same 56 bytes.
func FuzzPtMessages(f *testing.F) {
	d := dest{QPN: 2, PSN: 0x56be6a, RKey: 0x01120b00, VAddr: 0x7f5595698000, GIDIndex: 0xffffffff}
	f.Add(d.Append(nil))
	f.Add(versionMsg("6.06"))
	f.Add([]byte{'3', 0})
	f.Add([]byte{0, 0, 0x10, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := parseDest(b); err == nil {
			if got := d.Append(nil); !bytes.Equal(got[:20], b[:20]) || !bytes.Equal(got[24:], b[24:56]) {
				t.Fatalf("dest round trip % x -> % x", b[:56], got)
			}
		}
		_, _, _ = parseVersion(b)
		_, _ = parseInt32(b)
		_ = parseMTU(b)
		var r bwReport
		for i := 0; i < 5; i++ {
			_ = r.setField(i, b, 6.06)
			_ = r.setField(i, b, 5.0)
		}
	})
}

// TestPerftestDuration: -D runs the client for a time instead of a count; the server
// prints the client's report (count and rates) as it does for -n.
func TestPerftestDuration(t *testing.T) {
	for _, verb := range []string{"write", "read"} {
		t.Run(verb, func(t *testing.T) {
			t0 := time.Now()
			_, co, sr, cr, serr, cerr := runPerftestPair(t, verb, []string{"-s", "4096", "-n", "5", "-D", "1"}, nil)
			if serr != nil || cerr != nil {
				t.Fatalf("server: %v\nclient: %v\n%s", serr, cerr, co)
			}
			if d := time.Since(t0); d < time.Second {
				t.Errorf("a 1 s test took %v", d)
			}
			// -n 5 is ignored under -D: many more messages complete in a second.
			if len(cr) != 1 || len(sr) != 1 || cr[0] != sr[0] || cr[0].Iters <= 5 || !(cr[0].Avg > 0) {
				t.Fatalf("reports: server %+v client %+v", sr, cr)
			}
		})
	}
}
