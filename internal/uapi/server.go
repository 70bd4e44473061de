package uapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SocketPath is the default control socket of the daemon of device name: $SOFTRNIC_SOCK
// when set, else /run/softrnic/<name>.sock.
func SocketPath(name string) string {
	if s := os.Getenv("SOFTRNIC_SOCK"); s != "" {
		return s
	}
	return "/run/softrnic/" + name + ".sock"
}

// Handler serves requests. Get returns the pairs of a get response for the query (see
// Status; at most q.Max QPs, or the one QP q names, ENOENT when it has none such); Set
// applies the pairs of a set request (in order; it stops at the first failure). An error
// that is not an *Error is answered with EIO.
type Handler interface {
	Get(q Query) ([]Pair, error)
	Set(ps []Pair) error
}

// Limits of a Server (see ServerConfig).
const (
	DefaultMaxClients  = 16               // control connections served at once
	DefaultIdleTimeout = 30 * time.Second // time a client has to send (or take) a whole message
)

// ServerConfig sets a Server's limits and log. The zero value (or a nil pointer) means
// the defaults.
type ServerConfig struct {
	// MaxClients bounds the connections served at once (0: DefaultMaxClients). A client
	// over the bound is answered EBUSY and closed (ServerStats.Refused).
	MaxClients int
	// IdleTimeout bounds the time a connection may take to send a whole request, and to
	// take a whole response, after which it is closed (ServerStats.IdleClosed); 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Logger receives the server's records (accept failures); nil discards them.
	Logger *slog.Logger
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Clients      int    // connections being served now
	Accepted     uint64 // connections accepted
	AcceptErrors uint64 // failed accepts (EMFILE, ENFILE, …), each retried after a backoff
	Refused      uint64 // connections refused at MaxClients
	IdleClosed   uint64 // connections closed after IdleTimeout
}

// Server serves the protocol on a unix socket.
type Server struct {
	ln          net.Listener
	path        string
	h           Handler
	maxClients  int
	idleTimeout time.Duration
	log         *slog.Logger
	quit        chan struct{} // closed by Close

	accepted, acceptErrors, refused, idleClosed atomic.Uint64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// ErrInUse is returned by Listen when another process serves the socket.
var ErrInUse = errors.New("uapi: socket in use by a running daemon")

// Listen creates the socket at path with mode 0600 (its directory with 0755 if missing),
// replacing a stale socket that nobody accepts on, and serves h on it until Close, within
// cfg's limits (nil: the defaults).
func Listen(path string, h Handler, cfg *ServerConfig) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("uapi: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, ErrInUse
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Close removes the socket file (net.UnixListener unlinks what it created).
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return Serve(ln, h, cfg), nil
}

// Serve serves h on ln until Close (which closes ln), within cfg's limits (nil: the
// defaults). Listen is the usual way in; Serve takes any listener.
func Serve(ln net.Listener, h Handler, cfg *ServerConfig) *Server {
	var c ServerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MaxClients <= 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{ln: ln, h: h, maxClients: c.MaxClients, idleTimeout: c.IdleTimeout, log: c.Logger,
		quit: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	if ua, ok := ln.Addr().(*net.UnixAddr); ok {
		s.path = ua.Name
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Path returns the socket path.
func (s *Server) Path() string { return s.path }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return ServerStats{Clients: n, Accepted: s.accepted.Load(), AcceptErrors: s.acceptErrors.Load(),
		Refused: s.refused.Load(), IdleClosed: s.idleClosed.Load()}
}

// Close stops accepting, closes open connections, waits for their goroutines and removes
// the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// Accept backoff after a failure, as net/http's Server does: 5 ms doubling to 1 s.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// retryableAccept reports whether an accept error is transient: descriptor or memory
// exhaustion, or an aborted connection. Those are retried after a backoff; anything else
// (the listener closed) ends the loop.
func retryableAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// acceptLoop accepts clients until Close. A transient failure (EMFILE when the process
// is out of descriptors) is counted and retried with an exponential backoff; it is logged
// once when it starts and once when accepting works again.
func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	var failures uint64
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return
			default:
			}
			if !retryableAccept(err) {
				s.log.Error("control socket: accept failed; no longer accepting", "sock", s.path, "err", err)
				return
			}
			s.acceptErrors.Add(1)
			failures++
			if delay == 0 {
				delay = acceptBackoffMin
				s.log.Warn("control socket: accept failed; retrying with backoff", "sock", s.path, "err", err)
			} else {
				delay = min(2*delay, acceptBackoffMax)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.quit:
				t.Stop()
				return
			}
			continue
		}
		if delay != 0 {
			s.log.Info("control socket: accepting again", "sock", s.path, "failures", failures)
			delay, failures = 0, 0
		}
		s.accepted.Add(1)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= s.maxClients {
			s.mu.Unlock()
			s.refuse(c)
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// refuse answers a client over MaxClients with EBUSY and closes it. The answer is what
// the client reads for its first request.
func (s *Server) refuse(c net.Conn) {
	s.refused.Add(1)
	resp := Response{Errno: EBUSY, Message: fmt.Sprintf("uapi: too many control clients (%d)", s.maxClients)}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(resp.Append(nil))
	c.Close()
}

// serve answers requests on one connection until it closes, stays idle past IdleTimeout,
// or sends a malformed request (which is answered with EPROTO before the connection is
// closed: after a framing error the next request's start cannot be found).
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	var out []byte
	for {
		c.SetReadDeadline(time.Now().Add(s.idleTimeout))
		q, err := ReadRequest(r)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				s.idleClosed.Add(1)
			case errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLong) || errors.Is(err, ErrUnknownOp):
				resp := Response{Errno: EPROTO, Message: err.Error()}
				c.SetWriteDeadline(time.Now().Add(s.idleTimeout))
				c.Write(resp.Append(out[:0]))
			}
			return
		}
		resp := s.handle(q)
		out = resp.Append(out[:0])
		c.SetWriteDeadline(time.Now().Add(s.idleTimeout))
		if _, err := c.Write(out); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				s.idleClosed.Add(1)
			}
			return
		}
	}
}

func (s *Server) handle(q Request) Response {
	var err error
	var ps []Pair
	if q.Op == OpGet {
		var gq Query
		if gq, err = ParseQuery(q.Pairs); err == nil {
			ps, err = s.h.Get(gq)
		}
	} else {
		err = s.h.Set(q.Pairs)
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Errno: EIO, Message: err.Error()}
		}
		errno := e.Errno
		if errno <= 0 {
			errno = EIO
		}
		return Response{Errno: errno, Message: Sanitize(e.Message)}
	}
	resp := Response{Pairs: ps}
	if !resp.Valid() {
		return Response{Errno: EIO, Message: "uapi: handler returned invalid pairs"}
	}
	return resp
}

// conn is a client connection to a daemon.
type conn struct {
	c net.Conn
	r *bufio.Reader
	b []byte
}

// dial connects to the daemon at path; ctx bounds the connection's whole life.
func dial(ctx context.Context, path string) (*conn, func(), error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return &conn{c: c, r: bufio.NewReader(c)}, func() { stop(); c.Close() }, nil
}

// RequestTimeout bounds each request of a client call, on top of its context: a daemon
// that does not answer one request (one page of a GetStatus) in this time is given up.
const RequestTimeout = 10 * time.Second

// do sends one request and reads its answer; a non-zero errno is returned as an *Error
// along with the response.
func (c *conn) do(ctx context.Context, q Request) (Response, error) {
	if !q.Valid() {
		return Response{}, ErrMalformed
	}
	dl := time.Now().Add(RequestTimeout)
	if cdl, ok := ctx.Deadline(); ok && cdl.Before(dl) {
		dl = cdl
	}
	c.c.SetDeadline(dl)
	if ctx.Err() != nil { // cancelled meanwhile: the AfterFunc's past deadline may be overwritten
		c.c.SetDeadline(time.Unix(1, 0))
	}
	c.b = q.Append(c.b[:0])
	if _, werr := c.c.Write(c.b); werr != nil {
		// A server that refuses a client (EBUSY at its client cap) answers and closes
		// without reading: its answer may still be there to read.
		if resp, err := ReadResponse(c.r); err == nil && resp.Errno != 0 {
			return resp, resp.Err()
		}
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		return Response{}, werr
	}
	resp, err := ReadResponse(c.r)
	if err != nil {
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		return Response{}, err
	}
	return resp, resp.Err()
}

// Do sends one request to the daemon at path and reads the answer. A response with a
// non-zero errno is returned along with its *Error.
func Do(ctx context.Context, path string, q Request) (Response, error) {
	if !q.Valid() {
		return Response{}, ErrMalformed
	}
	c, done, err := dial(ctx, path)
	if err != nil {
		return Response{}, err
	}
	defer done()
	return c.do(ctx, q)
}

// getPages asks for page after page on one connection, starting with q: each decoded page
// goes to page, which merges it and returns the query of the next page (more false: that
// was the last); a next page must start beyond the previous one.
func getPages(ctx context.Context, path string, q Query, page func(s Status) (next Query, more bool, err error)) error {
	c, done, err := dial(ctx, path)
	if err != nil {
		return err
	}
	defer done()
	for {
		resp, err := c.do(ctx, Request{Op: OpGet, Pairs: q.Pairs()})
		if err != nil {
			return err
		}
		s, err := DecodeStatus(resp.Pairs)
		if err != nil {
			return err
		}
		next, more, err := page(s)
		if err != nil || !more {
			return err
		}
		if next.From <= q.From && next.ResFrom <= q.ResFrom {
			return ErrMalformed // a page must move forward
		}
		q = next
	}
}

// GetStatus reads the whole status of the daemon at path, asking for page after page of
// QPs on one connection until the last. The device section (counters included) is the
// last page's, so it is never older than the QPs' counters.
func GetStatus(ctx context.Context, path string) (Status, error) {
	var all Status
	err := getPages(ctx, path, Query{}, func(s Status) (Query, bool, error) {
		qps := append(all.QPs, s.QPs...)
		all, all.QPs = s, qps
		all.QPNext = 0
		return Query{From: s.QPNext}, s.QPNextSet, nil
	})
	if err != nil {
		return Status{}, err
	}
	return all, nil
}

// GetRes lists the device's resources of one kind (ResKinds) across its processes,
// asking for page after page on one connection; the device section is the last page's.
func GetRes(ctx context.Context, path, kind string) (Status, error) {
	var all Status
	res := []Res{}
	err := getPages(ctx, path, Query{Res: kind}, func(s Status) (Query, bool, error) {
		for _, r := range s.Res {
			if r.Kind != kind {
				return Query{}, false, ErrMalformed
			}
		}
		res = append(res, s.Res...)
		all = s
		return Query{Res: kind, ResFrom: s.ResNext}, s.ResNextSet, nil
	})
	if err != nil {
		return Status{}, err
	}
	all.Res = res
	return all, nil
}

// GetQP reads the status of QP qpn (an *Error with ENOENT when the daemon has none).
func GetQP(ctx context.Context, path string, qpn uint32) (QPStatus, error) {
	resp, err := Do(ctx, path, Request{Op: OpGet, Pairs: Query{One: true, QP: qpn}.Pairs()})
	if err != nil {
		return QPStatus{}, err
	}
	s, err := DecodeStatus(resp.Pairs)
	if err != nil {
		return QPStatus{}, err
	}
	if len(s.QPs) != 1 || s.QPs[0].QPN != qpn {
		return QPStatus{}, ErrMalformed
	}
	return s.QPs[0], nil
}
