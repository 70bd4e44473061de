package rping

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// server is a listening rping server: its device (and RoCEv2 endpoint) and listener.
type server struct {
	o   Options
	out output
	dev *rnic.Device
	ep  *rocev2.Endpoint
	ln  *listener
}

// listenServer opens the server's device and listens on -a (all addresses without it)
// and -p.
func listenServer(o Options, out output) (_ *server, err error) {
	s := &server{o: o, out: out}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.dev, s.ep, err = tool.OpenDevice(o.RoCE, func() (netip.Addr, error) { return tool.ParseIP("--roce: -a", o.Addr) })
	if err != nil {
		return nil, err
	}
	host := o.Addr
	if host == "" {
		host = "0.0.0.0"
	}
	if s.ln, err = listen(s.dev, s.ep, host, &s.o); err != nil {
		return nil, fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if o.Listening != nil {
		o.Listening(s.ln.addr())
	}
	if o.RoCE {
		out.debugf("listening on %v (RoCEv2)", s.ln.addr())
	} else {
		out.debugf("listening on %v", s.ln.addr())
	}
	return s, nil
}

func (s *server) close() {
	if s.ln != nil {
		s.ln.close()
	}
	if s.ep != nil {
		_ = s.ep.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
}

// serveOne accepts one connection and serves it until the client leaves (rping -s).
func (s *server) serveOne(ctx context.Context) error {
	req, err := s.ln.accept(ctx)
	if err != nil {
		return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
	}
	return s.session(ctx, req)
}

// session accepts req on a new session and runs rping_test_server on it. The client
// leaving is not an error.
func (s *server) session(ctx context.Context, req *request) error {
	s.out.debugf("connect request from %v ird %d ord %d", req.remoteAddr(), req.ird(), req.ord())
	ss, err := newSession(s.dev, &s.o, s.out)
	if err != nil {
		req.reject()
		return err
	}
	defer ss.close()
	if err := ss.postRecv(); err != nil {
		req.reject()
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	if ss.conn, err = req.accept(ss.qp); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer ss.report()
	err = ss.serve(ctx)
	if err == errDisconnected {
		fmt.Fprintln(s.out.stderr, "server DISCONNECT EVENT...")
		return nil
	}
	return err
}

// serve is rping_test_server: Read the client's source, go ahead, Write it back, go ahead.
func (s *session) serve(ctx context.Context) error {
	for {
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return wrapState("wait for RDMA_READ_ADV", err)
		}
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
