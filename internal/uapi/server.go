package uapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// SocketPath is the default control socket of the daemon of device name.
func SocketPath(name string) string { return "/run/softrnic/" + name + ".sock" }

// Handler serves requests. Get returns the pairs of a get response; Set applies the pairs
// of a set request (in order; it stops at the first failure). An error that is not an
// *Error is answered with EIO.
type Handler interface {
	Get() ([]Pair, error)
	Set(ps []Pair) error
}

// Server serves the protocol on a unix socket.
type Server struct {
	ln   *net.UnixListener
	path string
	h    Handler

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// ErrInUse is returned by Listen when another process serves the socket.
var ErrInUse = errors.New("uapi: socket in use by a running daemon")

// Listen creates the socket at path with mode 0600 (its directory with 0755 if missing),
// replacing a stale socket that nobody accepts on, and serves h on it until Close.
func Listen(path string, h Handler) (*Server, error) {
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
	s := &Server{ln: ln, path: path, h: h, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Path returns the socket path.
func (s *Server) Path() string { return s.path }

// Close stops accepting, closes open connections, waits for their goroutines and removes
// the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve answers requests on one connection until it closes or sends a malformed request
// (which is answered with EPROTO before the connection is closed: after a framing error
// the next request's start cannot be found).
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
		q, err := ReadRequest(r)
		if err != nil {
			if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLong) || errors.Is(err, ErrUnknownOp) {
				resp := Response{Errno: EPROTO, Message: err.Error()}
				c.Write(resp.Append(out[:0]))
			}
			return
		}
		resp := s.handle(q)
		out = resp.Append(out[:0])
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func (s *Server) handle(q Request) Response {
	var err error
	var ps []Pair
	if q.Op == OpGet {
		ps, err = s.h.Get()
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

// Do sends one request to the daemon at path and reads the answer. A response with a
// non-zero errno is returned along with its *Error.
func Do(ctx context.Context, path string, q Request) (Response, error) {
	if !q.Valid() {
		return Response{}, ErrMalformed
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return Response{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(q.Append(nil)); err != nil {
		return Response{}, err
	}
	resp, err := ReadResponse(bufio.NewReader(c))
	if err != nil {
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		return Response{}, err
	}
	return resp, resp.Err()
}

// GetStatus sends get=1 and decodes the answer.
func GetStatus(ctx context.Context, path string) (Status, error) {
	resp, err := Do(ctx, path, Request{Op: OpGet})
	if err != nil {
		return Status{}, err
	}
	return DecodeStatus(resp.Pairs)
}
