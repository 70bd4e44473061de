package iwarp

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// TestErrorsWrapCause: Dial, Listen and the connection's error keep their causes for
// errors.Is / errors.As.
func TestErrorsWrapCause(t *testing.T) {
	noLeak(t)
	cli := newSide(t, &pairOpts{})
	defer cli.dev.Close()
	ctx := context.Background()

	// A refused TCP connect.
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := tl.Addr().String()
	tl.Close()
	_, err := Dial(ctx, cli.qp, closed, nil, ConnParam{})
	var oe *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) {
		t.Fatalf("refused dial: %v", err)
	}

	// A listen address in use.
	ln, err := Listen(cli.dev, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(cli.dev, ln.Addr().String(), nil); !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &oe) {
		t.Fatalf("listen on a used address: %v", err)
	}

	// A responder that never answers the MPA Request: the MPA timeout, and ctx.
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	_, err = Dial(ctx, cli.qp, silent.Addr().String(), &Config{Timeout: 100 * time.Millisecond}, ConnParam{})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("MPA timeout: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = Dial(dctx, cli.qp, silent.Addr().String(), nil, ConnParam{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline during MPA: %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := Dial(cctx, cli.qp, silent.Addr().String(), nil, ConnParam{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ctx: %v", err)
	}

	// A rejection is a *RejectError wrapping mpa.ErrRejected.
	go func() {
		if r, err := ln.Accept(ctx); err == nil {
			_ = r.Reject([]byte("no"))
		}
	}()
	_, err = Dial(ctx, cli.qp, ln.Addr().String(), nil, ConnParam{})
	var rej *RejectError
	if !errors.As(err, &rej) || string(rej.PrivateData) != "no" || !errors.Is(err, mpa.ErrRejected) {
		t.Fatalf("rejected dial: %v", err)
	}
	waitFor(t, "the rejected connection's slot", func() bool { return ln.Stats().Active == 0 })
	if s := ln.Stats(); s.Rejected != 1 {
		t.Fatalf("listener stats after a reject: %+v", s)
	}
}

// TestConnErrKeepsCause: a connection reset by the peer ends with an *LLPError wrapping
// ECONNRESET, on Conn.Err and on the QP's event.
func TestConnErrKeepsCause(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	p := rawConnect(t, mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, srv, nil)
	p.wr.WriteFPDU(rtrWrite(), nil)
	// Half an FPDU, then a reset.
	_, _ = p.nc.Write([]byte{0, 40, 0xc1, 0x40})
	time.Sleep(20 * time.Millisecond)
	closeAbortive(p.nc)
	e := waitEvent(t, srv.dev, rnic.EventQPFatal)
	<-srv.conn.Done()
	var llp *LLPError
	if !errors.As(srv.conn.Err(), &llp) || !errors.Is(srv.conn.Err(), syscall.ECONNRESET) || !errors.Is(e.Err, syscall.ECONNRESET) {
		t.Fatalf("Conn.Err %v, event %v", srv.conn.Err(), e.Err)
	}
}

// pipeListener is a net.Listener of in-memory net.Pipe connections: a transport that is
// not the kernel's TCP (as a user-space TCP stack would be).
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr("pipe") }

// dial is a Config.Dial for the listener.
func (l *pipeListener) dial(ctx context.Context, network, address string) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestNonTCPConn: Config.Dial and Serve run the engine over net.Conns that are not
// *net.TCPConn (net.Pipe: no readv, no half-close, no socket options), with CRC and every
// operation, then a graceful disconnect.
func TestNonTCPConn(t *testing.T) {
	noLeak(t)
	pl := newPipeListener()
	cfg := smallCfg()
	cfg.Dial = pl.dial
	o := &pairOpts{cli: cfg, srv: cfg}
	cli, srv := newSide(t, o), newSide(t, o)
	defer cli.dev.Close()
	defer srv.dev.Close()
	ln := Serve(srv.dev, pl, cfg)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			srv.conn, err = r.Accept(srv.qp, ConnParam{PrivateData: []byte("srv")})
		}
		errc <- err
	}()
	var err error
	cli.conn, err = Dial(ctx, cli.qp, "anywhere", cfg, ConnParam{PrivateData: []byte("cli")})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if string(cli.conn.PeerPrivateData()) != "srv" || !cli.conn.Params().CRC || cli.conn.MULPDU() != testMULPDU {
		t.Fatalf("params %+v, pd %q", cli.conn.Params(), cli.conn.PeerPrivateData())
	}
	exercise(t, cli, srv)
	cli.qp.Disconnect()
	<-cli.conn.Done()
	<-srv.conn.Done()
	if cli.conn.Err() != nil {
		t.Fatalf("graceful disconnect over a pipe: %v", cli.conn.Err())
	}
}

// optConn is a net.Conn with every optional LLP method, recording the calls; with
// unsup set each returns errors.ErrUnsupported, as a wrapper that cannot forward does.
type optConn struct {
	net.Conn
	unsup bool
	calls []string
}

func (c *optConn) ret(call string) error {
	c.calls = append(c.calls, call)
	if c.unsup {
		return errors.ErrUnsupported
	}
	return nil
}
func (c *optConn) CloseWrite() error     { return c.ret("CloseWrite") }
func (c *optConn) SetLinger(s int) error { return c.ret("SetLinger(" + strconv.Itoa(s) + ")") }
func (c *optConn) SetNoDelay(b bool) error {
	return c.ret("SetNoDelay(" + strconv.FormatBool(b) + ")")
}
func (c *optConn) SetKeepAliveConfig(k net.KeepAliveConfig) error {
	return c.ret("SetKeepAliveConfig(" + strconv.FormatBool(k.Enable) + "," + k.Idle.String() + ")")
}
func (c *optConn) SetUserTimeout(d time.Duration) error {
	return c.ret("SetUserTimeout(" + d.String() + ")")
}
func (c *optConn) MSS() int {
	c.calls = append(c.calls, "MSS")
	if c.unsup {
		return 0
	}
	return 8948
}

// TestOptionalLLPMethods: a net.Conn that is not a *net.TCPConn gets each socket option
// it offers as a method, and one that reports ErrUnsupported gets the fallbacks.
func TestOptionalLLPMethods(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &optConn{Conn: a}
	cfg := (&Config{KeepAlive: 7 * time.Second, UserTimeout: 9 * time.Second}).norm()
	tuneConn(c, &cfg)
	if !closeWrite(c) {
		t.Error("closeWrite: not reported done")
	}
	if got := tcpMSS(c); got != 8948 {
		t.Errorf("tcpMSS %d", got)
	}
	closeAbortive(c)
	want := []string{"SetNoDelay(true)", "SetKeepAliveConfig(true,7s)", "SetUserTimeout(9s)", "CloseWrite", "MSS", "SetLinger(0)"}
	if !slices.Equal(c.calls, want) {
		t.Errorf("calls %q, want %q", c.calls, want)
	}

	u := &optConn{Conn: b, unsup: true}
	off := (&Config{KeepAlive: -1}).norm()
	tuneConn(u, &off)
	if closeWrite(u) {
		t.Error("closeWrite reported done on ErrUnsupported")
	}
	if got := tcpMSS(u); got != defaultMSS {
		t.Errorf("tcpMSS %d, want the default %d", got, defaultMSS)
	}
	want = []string{"SetNoDelay(true)", "SetKeepAliveConfig(false,0s)", "SetUserTimeout(30s)", "CloseWrite", "MSS"}
	if !slices.Equal(u.calls, want) {
		t.Errorf("calls %q, want %q", u.calls, want)
	}
}
