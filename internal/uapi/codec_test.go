package uapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func rd(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func TestRequestRoundTrip(t *testing.T) {
	for _, q := range []Request{
		{Op: OpGet},
		{Op: OpSet},
		{Op: OpSet, Pairs: []Pair{{"listen_iwarp", "127.0.0.1:4000"}, {"close_qp", "3"}, {"x", ""}}},
		{Op: OpSet, Pairs: []Pair{{"k", strings.Repeat("v", MaxValue)}, {strings.Repeat("k", MaxKey), "= ~"}}},
	} {
		if !q.Valid() {
			t.Fatalf("%+v not valid", q)
		}
		b := q.Append(nil)
		got, err := ReadRequest(rd(string(b)))
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if got.Op != q.Op || len(got.Pairs) != len(q.Pairs) || (len(q.Pairs) > 0 && !reflect.DeepEqual(got.Pairs, q.Pairs)) {
			t.Fatalf("%q: got %+v want %+v", b, got, q)
		}
	}
	// Two requests back to back on one stream.
	r := rd("get=1\n\nset=1\nclose_qp=1\n\n")
	if q, err := ReadRequest(r); err != nil || q.Op != OpGet {
		t.Fatal(q, err)
	}
	if q, err := ReadRequest(r); err != nil || q.Op != OpSet || q.Pairs[0] != (Pair{"close_qp", "1"}) {
		t.Fatal(q, err)
	}
	if _, err := ReadRequest(r); err != io.EOF {
		t.Fatal(err)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []Response{
		{},
		{Pairs: []Pair{{"device", "softrnic0"}, {"tx_bytes", "12"}}},
		{Errno: ENOENT, Message: "no QP 7"},
		{Errno: EPROTO},
		{Pairs: []Pair{{"a", "b"}}, Errno: EIO, Message: "partial"},
	} {
		if !r.Valid() {
			t.Fatalf("%+v not valid", r)
		}
		b := r.Append(nil)
		got, err := ReadResponse(rd(string(b)))
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		if got.Errno != r.Errno || got.Message != r.Message || len(got.Pairs) != len(r.Pairs) ||
			(len(r.Pairs) > 0 && !reflect.DeepEqual(got.Pairs, r.Pairs)) {
			t.Fatalf("%q: got %+v want %+v", b, got, r)
		}
		if (got.Err() == nil) != (r.Errno == 0) {
			t.Fatal(got.Err())
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", io.EOF},
		{"get=1", io.ErrUnexpectedEOF},
		{"get=1\n", io.ErrUnexpectedEOF},
		{"get=2\n\n", ErrUnknownOp},
		{"put=1\n\n", ErrUnknownOp},
		{"get\n\n", ErrMalformed},
		{"=1\n\n", ErrMalformed},
		{"\n", ErrMalformed},
		{"get=1\nx=y\n\n", ErrMalformed},
		{"set=1\nKey=v\n\n", ErrMalformed},
		{"set=1\nkey\n\n", ErrMalformed},
		{"set=1\nk=v\r\n\n", ErrMalformed},
		{"set=1\nk=\x00\n\n", ErrMalformed},
		{"set=1\nk=\xff\n\n", ErrMalformed},
		{"set=1\nk-x=v\n\n", ErrMalformed},
		{"set=1\nk=v\n", io.ErrUnexpectedEOF},
		{"set=1\nk=v", io.ErrUnexpectedEOF},
		{"set=1\nk=" + strings.Repeat("v", MaxValue+1) + "\n\n", ErrMalformed},
		{"set=1\nk=" + strings.Repeat("v", 100000), ErrTooLong},
		{"set=1\n" + strings.Repeat(strings.Repeat("k", MaxKey+1)+"=v\n", 1) + "\n", ErrMalformed},
		{"set=1\n" + strings.Repeat("k=v\n", MaxPairs+1) + "\n", ErrTooLong},
	} {
		_, err := ReadRequest(rd(tc.in))
		if !errors.Is(err, tc.want) {
			in := tc.in
			if len(in) > 40 {
				in = in[:40] + "…"
			}
			t.Errorf("%q: %v, want %v", in, err, tc.want)
		}
	}
}

func TestMalformedResponses(t *testing.T) {
	for _, in := range []string{
		"", "errno=0\n", "errno=0", "a=b\n\n", "errno=x\n\n", "errno=-1\n\n", "errno=01\n\n", "errno=+1\n\n",
		"errno=99999999999999999999\n\n", "errno=0\nx=y\n\n", "errno=5\n\n", "error=m\nerrno=0\n\n",
		"error=m\na=b\nerrno=5\n\n", "A=b\nerrno=0\n\n",
	} {
		if r, err := ReadResponse(rd(in)); err == nil {
			t.Errorf("%q: accepted as %+v", in, r)
		}
	}
}

// Every strict prefix of a valid message is an error, never a success or a panic.
func TestTruncation(t *testing.T) {
	q := Request{Op: OpSet, Pairs: []Pair{{"listen_iwarp", "127.0.0.1:1"}, {"close_qp", "2"}}}
	b := q.Append(nil)
	for i := range b {
		if _, err := ReadRequest(rd(string(b[:i]))); err == nil {
			t.Errorf("request prefix %q accepted", b[:i])
		}
	}
	r := Response{Pairs: []Pair{{"a", "b"}}, Errno: 2, Message: "m"}
	b = r.Append(nil)
	for i := range b {
		if _, err := ReadResponse(rd(string(b[:i]))); err == nil {
			t.Errorf("response prefix %q accepted", b[:i])
		}
	}
}

func TestStatusRoundTrip(t *testing.T) {
	s := Status{Device: "softrnic0", ListenIWARP: []string{"127.0.0.1:4000", "[::1]:4000"},
		ListenRoCEv2: []string{"127.0.0.1:4791"}, RoCEv2CMPort: 7471, TargetAddr: 1 << 40, TargetRKey: 0x1234501, TargetLen: 1 << 20,
		Counters: Counters{1, 2, 3, 4, 5, 6, 7, 8, 9},
		Daemon:   DaemonCounters{CtlClients: 1, Attached: 2, MADsIn: 3, DREQsSent: 4, RelayDropped: 5},
		Steering: "bpf",
		Netdev:   "eth0", PortState: "ACTIVE", MTU: 1500, GIDs: []string{"::ffff:192.0.2.1", "fe80::1"},
		Processes: []ProcStatus{{PID: 4242, Slot: 1, QPs: 3, Since: 1795000000, Comm: "kv,server"},
			{PID: 7, Slot: 2, QPs: 0, Since: 0, Comm: ""}},
		QPs: []QPStatus{
			{QPN: 1, Transport: "iwarp", State: "RTS", Peer: "127.0.0.1:5555", PID: 4242, Comm: "kv,server", Counters: Counters{TxBytes: 10, NAKs: 1<<64 - 1}},
			{QPN: 2, Transport: "rocev2", State: "ERROR", Peer: "127.0.0.1:4791", Counters: Counters{RxSegments: 3}},
		}}
	resp := Response{Pairs: s.Pairs()}
	if !resp.Valid() {
		t.Fatal("invalid pairs")
	}
	got, err := ReadResponse(rd(string(resp.Append(nil))))
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeStatus(got.Pairs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, s) {
		t.Fatalf("got %+v\nwant %+v", d, s)
	}
	for _, bad := range [][]Pair{
		{{"tx_bytes", "x"}}, {{"qp", "-1"}}, {{"qp", "4294967296"}}, {{"state", "RTS"}},
		{{"device", "a"}, {"device", "b"}}, {{"qp", "1"}, {"device", "a"}}, {{"target_rkey", "4294967296"}}, {{"rocev2_cm_port", "65536"}},
		{{"proc", "1,2,3"}}, {{"proc", "x,1,1,1,c"}}, {{"proc", "-1,1,1,1,c"}}, {{"qp", "1"}, {"proc", "1,1,1,1,c"}}, {{"pid", "1"}}, {{"qp", "1"}, {"pid", "x"}},
	} {
		if _, err := DecodeStatus(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	// Unknown keys are ignored.
	if d, err := DecodeStatus([]Pair{{"future", "x"}, {"qp", "1"}, {"future", "y"}}); err != nil || len(d.QPs) != 1 {
		t.Fatal(d, err)
	}
}

func TestSanitize(t *testing.T) {
	if got := Sanitize("a\nb\x00c"); got != "a?b?c" {
		t.Fatal(got)
	}
	if got := Sanitize(strings.Repeat("\n", MaxValue+5)); len(got) != MaxValue || !ValidValue(got) {
		t.Fatal(len(got))
	}
}

// testHandler records sets and fails on a key named "fail".
type testHandler struct {
	mu   sync.Mutex
	sets [][]Pair
}

func (h *testHandler) Get(Query) ([]Pair, error) { return []Pair{{"device", "t"}}, nil }
func (h *testHandler) Set(ps []Pair) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sets = append(h.sets, ps)
	for _, p := range ps {
		switch p.Key {
		case "fail":
			return Errorf(ENOENT, "no %s", p.Value)
		case "plain":
			return errors.New("line1\nline2")
		}
	}
	return nil
}

func sockPath(t *testing.T) string {
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "uapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "sub", "s.sock")
}

func TestServer(t *testing.T) {
	path := sockPath(t)
	h := &testHandler{}
	srv, err := Listen(path, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	if _, err := Listen(path, h, nil); !errors.Is(err, ErrInUse) {
		t.Fatalf("second listener: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := GetStatus(ctx, path)
	if err != nil || st.Device != "t" {
		t.Fatal(st, err)
	}
	if _, err := Do(ctx, path, Request{Op: OpSet, Pairs: []Pair{{"close_qp", "1"}}}); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := Do(ctx, path, Request{Op: OpSet, Pairs: []Pair{{"fail", "x"}}}); !errors.As(err, &e) || e.Errno != ENOENT || e.Message != "no x" {
		t.Fatal(err)
	}
	if _, err := Do(ctx, path, Request{Op: OpSet, Pairs: []Pair{{"plain", "x"}}}); !errors.As(err, &e) || e.Errno != EIO || e.Message != "line1?line2" {
		t.Fatal(err)
	}
	// Malformed input is answered with EPROTO and never reaches the handler.
	n := len(h.sets)
	for _, raw := range []string{"set=1\nBAD=1\n\n", "hello\n\n", "set=1\nk=\x01\n\n"} {
		c, err := (&netDialer{}).dial(path)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(raw))
		resp, err := ReadResponse(bufio.NewReader(c))
		c.Close()
		if err != nil || resp.Errno != EPROTO {
			t.Fatalf("%q: %+v %v", raw, resp, err)
		}
	}
	if len(h.sets) != n {
		t.Fatal("malformed request reached the handler")
	}
	// Several requests on one connection.
	c, err := (&netDialer{}).dial(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("get=1\n\nget=1\n\n"))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		if r, err := ReadResponse(br); err != nil || r.Errno != 0 {
			t.Fatal(i, r, err)
		}
	}
	// Close with a client still connected: it must not hang, and the socket goes away.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if _, err := Do(ctx, path, Request{Op: OpGet}); err == nil {
		t.Fatal("closed server answered")
	}
}

func TestListenStaleSocket(t *testing.T) {
	path := sockPath(t)
	srv, err := Listen(path, &testHandler{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.ln.(*net.UnixListener).SetUnlinkOnClose(false) // simulate a crashed daemon
	srv.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatal("stale socket missing:", err)
	}
	srv, err = Listen(path, &testHandler{}, nil)
	if err != nil {
		t.Fatal("stale socket not replaced:", err)
	}
	srv.Close()
	// A regular file is never removed.
	os.WriteFile(path, []byte("x"), 0o600)
	if _, err := Listen(path, &testHandler{}, nil); err == nil {
		t.Fatal("regular file replaced")
	}
}

func FuzzRequest(f *testing.F) {
	for _, s := range []string{"get=1\n\n", "set=1\nlisten_iwarp=127.0.0.1:1\nclose_qp=2\n\n", "set=1\n\n",
		"set=1\nk=v", "get=1\nx=y\n\n", "set=1\nk=\xff\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		q, err := ReadRequest(r)
		if err != nil {
			return
		}
		if !q.Valid() {
			t.Fatalf("parsed invalid request %+v", q)
		}
		enc := q.Append(nil)
		q2, err := ReadRequest(rd(string(enc)))
		if err != nil || q2.Op != q.Op || len(q2.Pairs) != len(q.Pairs) {
			t.Fatalf("round trip %q: %+v %v", enc, q2, err)
		}
		for i := range q.Pairs {
			if q.Pairs[i] != q2.Pairs[i] {
				t.Fatal("pair", i)
			}
		}
		// The encoding is canonical: it is what was read, byte for byte.
		if !bytes.HasPrefix(b, enc) {
			t.Fatalf("%q does not start with its encoding %q", b, enc)
		}
	})
}

func FuzzResponse(f *testing.F) {
	for _, s := range []string{"errno=0\n\n", "device=x\nqp=1\ntx_bytes=5\nerrno=0\n\n", "error=x\nerrno=2\n\n", "errno=01\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ReadResponse(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		if !r.Valid() {
			t.Fatalf("parsed invalid response %+v", r)
		}
		enc := r.Append(nil)
		if !bytes.HasPrefix(b, enc) {
			t.Fatalf("%q does not start with its encoding %q", b, enc)
		}
		if s, err := DecodeStatus(r.Pairs); err == nil {
			p := Response{Pairs: s.Pairs()}
			if !p.Valid() {
				t.Fatal("status encodes invalid pairs")
			}
		}
	})
}

type netDialer struct{}

func (netDialer) dial(path string) (interface {
	io.ReadWriteCloser
}, error) {
	return net.Dial("unix", path)
}
