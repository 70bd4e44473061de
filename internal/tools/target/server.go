package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// stopTimeout bounds the graceful disconnects of Server.Close; a connection still up
// after it is aborted.
const stopTimeout = 5 * time.Second

// ServerConfig configures a Server; the zero value is valid.
type ServerConfig struct {
	// MaxConns bounds the connections at once (0: DefaultMaxConns); a request past it is
	// rejected and counted in Stats.Refused.
	MaxConns int
	// Log, if set, records each connection ("qp connected", "qp closed") and each request
	// that could not be accepted ("no QP for a connection", "accept failed").
	Log *slog.Logger
	// Connected, if set, is called with each accepted connection and its initiator's
	// address (the request's: for RoCEv2 the RDMA-CM address of the REQ); Closed, if set,
	// once the connection has ended and its QP is destroyed. Closed follows Connected.
	Connected func(c *cm.Conn, peer net.Addr)
	Closed    func(c *cm.Conn)
}

// Server is the memory target's accept loop, shared by "softrnic target" and the daemon's
// built-in target: it accepts every connection request on the listeners it serves with a
// new QP and the region's 16-byte advertisement as the accept's private data, granting
// an IRD of the initiator's ORD (at most the device's MaxIRD; the transport's default
// when the initiator sends none, as an MPA rev 1 peer does). Its QPs post no work. A
// connection's QP is destroyed when the connection ends.
type Server struct {
	pd     *rnic.PD
	cq     *rnic.CQ
	adv    []byte
	maxIRD int
	cfg    ServerConfig
	stop   chan struct{} // closed by Close: the connections are disconnected

	mu     sync.Mutex
	closed bool
	n      int            // connections, and accepts under way
	wg     sync.WaitGroup // a goroutine per connection

	served, refused, failed atomic.Uint64
}

// NewServer returns a Server of the region mr (nil: the accepts carry no private data)
// whose QPs are in pd.
func NewServer(pd *rnic.PD, mr *rnic.MR, cfg ServerConfig) (*Server, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	dev := pd.Device()
	cq, err := dev.CreateCQ(64) // the target posts no work: its QPs' CQ stays empty
	if err != nil {
		return nil, fmt.Errorf("target: create CQ: %w", err)
	}
	s := &Server{pd: pd, cq: cq, maxIRD: dev.Config().MaxIRD, cfg: cfg, stop: make(chan struct{})}
	if mr != nil {
		s.adv = mr.RemoteBuffer(0, mr.Len()).Append(nil)
	}
	return s, nil
}

// Serve answers the connection requests on ln until ctx ends or ln is closed, and returns
// Accept's error then. Several listeners may be served at once; MaxConns bounds them
// together.
func (s *Server) Serve(ctx context.Context, ln *cm.Listener) error {
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		s.accept(ln.Network(), req)
	}
}

// accept answers one request: a QP with the advertisement, or a reject past MaxConns.
func (s *Server) accept(network string, req *cm.ConnRequest) {
	peer := req.RemoteAddr()
	s.mu.Lock()
	full, closed := s.n >= s.cfg.MaxConns, s.closed
	if !full && !closed {
		s.n++
	}
	s.mu.Unlock()
	if full || closed {
		if full {
			s.refused.Add(1)
		}
		_ = req.Reject(nil)
		return
	}
	qp, err := s.pd.Device().CreateQP(s.pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		s.release()
		s.failed.Add(1)
		s.warn("no QP for a connection", network, peer, err)
		_ = req.Reject(nil)
		return
	}
	c, err := req.Accept(qp, cm.Param{PrivateData: s.adv, IRD: min(max(req.ORD(), 0), s.maxIRD), ORD: 1})
	if err != nil {
		s.release()
		s.failed.Add(1)
		s.warn("accept failed", network, peer, err)
		_ = qp.Destroy()
		return
	}
	s.served.Add(1)
	s.mu.Lock()
	if s.closed { // Close has begun and waits for no new connection
		s.n--
		s.mu.Unlock()
		_ = c.Close()
		_ = qp.Destroy()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.cfg.Connected != nil {
		s.cfg.Connected(c, peer)
	}
	if s.cfg.Log != nil {
		s.cfg.Log.Info("qp connected", "qpn", qp.Num(), "transport", network, "peer", peer.String())
	}
	go s.watch(c)
}

// watch destroys c's QP when the connection ends, or disconnects it when the Server is
// closed (gracefully, then abortively after stopTimeout).
func (s *Server) watch(c *cm.Conn) {
	defer s.wg.Done()
	select {
	case <-c.Done():
	case <-s.stop:
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		_ = c.Disconnect(ctx)
		cancel()
	}
	qp := c.QP()
	_ = qp.Destroy()
	s.release()
	if s.cfg.Closed != nil {
		s.cfg.Closed(c)
	}
	if s.cfg.Log != nil {
		s.cfg.Log.Info("qp closed", "qpn", qp.Num(), "state", qp.State().String())
	}
}

// release gives back a connection's place under MaxConns.
func (s *Server) release() {
	s.mu.Lock()
	s.n--
	s.mu.Unlock()
}

func (s *Server) warn(msg, network string, peer net.Addr, err error) {
	if s.cfg.Log != nil {
		s.cfg.Log.Warn(msg, "transport", network, "peer", peer.String(), "err", err)
	}
}

// Close disconnects every connection — gracefully, bounded by 5 s, then abortively — and
// returns when their QPs are destroyed; a connection accepted after it is closed at once.
// Serve ends with its listener or context, not with Close.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
}

// Stats returns what the Server did so far.
func (s *Server) Stats() Stats {
	return Stats{Served: s.served.Load(), Refused: s.refused.Load(), Failed: s.failed.Load()}
}
