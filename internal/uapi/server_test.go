package uapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/syncbuf"
)

func logger(w *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// failingListener fails its first n Accepts with err, then accepts from the real listener.
type failingListener struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.n > 0 {
		l.n--
		l.mu.Unlock()
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func unixListener(t *testing.T) (*net.UnixListener, string) {
	t.Helper()
	path := sockPath(t)
	if err := os.MkdirAll(strings.TrimSuffix(path, "/s.sock"), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return ln, path
}

// TestAcceptBacksOffOnEMFILE: accept failures with EMFILE/ENFILE do not end the accept
// loop: it backs off, retries, logs once, counts every failure, and serves the client that
// was waiting when descriptors came back.
func TestAcceptBacksOffOnEMFILE(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			ln, path := unixListener(t)
			const fails = 6 // 5+10+20+40+80+160 ms of backoff
			fl := &failingListener{Listener: ln, n: fails, err: &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", errno)}}
			var logs syncbuf.Buffer
			srv := Serve(fl, &testHandler{}, &ServerConfig{Logger: logger(&logs)})
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := GetStatus(ctx, path)
			if err != nil || st.Device != "t" {
				t.Fatalf("after %d failed accepts: %+v %v", fails, st, err)
			}
			if s := srv.Stats(); s.AcceptErrors != fails || s.Accepted != 1 {
				t.Fatalf("stats %+v, want %d accept errors", s, fails)
			}
			l := logs.String()
			if n := strings.Count(l, "accept failed"); n != 1 || !strings.Contains(l, errno.Error()) {
				t.Fatalf("want one failure record naming %v, got:\n%s", errno, l)
			}
			if n := strings.Count(l, "accepting again"); n != 1 || !strings.Contains(l, "failures=6") {
				t.Fatalf("want one recovery record with the count, got:\n%s", l)
			}
		})
	}
}

// TestAcceptSurvivesFDExhaustion exhausts the process's descriptors for real (a lowered
// RLIMIT_NOFILE): a client that connects meanwhile makes the server's accept4 fail with
// EMFILE; once descriptors are free again, the server accepts and answers it.
func TestAcceptSurvivesFDExhaustion(t *testing.T) {
	path := sockPath(t)
	var logs syncbuf.Buffer
	srv, err := Listen(path, &testHandler{}, &ServerConfig{Logger: logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// The client's socket is made first: connect(2) needs no new descriptor.
	cfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	var fillers []int
	restore := func() {
		for _, fd := range fillers {
			unix.Close(fd)
		}
		fillers = nil
		unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	}
	defer restore()
	// Lower the soft limit just above the highest descriptor in use, then take the rest.
	probe, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(probe)
	lim := unix.Rlimit{Cur: uint64(probe) + 32, Max: old.Max}
	if lim.Cur > old.Cur {
		t.Skipf("soft RLIMIT_NOFILE %d is below %d: cannot lower it for this test", old.Cur, lim.Cur)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	for {
		fd, err := unix.Dup(0)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		fillers = append(fillers, fd)
	}
	if err := unix.Connect(cfd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.Stats().AcceptErrors == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server's accept did not fail while descriptors were exhausted")
		}
	}
	restore()
	f := os.NewFile(uintptr(cfd), "client")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write((&Request{Op: OpGet}).Append(nil)); err != nil {
		t.Fatal(err)
	}
	resp, err := ReadResponse(bufio.NewReader(c))
	if err != nil || resp.Errno != 0 {
		t.Fatalf("after the descriptors came back: %+v %v\nlog:\n%s", resp, err, logs.String())
	}
	if !strings.Contains(logs.String(), "too many open files") {
		t.Fatalf("log:\n%s", logs.String())
	}
	t.Logf("%d accept failures while exhausted", srv.Stats().AcceptErrors)
}

// TestServerMaxClients: clients over MaxClients are answered EBUSY and closed; a slot
// that frees up serves a new client.
func TestServerMaxClients(t *testing.T) {
	path := sockPath(t)
	srv, err := Listen(path, &testHandler{}, &ServerConfig{MaxClients: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var idle []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	for deadline := time.Now().Add(10 * time.Second); srv.Stats().Clients != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", srv.Stats())
		}
	}
	var e *Error
	if _, err := Do(ctx, path, Request{Op: OpGet}); !errors.As(err, &e) || e.Errno != EBUSY {
		t.Fatalf("third client: %v", err)
	}
	if s := srv.Stats(); s.Refused != 1 || s.Clients != 2 {
		t.Fatalf("stats %+v", s)
	}
	idle[0].Close()
	for deadline := time.Now().Add(10 * time.Second); srv.Stats().Clients != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", srv.Stats())
		}
	}
	if _, err := GetStatus(ctx, path); err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
}

// TestServerIdleTimeout: a client that sends nothing, or only part of a request, is
// closed after IdleTimeout and counted; one that keeps sending requests is not.
func TestServerIdleTimeout(t *testing.T) {
	path := sockPath(t)
	const idle = 200 * time.Millisecond
	srv, err := Listen(path, &testHandler{}, &ServerConfig{IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for i, partial := range []string{"", "get=1\n", "set=1\nclose_qp=1"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, partial); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 16))
		c.Close()
		if n != 0 || err != io.EOF {
			t.Fatalf("%q: read %d, %v; want the server to close the connection", partial, n, err)
		}
		if got := srv.Stats().IdleClosed; got != uint64(i+1) {
			t.Fatalf("%q: %d idle closes counted", partial, got)
		}
	}
	// Requests spaced by less than the timeout keep the connection.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 4; i++ {
		time.Sleep(idle / 4)
		if _, err := c.Write((&Request{Op: OpGet}).Append(nil)); err != nil {
			t.Fatal(err)
		}
		if r, err := ReadResponse(br); err != nil || r.Errno != 0 {
			t.Fatal(i, r, err)
		}
	}
}
