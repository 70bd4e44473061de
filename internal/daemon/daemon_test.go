package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/internal/tools/perftest"
	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/tools/stat"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

func TestParseDaemonArgs(t *testing.T) {
	o, err := ParseArgs([]string{"-iwarp", "127.0.0.1:1", "-iwarp", "[::1]:2", "-rocev2", "127.0.0.1", "-name", "x"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Sock != "/run/softrnic/x.sock" || len(o.IWARP) != 2 || o.IWARP[1] != "[::1]:2" || o.TargetMiB != DefaultTargetMiB ||
		o.CMPort != DefaultCMPort || o.PeerPort != -1 || o.Foreground {
		t.Fatalf("%+v", o)
	}
	if o.StrictICRC {
		t.Fatal("-strict-icrc is off by default")
	}
	if o, err := ParseArgs([]string{"-rocev2", "127.0.0.1", "-strict-icrc"}, &bytes.Buffer{}); err != nil || !o.StrictICRC {
		t.Fatalf("-strict-icrc: %+v %v", o, err)
	}
	if a, err := parseRoCEAddr("127.0.0.1"); err != nil || a.Port() != 4791 {
		t.Fatal(a, err)
	}
	if a, err := parseRoCEAddr("[::1]:5000"); err != nil || a.Port() != 5000 {
		t.Fatal(a, err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "softrnic.conf")
	os.WriteFile(cfg, []byte("# comment\nname = conf0\niwarp=127.0.0.1:5\niwarp=127.0.0.1:6\ntarget-mib=3\nforeground=true\n"), 0o600)
	o, err = ParseArgs([]string{"-config", cfg, "-target-mib", "7"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "conf0" || o.Sock != "/run/softrnic/conf0.sock" || len(o.IWARP) != 2 || o.TargetMiB != 7 || !o.Foreground {
		t.Fatalf("config: %+v", o)
	}
	// A flag that works through a transport names the one it lacks.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-rping", "127.0.0.1:7174"}, "-rping runs an iWARP rping server: it needs -iwarp"},
		{[]string{"-rocev2", "127.0.0.1", "-perftest", "127.0.0.1:1"}, "-perftest runs an iWARP perftest server: it needs -iwarp"},
		{[]string{"-rocev2", "127.0.0.1", "-crc"}, "-crc is an iWARP (MPA) option: it needs -iwarp"},
		{[]string{"-iwarp", "127.0.0.1:1", "-rocev2-cm-port", "7000"}, "-rocev2-cm-port is the RoCEv2 listener's RDMA-CM port: it needs -rocev2"},
		{[]string{"-target-mib", "1"}, "no transport: give -iwarp and/or -rocev2"},
	} {
		if _, err := ParseArgs(c.args, &bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	os.WriteFile(cfg, []byte("iwarp=127.0.0.1:1\nrping=127.0.0.1:2\n"), 0o600)
	if _, err := ParseArgs([]string{"-config", cfg}, &bytes.Buffer{}); err != nil {
		t.Errorf("rping and iwarp from a config file: %v", err)
	}
	os.WriteFile(cfg, []byte("bogus=1\n"), 0o600)
	for _, bad := range [][]string{
		{}, {"-iwarp", "x:1", "stray"}, {"-iwarp", "x:1", "-target-mib", "4096"}, {"-iwarp", "x:1", "-rocev2-cm-port", "0"},
		{"-iwarp", "x:1", "-perftest-verb", "atomic"}, {"-config", cfg, "-iwarp", "x:1"}, {"-config", filepath.Join(dir, "none")},
	} {
		if _, err := ParseArgs(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// testSock returns a short socket path (sun_path holds 108 bytes; t.TempDir may be longer).
func testSock(t *testing.T) string {
	dir, err := os.MkdirTemp("", "srd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "d.sock")
}

// startDaemon starts a daemon in the foreground on a fresh control socket with args (the
// daemon's flags), logging to the test; it closes when the test ends.
func startDaemon(t *testing.T, args ...string) (*Daemon, string) {
	t.Helper()
	sock := testSock(t)
	o, err := ParseArgs(append([]string{"-foreground", "-sock", sock, "-target-mib", "16"}, args...), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, sock
}

type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// client is one initiator QP of the test.
type dClient struct {
	dev      *rnic.Device
	pd       *rnic.PD
	cq       *rnic.CQ
	qp       *rnic.QP
	src, dst []byte
	srcMR    *rnic.MR
	dstMR    *rnic.MR
	wc       [4]rnic.Completion
}

func newDClient(t *testing.T, n int, localAddr string) *dClient {
	t.Helper()
	c := &dClient{}
	var err error
	if c.dev, err = rnic.Open(rnic.Config{Name: "client", LocalAddr: localAddr}); err != nil {
		t.Fatal(err)
	}
	c.pd, _ = c.dev.AllocPD()
	c.cq, _ = c.dev.CreateCQ(64)
	if c.qp, err = c.dev.CreateQP(c.pd, rnic.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, SignalAll: true}); err != nil {
		t.Fatal(err)
	}
	c.src, c.dst = make([]byte, n), make([]byte, n)
	for i := range c.src {
		c.src[i] = byte(i*7 + i>>8 + 1)
	}
	if c.srcMR, err = c.pd.RegMR(c.src, rnic.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if c.dstMR, err = c.pd.RegMR(c.dst, rnic.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *dClient) close() {
	_ = c.qp.Destroy()
	_ = c.dev.Close()
}

// op posts one RDMA WRITE or READ and waits for its completion.
func (c *dClient) op(t *testing.T, op rnic.Opcode, off, n int, raddr uint64, rkey uint32) {
	t.Helper()
	sge := c.srcMR.SGE(off, n)
	if op == rnic.OpRead {
		sge = c.dstMR.SGE(off, n)
	}
	if err := c.qp.PostSend(&rnic.SendWR{WRID: uint64(off), Opcode: op, SGL: []rnic.SGE{sge}, RemoteAddr: raddr + uint64(off), RKey: rkey}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k, err := c.cq.Wait(ctx, c.wc[:1])
	if err != nil || k != 1 || c.wc[0].Status != rnic.StatusSuccess {
		t.Fatalf("%v off %d n %d: %v %+v", op, off, n, err, c.wc[0])
	}
}

// parseAdvert decodes the memory target's 16-byte advertisement.
func parseAdvert(t *testing.T, pd []byte) (addr uint64, rkey, n uint32) {
	t.Helper()
	b, err := rnic.ParseRemoteBuffer(pd)
	if err != nil {
		t.Fatalf("private data %d bytes: %v", len(pd), err)
	}
	return b.Addr, b.RKey, b.Len
}

func ceilDiv(n, d int) int {
	if n == 0 {
		return 1 // a zero-length message is one segment
	}
	return (n + d - 1) / d
}

// awaitStatus polls the daemon until ok accepts its status (counters are updated by the
// transport goroutines, a little after the peer's completion), failing after a generous
// bound with the last status.
func awaitStatus(t *testing.T, sock string, ok func(*uapi.Status) error) uapi.Status {
	t.Helper()
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := uapi.GetStatus(ctx, sock)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if last = ok(&s); last == nil {
			return s
		}
	}
	t.Fatal(last)
	return uapi.Status{}
}

func findQP(s *uapi.Status, qpn uint32) *uapi.QPStatus {
	for i := range s.QPs {
		if s.QPs[i].QPN == qpn {
			return &s.QPs[i]
		}
	}
	return nil
}

func sameCounters(got, want uapi.Counters) error {
	if got != want {
		return fmt.Errorf("counters %+v, want %+v", got, want)
	}
	return nil
}

func sub(a, b uapi.Counters) uapi.Counters {
	return uapi.Counters{TxBytes: a.TxBytes - b.TxBytes, RxBytes: a.RxBytes - b.RxBytes, TxSegments: a.TxSegments - b.TxSegments,
		RxSegments: a.RxSegments - b.RxSegments, CRCErrors: a.CRCErrors - b.CRCErrors, TermSent: a.TermSent - b.TermSent,
		TermRecv: a.TermRecv - b.TermRecv, Retransmits: a.Retransmits - b.Retransmits, NAKs: a.NAKs - b.NAKs}
}

func add(a, b uapi.Counters) uapi.Counters {
	return uapi.Counters{TxBytes: a.TxBytes + b.TxBytes, RxBytes: a.RxBytes + b.RxBytes, TxSegments: a.TxSegments + b.TxSegments,
		RxSegments: a.RxSegments + b.RxSegments, CRCErrors: a.CRCErrors + b.CRCErrors, TermSent: a.TermSent + b.TermSent,
		TermRecv: a.TermRecv + b.TermRecv, Retransmits: a.Retransmits + b.Retransmits, NAKs: a.NAKs + b.NAKs}
}

// qpSum is the sum of the counters of the status's QPs other than skip.
func qpSum(s *uapi.Status, skip uint32) uapi.Counters {
	var c uapi.Counters
	for _, q := range s.QPs {
		if q.QPN != skip {
			c = add(c, q.Counters)
		}
	}
	return c
}

// iwarpWant is what the daemon's iWARP QP qpn counts for the operations: every WRITE is
// ceil(len/per) tagged FPDUs of the client's MULPDU, every READ one Read Request and
// ceil(len/per) Read Response FPDUs of the daemon's. Over TCP nothing is retransmitted at
// this layer, so the numbers are exact.
func iwarpWant(t *testing.T, d *Daemon, qpn uint32, conn *iwarp.Conn, writes, reads [][2]int) uapi.Counters {
	t.Helper()
	d.mu.Lock()
	dc := d.conns[qpn]
	d.mu.Unlock()
	if dc == nil {
		t.Fatalf("daemon has no QP %d", qpn)
	}
	cliPer, srvPer := conn.MULPDU()-ddp.TaggedLen, dc.mulpdu-ddp.TaggedLen
	var want uapi.Counters
	for _, w := range writes {
		want.RxBytes += uint64(w[1])
		want.RxSegments += uint64(ceilDiv(w[1], cliPer))
	}
	for _, r := range reads {
		want.RxSegments++
		want.TxBytes += uint64(r[1])
		want.TxSegments += uint64(ceilDiv(r[1], srvPer))
	}
	// Peer-to-peer RTR: a Write RTR is not counted; a Read RTR is answered with one
	// zero-length Read Response.
	if p := conn.Params(); p.P2P && p.RTR&mpa.RTRWrite == 0 && p.RTR&mpa.RTRRead != 0 {
		want.TxSegments++
	}
	// Nudges (zero-length Writes an initiator sends while a slow responder is silent, see
	// rnic/iwarp/nudge.go) are received segments too; a loaded machine can provoke them.
	want.RxSegments += conn.Nudges()
	return want
}

// lossyLink is a RoCEv2 link that can lose one datagram it is asked to send.
type lossyLink struct {
	rocev2.Link
	mu    sync.Mutex
	pass  int // datagrams still to send before the one lost, while armed
	ndrop int
	armed bool // a datagram is still to be lost
}

// dropAfter arms the link to lose the datagram after the next n.
func (l *lossyLink) dropAfter(n int) {
	l.mu.Lock()
	l.pass, l.armed = n, true
	l.mu.Unlock()
}

func (l *lossyLink) dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ndrop
}

func (l *lossyLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	l.mu.Lock()
	if l.armed {
		if l.pass < len(bufs) {
			i := l.pass
			bufs = append(append(make([][]byte, 0, len(bufs)-1), bufs[:i]...), bufs[i+1:]...)
			l.armed = false
			l.ndrop++
		} else {
			l.pass -= len(bufs)
		}
	}
	l.mu.Unlock()
	if len(bufs) == 0 {
		return nil
	}
	return l.Link.Send(bufs, dst)
}

// statOutput runs the stat command's printer on the daemon and returns the row of qpn.
func statRow(t *testing.T, sock string, qpn string) []string {
	t.Helper()
	var b bytes.Buffer
	if err := stat.Run(context.Background(), stat.Options{Sock: sock}, &b, nil); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == qpn {
			return f
		}
	}
	t.Fatalf("no row %s in\n%s", qpn, b.String())
	return nil
}

// TestDaemonEndToEnd runs the daemon in-process on loopback, drives its memory target with
// RDMA WRITE and READ over iWARP and RoCEv2, checks the data, and checks that the counters
// the control socket reports are the ones the operations imply.
func TestDaemonEndToEnd(t *testing.T) {
	base, _ := goroutines()
	sock := testSock(t)
	o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-rocev2", "127.0.0.1:0",
		"-rocev2-cm-port", "7999", "-target-mib", "1", "-name", "e2e0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := uapi.GetStatus(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Device != "e2e0" || len(st.ListenIWARP) != 1 || len(st.ListenRoCEv2) != 1 || st.RoCEv2CMPort != 7999 ||
		st.TargetLen != 1<<20 || len(st.QPs) != 0 {
		t.Fatalf("initial status %+v", st)
	}
	const n = 300000 // more than one 64 KiB FPDU and many RoCE packets
	// Operations: (offset, length) in the client buffers and the target.
	writes := [][2]int{{0, n}, {n - 5, 5}, {1000, 0}}
	reads := [][2]int{{0, n}, {17, 4096}}

	t.Run("iwarp", func(t *testing.T) {
		c := newDClient(t, n, "")
		defer c.close()
		conn, err := iwarp.Dial(ctx, c.qp, st.ListenIWARP[0], nil, iwarp.ConnParam{})
		if err != nil {
			t.Fatal(err)
		}
		addr, rkey, tlen := parseAdvert(t, conn.PeerPrivateData())
		if addr != st.TargetAddr || rkey != st.TargetRKey || uint64(tlen) != st.TargetLen {
			t.Fatalf("advertisement %x %x %d, status %+v", addr, rkey, tlen, st)
		}
		base := awaitStatus(t, sock, func(s *uapi.Status) error {
			if len(s.QPs) != 1 || s.QPs[0].State != rnic.QPRTS.String() || s.QPs[0].Transport != "iwarp" ||
				s.QPs[0].Peer != conn.LocalAddr().String() {
				return fmt.Errorf("QPs %+v", s.QPs)
			}
			return nil
		})
		for _, w := range writes {
			c.op(t, rnic.OpWrite, w[0], w[1], addr, rkey)
		}
		for _, r := range reads {
			c.op(t, rnic.OpRead, r[0], r[1], addr, rkey)
		}
		// The data: what was written is what is read back.
		for _, r := range reads {
			if !bytes.Equal(c.dst[r[0]:r[0]+r[1]], c.src[r[0]:r[0]+r[1]]) {
				t.Fatalf("read %v: data differs", r)
			}
		}
		// The counters the operations imply: every WRITE is ceil(len/per) tagged FPDUs of
		// the client's MULPDU, every READ one Read Request and ceil(len/per) Read Response
		// FPDUs of the daemon's.
		want := iwarpWant(t, d, base.QPs[0].QPN, conn, writes, reads)
		s := awaitStatus(t, sock, func(s *uapi.Status) error {
			q := findQP(s, base.QPs[0].QPN)
			if q == nil {
				return errors.New("QP gone")
			}
			if err := sameCounters(q.Counters, want); err != nil {
				return fmt.Errorf("QP %w (client %+v)", err, c.qp.Counters().Snapshot())
			}
			// The device counts exactly its one QP's traffic.
			return sameCounters(s.Counters, want)
		})
		cs := c.qp.Counters().Snapshot()
		if cs.TxBytes != want.RxBytes || cs.RxBytes != want.TxBytes {
			t.Fatalf("client counters %+v, daemon %+v", cs, want)
		}
		// The stat table prints the same numbers.
		row := statRow(t, sock, strconv.Itoa(int(s.QPs[0].QPN)))
		if row[1] != strconv.Itoa(os.Getpid()) || row[2] != "softrnic" || row[3] != "iwarp" || row[4] != "RTS" ||
			row[6] != fmt.Sprint(want.TxBytes) || row[7] != fmt.Sprint(want.RxBytes) ||
			row[8] != fmt.Sprint(want.TxSegments) || row[9] != fmt.Sprint(want.RxSegments) {
			t.Fatalf("stat row %q, want %+v", row, want)
		}
		// JSON output decodes to the same status.
		var b bytes.Buffer
		if err := stat.Run(ctx, stat.Options{Sock: sock, JSON: true}, &b, nil); err != nil {
			t.Fatal(err)
		}
		var js uapi.Status
		if err := json.Unmarshal(b.Bytes(), &js); err != nil || len(js.QPs) != 1 || js.QPs[0].Counters != want {
			t.Fatalf("json %s: %v", b.Bytes(), err)
		}
		// close_qp disconnects the daemon's QP; the client sees its connection end.
		qpn := s.QPs[0].QPN
		if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "close_qp", Value: fmt.Sprint(qpn)}}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.qp.Done():
		case <-ctx.Done():
			t.Fatal("client QP still connected after close_qp")
		}
		awaitStatus(t, sock, func(s *uapi.Status) error {
			if len(s.QPs) != 0 {
				return fmt.Errorf("QPs after close_qp: %+v", s.QPs)
			}
			return sameCounters(s.Counters, want) // device counters outlive the QP
		})
		var e *uapi.Error
		if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "close_qp", Value: fmt.Sprint(qpn)}}}); !errors.As(err, &e) || e.Errno != uapi.ENOENT {
			t.Fatalf("close_qp of a closed QP: %v", err)
		}
	})

	var live *dClient
	defer func() {
		if live != nil {
			live.close()
		}
	}()
	t.Run("listen_iwarp", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		var e *uapi.Error
		if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "listen_iwarp", Value: addr}}}); !errors.As(err, &e) || e.Errno != uapi.EADDRINUSE {
			t.Fatalf("listen on a used port: %v", err)
		}
		l.Close()
		if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{{Key: "listen_iwarp", Value: addr}}}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []uapi.Pair{{Key: "listen_iwarp", Value: "nope"}, {Key: "close_qp", Value: "x"}, {Key: "frob", Value: "1"}} {
			if _, err := uapi.Do(ctx, sock, uapi.Request{Op: uapi.OpSet, Pairs: []uapi.Pair{bad}}); !errors.As(err, &e) || e.Errno == 0 {
				t.Fatalf("%v: %v", bad, err)
			}
		}
		s, _ := uapi.GetStatus(ctx, sock)
		if len(s.ListenIWARP) != 2 || s.ListenIWARP[1] != addr {
			t.Fatalf("listeners %v", s.ListenIWARP)
		}
		c := newDClient(t, 64, "")
		live = c
		conn, err := iwarp.Dial(ctx, c.qp, addr, nil, iwarp.ConnParam{})
		if err != nil {
			t.Fatal(err)
		}
		a, k, _ := parseAdvert(t, conn.PeerPrivateData())
		c.op(t, rnic.OpWrite, 0, 64, a, k)
		c.op(t, rnic.OpRead, 0, 64, a, k)
		if !bytes.Equal(c.dst, c.src) {
			t.Fatal("data")
		}
		// The daemon counts an FPDU after it has written it, so the client can see its READ
		// complete before the daemon has counted the response. Wait for this QP's exact
		// counts: a later subtest's "before" snapshot must not miss them.
		peer := conn.LocalAddr().String()
		var qpn uint32
		awaitStatus(t, sock, func(s *uapi.Status) error {
			for _, q := range s.QPs {
				if q.Peer == peer {
					qpn = q.QPN
					return nil
				}
			}
			return fmt.Errorf("no QP from %s: %+v", peer, s.QPs)
		})
		want := iwarpWant(t, d, qpn, conn, [][2]int{{0, 64}}, [][2]int{{0, 64}})
		awaitStatus(t, sock, func(st *uapi.Status) error {
			q := findQP(st, qpn)
			if q == nil {
				return fmt.Errorf("QP %d gone", qpn)
			}
			if err := sameCounters(q.Counters, want); err != nil {
				return fmt.Errorf("QP %d %w", qpn, err)
			}
			if dd := sub(st.Counters, s.Counters); dd != want {
				return fmt.Errorf("device grew by %+v, QP has %+v", dd, want)
			}
			return nil
		})
		// This QP stays connected: the daemon's shutdown must disconnect it.
	})

	t.Run("rocev2", func(t *testing.T) {
		before, err := uapi.GetStatus(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		c := newDClient(t, n, "127.0.0.1")
		defer c.close()
		link, err := rocev2.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
		if err != nil {
			t.Skip("no UDP socket:", err)
		}
		lossy := &lossyLink{Link: link}
		ep := rocev2.NewEndpoint(c.dev, lossy, nil)
		defer ep.Close()
		peer := netip.MustParseAddrPort(before.ListenRoCEv2[0])
		conn, err := rocev2.DialAddr(ctx, ep, c.qp, rocev2.Addr{IP: peer.Addr(), Port: before.RoCEv2CMPort, UDPPort: peer.Port()}, nil, rocev2.ConnParam{})
		if err != nil {
			t.Fatal(err)
		}
		addr, rkey, tlen := parseAdvert(t, conn.PrivateData())
		if addr != before.TargetAddr || rkey != before.TargetRKey || uint64(tlen) != before.TargetLen {
			t.Fatalf("advertisement %x %x %d, status %+v", addr, rkey, tlen, before)
		}
		// runPass runs the operations once more and checks the counters (cumulative over the
		// passes); it reports whether the client resent anything.
		runPass := func(pass int) bool {
			clear(c.dst)
			for _, w := range writes {
				c.op(t, rnic.OpWrite, w[0], w[1], addr, rkey)
			}
			for _, r := range reads {
				c.op(t, rnic.OpRead, r[0], r[1], addr, rkey)
			}
			for _, r := range reads {
				if !bytes.Equal(c.dst[r[0]:r[0]+r[1]], c.src[r[0]:r[0]+r[1]]) {
					t.Fatalf("pass %d: read %v: data differs", pass, r)
				}
			}
			// What the operations imply. Requests: ceil(len/MTU) packets per WRITE (a
			// zero-length one is one packet), one per READ; responses: ceil(len/MTU) per READ.
			mtu := rocev2.DefaultConfig().MTU.Bytes()      // both ends use the default path MTU
			var reqSegs, respSegs, wrBytes, rdBytes uint64 // over all passes so far
			for _, w := range writes {
				reqSegs += uint64(ceilDiv(w[1], mtu))
				wrBytes += uint64(w[1])
			}
			for _, r := range reads {
				reqSegs++
				respSegs += uint64(ceilDiv(r[1], mtu))
				rdBytes += uint64(r[1])
			}
			reqSegs, respSegs, wrBytes, rdBytes = reqSegs*uint64(pass), respSegs*uint64(pass), wrBytes*uint64(pass), rdBytes*uint64(pass)
			var retried bool
			s := awaitStatus(t, sock, func(s *uapi.Status) error {
				var q *uapi.QPStatus
				for i := range s.QPs {
					if s.QPs[i].Transport == "rocev2" {
						if q != nil {
							return fmt.Errorf("two RoCEv2 QPs: %+v", s.QPs)
						}
						q = &s.QPs[i]
					}
				}
				if q == nil {
					return errors.New("no rocev2 QP")
				}
				// The peer is the RDMA-CM address of the REQ's cma_hdr: the client's IP and its
				// CM source port (not its UDP link port).
				if ap, err := rocev2.ParseAddr(q.Peer); err != nil || ap.IP != link.LocalAddr().Addr() || q.State != "RTS" {
					return fmt.Errorf("QP %+v", q)
				}
				// The device's counters grew by exactly its QPs' counters: the RoCE QP's, and
				// whatever the other (still connected) QPs counted since.
				if dd, qd := sub(s.Counters, before.Counters), add(q.Counters, sub(qpSum(s, q.QPN), qpSum(&before, 0))); dd != qd {
					return fmt.Errorf("device grew by %+v, its QPs by %+v", dd, qd)
				}
				// The client's counters are read after the daemon's: everything the daemon
				// received the client had counted as sent, and everything the client received
				// the daemon had counted as sent (both count a packet before sending it).
				cs := c.qp.Counters().Snapshot()
				qc := q.Counters
				if qc.Retransmits != 0 || cs.CRCErrors != 0 || qc.CRCErrors != 0 || qc.TermSent+qc.TermRecv != 0 {
					return fmt.Errorf("daemon QP %+v", qc)
				}
				if qc.RxSegments > cs.TxSegments || qc.RxBytes > cs.TxBytes || cs.RxBytes > qc.TxBytes {
					return fmt.Errorf("daemon %+v, client %+v: received more than was sent", qc, cs)
				}
				retried = cs.Retransmits != 0 || cs.NAKs != 0
				if retried {
					// Go-back-N resent requests (Retransmits counts the rewinds, not the packets
					// resent, and a resent READ is answered again): every request and response
					// arrived at least once, duplicates are counted again, losses are not.
					if qc.RxSegments < reqSegs || qc.RxBytes < wrBytes || qc.TxSegments < respSegs || qc.TxBytes < rdBytes ||
						cs.RxBytes < rdBytes || (cs.Retransmits != 0 && cs.TxSegments <= reqSegs) {
						return fmt.Errorf("with %d retransmits and %d NAKs: daemon %+v, want at least rx %d/%d tx %d/%d segments/bytes; client %+v",
							cs.Retransmits, cs.NAKs, qc, reqSegs, wrBytes, respSegs, rdBytes, cs)
					}
					return nil
				}
				// Nothing was resent (a lost request or response would have been): each packet
				// was sent once and received once, so the counts are exact.
				if qc.RxSegments != reqSegs || qc.RxBytes != wrBytes || cs.TxSegments != reqSegs || cs.TxBytes != wrBytes ||
					qc.TxBytes != rdBytes || cs.RxBytes != rdBytes || qc.NAKs != 0 {
					return fmt.Errorf("daemon %+v, client %+v; want requests %d segments %d bytes, responses %d bytes",
						qc, cs, reqSegs, wrBytes, rdBytes)
				}
				// The daemon sends the READ response packets and ACKs (only those queued behind
				// READ responses are counted as transmitted); the client receives all of them.
				if qc.TxSegments < respSegs || qc.TxSegments > cs.RxSegments {
					return fmt.Errorf("tx segments %d, want %d..%d", qc.TxSegments, respSegs, cs.RxSegments)
				}
				return nil
			})
			t.Logf("pass %d: rocev2 daemon QP counters %+v (client retransmitted: %v)", pass, s.QPs, retried)
			return retried
		}
		runPass(1)
		// Lose one request packet of the large WRITE: the client must resend it (and the
		// go-back-N rewind resends what followed it), and the counters must show it.
		rt := c.qp.Counters().Retransmits.Load()
		lossy.dropAfter(10)
		if !runPass(2) || c.qp.Counters().Retransmits.Load() == rt {
			t.Fatal("a lost request packet was not retransmitted")
		}
		if lossy.dropped() != 1 {
			t.Fatalf("%d packets dropped, want 1", lossy.dropped())
		}
	})

	// Shutdown: every QP is disconnected, the socket goes away, no goroutine is left.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if live != nil {
		select {
		case <-live.qp.Done():
		case <-ctx.Done():
			t.Fatal("shutdown did not disconnect the live QP")
		}
		if err := live.qp.Err(); err != nil {
			t.Logf("live QP ended with %v", err)
		}
		live.close()
		live = nil
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
	if _, err := uapi.GetStatus(ctx, sock); err == nil {
		t.Fatal("closed daemon answered")
	}
	checkGoroutines(t, base)
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// goroutines counts the live goroutines, less os/signal's, which lives on once Notify
// was called.
func goroutines() (int, string) {
	buf := make([]byte, 1<<20)
	dump := string(buf[:runtime.Stack(buf, true)])
	n := 0
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.TrimSpace(g) != "" && !strings.Contains(g, "os/signal.loop") {
			n++
		}
	}
	return n, dump
}

// checkGoroutines waits for the goroutine count to drop back to base.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	var n int
	var dump string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n, dump = goroutines(); n <= base {
			return
		}
	}
	t.Fatalf("%d goroutines, %d before:\n%s", n, base, dump)
}

// TestDaemonSignalAndTools runs the command as main would, with the rping and perftest
// servers, drives both with their clients, and stops it with SIGTERM.
func TestDaemonSignalAndTools(t *testing.T) {
	base, _ := goroutines()
	sock := testSock(t)
	rp, pp := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t))
	exit := make(chan int, 1)
	go func() {
		exit <- Main([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-target-mib", "1",
			"-rping", "127.0.0.1:" + rp, "-perftest", "127.0.0.1:" + pp, "-perftest-verb", "read"})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if _, err := uapi.GetStatus(ctx, sock); err == nil {
			break
		}
		select {
		case code := <-exit:
			t.Fatalf("daemon exited with %d", code)
		case <-ctx.Done():
			t.Fatal("daemon did not come up")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The tool servers start listening asynchronously: retry the first connection.
	retry := func(name string, run func() error) {
		var err error
		for i := 0; i < 50; i++ {
			if err = run(); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s client: %v", name, err)
	}
	ro, err := rping.ParseArgs([]string{"-c", "-a", "127.0.0.1", "-p", rp, "-C", "3", "-V"})
	if err != nil {
		t.Fatal(err)
	}
	retry("rping", func() error { return rping.Run(ctx, ro, nil, nil) })
	po, err := perftest.ParseArgs([]string{"read", "-p", pp, "-n", "20", "-s", "4096", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	retry("perftest", func() error { return perftest.Run(ctx, po, nil, nil) })
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-ctx.Done():
		t.Fatal("SIGTERM did not stop the daemon")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
	checkGoroutines(t, base)
}
