package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// Server is a listening rping server: its device (and RoCEv2 endpoint) and listener.
// Serve runs one session (rping -s) or, with Options.Persistent, every client's session
// concurrently (rping -s -P).
type Server struct {
	o   Options
	out output
	dev *rnic.Device
	t   *cm.Transport
	ln  *cm.Listener

	sessions   atomic.Int64  // running now
	served     atomic.Uint64 // sessions accepted
	refused    atomic.Uint64 // clients rejected at MaxSessions
	idleClosed atomic.Uint64 // sessions ended by IdleTimeout
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Sessions   int    // sessions running now
	Served     uint64 // sessions accepted
	Refused    uint64 // clients rejected at Options.MaxSessions
	IdleClosed uint64 // sessions ended after Options.IdleTimeout without a message
}

// errIdle ends a session whose client sent nothing for Options.IdleTimeout.
var errIdle = errors.New("rping: client idle")

// Listen opens the server's device and listens on o.Addr (every address without it) and
// o.Port; stdout gets ping data and debug lines, stderr DISCONNECT events (and, for a
// persistent server without SessionEnd, session errors).
func Listen(o Options, stdout, stderr io.Writer) (*Server, error) {
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	o.Server = true
	if err := o.check(); err != nil {
		return nil, err
	}
	return listenServer(o, output{stdout: tool.Output(stdout), stderr: tool.Output(stderr), debug: o.Debug})
}

func listenServer(o Options, out output) (_ *Server, err error) {
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	s := &Server{o: o, out: out}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	var local netip.Addr
	if o.RoCE {
		if local, err = tool.ParseIP("--roce: -a", o.Addr); err != nil {
			return nil, err
		}
	}
	s.dev, s.t, err = open(&s.o, local)
	if err != nil {
		return nil, err
	}
	host := o.Addr
	if host == "" {
		host = "0.0.0.0"
	}
	if s.ln, err = listen(s.t, host, &s.o); err != nil {
		return nil, fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if o.Listening != nil {
		o.Listening(s.ln.Addr())
	}
	if o.RoCE {
		out.debugf("listening on %v (RoCEv2)", s.ln.Addr())
	} else {
		out.debugf("listening on %v", s.ln.Addr())
	}
	return s, nil
}

// Addr is the listening address (for RoCEv2 the link's IP with the RDMA-CM port).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{Sessions: int(s.sessions.Load()), Served: s.served.Load(), Refused: s.refused.Load(),
		IdleClosed: s.idleClosed.Load()}
}

// Close stops listening and closes the device; sessions still running end with errors.
func (s *Server) Close() error {
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.t != nil {
		_ = s.t.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
	return nil
}

// Serve serves clients until ctx ends. Without Options.Persistent it serves one client
// and returns that session's error (nil when the client disconnected); a persistent
// server runs every client's session concurrently, at most MaxSessions (a client over the
// bound is rejected), and returns nil once ctx has ended and its sessions have finished.
func (s *Server) Serve(ctx context.Context) error {
	if !s.o.Persistent {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
		}
		s.served.Add(1)
		return s.session(ctx, req)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
		}
		if s.sessions.Load() >= int64(s.o.MaxSessions) {
			s.refused.Add(1)
			s.out.debugf("rejecting %v: %d sessions", req.RemoteAddr().String(), s.o.MaxSessions)
			_ = req.Reject(nil)
			continue
		}
		s.served.Add(1)
		s.sessions.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.sessions.Add(-1)
			peer := req.RemoteAddr().String()
			err := s.session(ctx, req)
			if s.o.SessionEnd != nil {
				s.o.SessionEnd(peer, err)
			} else if err != nil && ctx.Err() == nil {
				fmt.Fprintf(s.out.stderr, "rping: session from %s: %v\n", peer, err)
			}
		}()
	}
}

// session accepts req on a new session and runs rping_test_server on it. The client
// leaving is not an error.
func (s *Server) session(ctx context.Context, req *cm.ConnRequest) error {
	s.out.debugf("connect request from %v ird %d ord %d", req.RemoteAddr().String(), req.IRD(), req.ORD())
	ss, err := newSession(s.dev, &s.o, s.out)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	defer ss.close()
	if err := ss.postRecv(); err != nil {
		_ = req.Reject(nil)
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	if ss.conn, err = accept(req, ss.qp); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer ss.report()
	if s.o.IdleTimeout > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		ss.idle = time.AfterFunc(s.o.IdleTimeout, func() { cancel(errIdle) })
		defer ss.idle.Stop()
	}
	err = ss.serve(ctx)
	switch {
	case err == errDisconnected:
		fmt.Fprintln(s.out.stderr, "server DISCONNECT EVENT...")
		return nil
	case errors.Is(err, errIdle):
		s.idleClosed.Add(1)
		ss.disconnect(sessionStopTimeout)
	case err != nil && ctx.Err() != nil:
		ss.disconnect(sessionStopTimeout)
	}
	return err
}

// sessionStopTimeout bounds the wait for a graceful disconnect of a session the server
// ends (idle client, server stopping).
const sessionStopTimeout = 2 * time.Second

// serve is rping_test_server: Read the client's source, go ahead, Write it back, go ahead.
func (s *session) serve(ctx context.Context) error {
	for {
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return wrapState("wait for RDMA_READ_ADV", err)
		}
		s.touch()
		src := s.info()
		s.out.debugf("Received rkey %x addr %x len %d from peer", src.RKey, src.Addr, src.Len)
		if s.o.Fault == FaultReadBadSTag {
			src.RKey ^= 0xff
		}
		// The sink is the local buffer; a client advertising more than -S overruns it, which
		// the engine reports as a local length/protection error, as the kernel would.
		if err := s.postRDMA(rnic.OpRead, src.Len, src); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRead); err != nil {
			return wrapState("wait for RDMA_READ_COMPLETE", err)
		}
		if s.o.Verbose {
			fmt.Fprintf(s.out.stdout, "server ping data: %s\n", cstr(s.rdma))
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return wrapState("wait for RDMA_WRITE_ADV", err)
		}
		s.touch()
		sink := s.info()
		if s.o.Fault == FaultWriteBadSTag {
			sink.RKey ^= 0xff
		}
		wlen := min(len(cstr(s.rdma))+1, len(s.rdma))
		if err := s.postRDMA(rnic.OpWrite, uint32(wlen), sink); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCWrite); err != nil {
			return wrapState("wait for RDMA_WRITE_COMPLETE", err)
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
	}
}

func wrapState(where string, err error) error {
	if err == errDisconnected {
		return err
	}
	return fmt.Errorf("%s: %w", where, err)
}

// info decodes the received struct rping_rdma_info (always complete: await checked its
// length).
func (s *session) info() rnic.RemoteBuffer {
	b, _ := rnic.ParseRemoteBuffer(s.recv)
	return b
}

// touch restarts the idle timer (a message arrived from the client).
func (s *session) touch() {
	if s.idle != nil {
		s.idle.Reset(s.o.IdleTimeout)
	}
}
