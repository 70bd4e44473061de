package attach

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// ErrClosed is returned by Call after the connection ended, or when its write finds the
// other side gone.
var ErrClosed = errors.New("attach: connection closed")

// Error is an error answer.
type Error struct {
	Op    string
	Errno int
	Msg   string
}

func (e *Error) Error() string { return fmt.Sprintf("attach: %s: %s", e.Op, e.Msg) }

// Unwrap gives the errno (errors.Is(err, syscall.EADDRINUSE)).
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.Errno)
}

// ErrorMsg is the error answer to the request req for err (its errno when it has one,
// else EIO).
func ErrorMsg(req Msg, err error) Msg {
	errno := syscall.EIO
	var en syscall.Errno
	if errors.As(err, &en) {
		errno = en
	}
	return Msg{Op: OpError, ID: req.ID, Errno: int(errno), Error: err.Error()}
}

// Conn is one side of an attach connection after hello and welcome: it sends requests
// (Call) and answers the other side's with handle, which runs in the reading goroutine
// (Serve) and must not Call.
type Conn struct {
	c      *net.UnixConn
	handle func(Msg) Msg

	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan Msg
	done    chan struct{}
	err     error
}

// NewConn wraps c; Serve must run for Call to get answers.
func NewConn(c *net.UnixConn, handle func(Msg) Msg) *Conn {
	return &Conn{c: c, handle: handle, pending: make(map[uint64]chan Msg), done: make(chan struct{})}
}

// Write sends one message.
func Write(c *net.UnixConn, m Msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxMsg {
		return fmt.Errorf("attach: %s message of %d bytes: %w", m.Op, len(b), syscall.EMSGSIZE)
	}
	_, err = c.Write(b)
	return err
}

// Decode parses one message.
func Decode(b []byte) (Msg, error) {
	var m Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("attach: bad message: %w", err)
	}
	if m.Op == "" {
		return m, errors.New("attach: message without op")
	}
	return m, nil
}

func (c *Conn) write(m Msg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return Write(c.c, m)
}

// Call sends a request and waits for its answer; an error answer is returned as *Error.
func (c *Conn) Call(ctx context.Context, m Msg) (Msg, error) {
	ch := make(chan Msg, 1)
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		return Msg{}, c.closedErr()
	}
	c.next++
	m.ID = c.next
	c.pending[m.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, m.ID)
		}
		c.mu.Unlock()
	}()
	if err := c.write(m); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			// the other side is gone; Serve may not have read the end yet
			return Msg{}, fmt.Errorf("attach: %s: %w: %w", m.Op, ErrClosed, err)
		}
		return Msg{}, fmt.Errorf("attach: %s: %w", m.Op, err)
	}
	select {
	case r := <-ch:
		if r.Op == OpError {
			return r, &Error{Op: m.Op, Errno: r.Errno, Msg: r.Error}
		}
		return r, nil
	case <-c.done:
		return Msg{}, c.closedErr()
	case <-ctx.Done():
		return Msg{}, ctx.Err()
	}
}

func (c *Conn) closedErr() error {
	if c.err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, c.err)
	}
	return ErrClosed
}

// Serve reads until the connection ends, answering requests and delivering answers; it
// returns the reason (nil at a clean EOF) and fails every Call in progress.
func (c *Conn) Serve() error {
	buf := make([]byte, MaxMsg)
	var err error
	for {
		var n int
		n, err = c.c.Read(buf)
		if err != nil || n == 0 {
			break
		}
		m, derr := Decode(buf[:n])
		if derr != nil {
			err = derr
			break
		}
		if m.Op == OpOK || m.Op == OpError {
			c.mu.Lock()
			ch := c.pending[m.ID]
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		r := c.handle(m)
		r.ID = m.ID
		if err = c.write(r); err != nil {
			break
		}
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	c.mu.Lock()
	c.err = err
	c.pending = nil
	c.mu.Unlock()
	close(c.done)
	return err
}

// Done is closed when Serve returned.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection (Serve returns).
func (c *Conn) Close() error { return c.c.Close() }
