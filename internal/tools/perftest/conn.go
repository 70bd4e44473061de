package perftest

// This file is the only place perftest connects: it opens the device on iWARP or RoCEv2
// through rnic/cm; listens, accepts and dials the communication connection and the data
// connections (one rdma_cm connection per QP, all to the same port, as perftest -R makes
// them); makes the TCP connection of the exchange without -R; and connects RoCEv2 QPs by
// hand without -R (ctx_connect's ibv_modify_qp to RTR and RTS).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// open opens the device on the test's network. iWARP: MPA rev 2 with the IRD/ORD word,
// CRC only when asked, and peer-to-peer mode with a Write (or Read) RTR when softrnic
// dials: an MPA responder may send nothing before the initiator's first FPDU (RFC 5044
// §7.1.2 rule 4), and ib_write_lat's server writes first, so the RTR (RFC 6581) is the
// first FPDU. A responder follows the initiator's choice (siw asks for client-server).
// RoCEv2: the link on UDP 4791 at --bind (server) or the route to the server (client),
// with perftest's QP attributes (ACK timeout -u, 7 retries, RNR timer 12, reads/atomics
// outstanding -o).
func (s *session) open() error {
	o := &s.o
	if o.iwarp() {
		iw := tool.IWARPConfig(o.CRC)
		local := ""
		if o.Bind != "" {
			a, err := tool.ParseIP("--bind", o.Bind)
			if err != nil {
				return err
			}
			local = a.String()
		}
		var err error
		s.dev, s.t, err = tool.Open(rnic.Config{Name: o.Dev, WaitDrivesReceive: o.WaitDrives, ReceiveSpin: o.Spin}, cm.IWARP, local, &cm.Options{IWARP: iw})
		return err
	}
	local, err := tool.LocalIP("--bind", o.Bind, o.Peer)
	if err != nil {
		return err
	}
	s.laddr = local
	cfg := rocev2.DefaultConfig()
	if o.MTU != 0 {
		cfg.MTU = roce.MTUFromBytes(o.MTU)
	}
	cfg.Timeout = uint8(o.Timeout8)
	cfg.RetryCnt, cfg.RNRRetry = uint8(o.Retry), uint8(o.Retry)
	cfg.MaxRdAtomic, cfg.MaxDestRd = max(o.OutReads, 1), max(o.OutReads, 1)
	s.dev, s.t, err = tool.Open(rnic.Config{Name: o.Dev, WaitDrivesReceive: o.WaitDrives}, cm.RoCEv2, local.String(), &cm.Options{RoCE: cfg})
	if err != nil {
		return fmt.Errorf("RoCEv2 link on %v: %w", local, err)
	}
	s.ep = s.t.Endpoint()
	return nil
}

// hostPort is the address the server listens on (every address without --bind).
func (s *session) listenAddr() string {
	host := s.o.Bind
	if host == "" {
		host = "0.0.0.0"
		if s.ep != nil {
			host = s.laddr.String()
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(s.o.Port))
}

func (s *session) peerAddr() string { return net.JoinHostPort(s.o.Peer, strconv.Itoa(s.o.Port)) }

// connectComm makes the exchange's connection: the first rdma_cm connection to the port
// (-R, -z) or a TCP connection. The server keeps its rdma_cm listener for the data
// connections, so that it already listens when the client dials them.
func (s *session) connectComm(ctx context.Context) error {
	o := &s.o
	if !o.commCM() {
		return s.connectTCP(ctx)
	}
	rc, err := newRDMAComm(s.dev, s.pd)
	s.comm = rc
	if err != nil {
		return err
	}
	if !s.server {
		// perftest does not retry the communication connection: the server must listen.
		if rc.conn, err = s.t.Dial(ctx, rc.qp, s.peerAddr(), cm.Param{}); err != nil {
			return fmt.Errorf("Unexpected CM event (connecting to %s): %w", s.peerAddr(), err)
		}
		return nil
	}
	if s.ln, err = s.t.Listen(s.listenAddr()); err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if o.Listening != nil {
		o.Listening(s.ln.Addr())
	}
	s.printf("%s", waitingBanner)
	req, err := s.ln.Accept(ctx)
	if err != nil {
		return fmt.Errorf("waiting for a client: %w", err)
	}
	if rc.conn, err = req.Accept(rc.qp, cm.Param{}); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if !o.RDMACM {
		_ = s.ln.Close()
		s.ln = nil
	}
	return nil
}

// connectTCP is ethernet_server_connect / ethernet_client_connect: IPv4, one connection;
// the client does not retry.
func (s *session) connectTCP(ctx context.Context) error {
	if !s.server {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", s.peerAddr())
		if err != nil {
			return fmt.Errorf("Couldn't connect to %s: %w", s.peerAddr(), err)
		}
		s.comm = newTCPComm(c)
		return nil
	}
	var lc net.ListenConfig
	addr := net.JoinHostPort(s.o.Bind, strconv.Itoa(s.o.Port))
	ln, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		return fmt.Errorf("Couldn't listen to port %d: %w", s.o.Port, err)
	}
	defer ln.Close()
	if s.o.Listening != nil {
		s.o.Listening(ln.Addr())
	}
	s.printf("%s", waitingBanner)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for a client: %w", context.Cause(ctx))
		}
		return fmt.Errorf("accept() failed: %w", err)
	}
	s.comm = newTCPComm(c)
	return nil
}

// connParam is the data connections' rdma_conn_param: IRD = ORD = outstanding reads for
// Read and atomic tests.
func (s *session) connParam() cm.Param {
	if s.o.Verb == Read || s.o.Verb == Atomic {
		return cm.Param{IRD: s.o.OutReads, ORD: s.o.OutReads}
	}
	return cm.Param{}
}

// connectData makes the N data connections of -R. The server accepts N requests in
// arrival order (QP i is the i-th, as perftest numbers them) and then stops listening.
// The client dials them one after the other; a refusal (a perftest server listens for
// them only once its answer to the exchange has been sent) is retried, backing off from
// 5 ms to 200 ms, for up to 10 s.
func (s *session) connectData(ctx context.Context) error {
	p := s.connParam()
	s.conns = make([]*cm.Conn, len(s.qps))
	if s.server {
		defer func() { _ = s.ln.Close(); s.ln = nil }()
		for i, qp := range s.qps {
			req, err := s.ln.Accept(ctx)
			if err != nil {
				return fmt.Errorf("waiting for data connection %d of %d: %w", i+1, len(s.qps), err)
			}
			if s.conns[i], err = req.Accept(qp, p); err != nil {
				return fmt.Errorf("rdma_accept (data connection %d): %w", i+1, err)
			}
		}
		return nil
	}
	for i, qp := range s.qps {
		var err error
		start, wait := time.Now(), 5*time.Millisecond
		for {
			if s.conns[i], err = s.t.Dial(ctx, qp, s.peerAddr(), p); err == nil {
				break
			}
			if !errors.Is(err, cm.ErrRefused) || time.Since(start) > 10*time.Second || qp.State() != rnic.QPIdle {
				return fmt.Errorf("data connection %d of %d: %w", i+1, len(s.qps), err)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("data connection %d of %d: %w", i+1, len(s.qps), context.Cause(ctx))
			}
			wait = min(2*wait, 200*time.Millisecond)
		}
	}
	return nil
}

// connectManual connects the data QPs by hand (ctx_connect without -R): RC to the peer's
// QPN and PSN at the address of its GID, over RoCEv2.
func (s *session) connectManual() error {
	for i, qp := range s.qps {
		r := &s.rem[i]
		addr := netip.AddrFrom16(r.GID).Unmap()
		_, err := s.ep.Connect(qp, rocev2.ConnAttr{Type: rocev2.RC, Remote: netip.AddrPortFrom(addr, roce.UDPPort),
			RemoteQPN: r.QPN, SendPSN: roce.PSN(s.my[i].PSN), RecvPSN: roce.PSN(r.PSN), MTU: roce.MTU(s.mtu)})
		if err != nil {
			return fmt.Errorf("Unable to Connect the HCA's through the link: QP %d: %w", i, err)
		}
	}
	return nil
}

// disconnect ends the data connections and the exchange's. The client disconnects every
// data connection gracefully (rdma_disconnect, at most 5 s in all) and, after the server
// has closed the exchange (at most 1 s: siw fails a last SEND whose connection closes
// before its transmit thread completed it, which makes perftest's server exit 1), the
// exchange's. The server waits for the client's disconnects (at most 5 s).
func (s *session) disconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.ep != nil {
		// ib_write_lat ends without a handshake: the peer's last Write completes when our
		// ACK of it has left.
		_ = tool.FlushRoCE(ctx, s.dev, s.ep)
	}
	if s.server {
		for _, c := range s.conns {
			if c == nil {
				continue
			}
			select {
			case <-c.Done():
			case <-ctx.Done():
			}
		}
		return
	}
	for _, c := range s.conns {
		if c != nil {
			_ = c.Disconnect(ctx)
		}
	}
	if d := s.comm.done(); d != nil {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-d:
		case <-t.C:
		}
	}
}
