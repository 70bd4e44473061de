package pingpong

// This file is the only place pingpong connects: it opens the device on RoCEv2 through
// rnic/cm (the examples connect their QPs by hand, so only the transport's endpoint is
// used), swaps addresses with the peer over TCP (the client dials, the server listens) and
// connects the QPs to the peer's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// open opens the device and its RoCEv2 endpoint on the local address's UDP port -u, with
// the examples' QP attributes (rocev2's defaults are rc_pingpong's; max_rd_atomic 1).
func (r *run) open() error {
	o := r.o
	laddr, err := tool.LocalIP("-a", o.Local, o.Peer)
	if err != nil {
		return err
	}
	r.laddr = laddr
	cfg := rocev2.DefaultConfig()
	cfg.MTU = roce.MTUFromBytes(o.MTU)
	cfg.MaxRdAtomic, cfg.MaxDestRd = 1, 1
	cfg.PeerPort = uint16(o.UDPPort)
	link := netip.AddrPortFrom(laddr, uint16(o.UDPPort)).String()
	r.dev, r.t, err = tool.Open(rnic.Config{Name: o.Dev}, cm.RoCEv2, link, &cm.Options{RoCE: cfg})
	if err != nil {
		return fmt.Errorf("couldn't open the RoCEv2 link %s: %w", link, err)
	}
	r.ep = r.t.Endpoint()
	return nil
}

// connect connects QP i to the peer's entry rem (pp_connect_ctx) at peer.
func (r *run) connect(i int, rem Dest, peer netip.Addr) error {
	remote := netip.AddrPortFrom(peer, uint16(r.o.UDPPort))
	if r.o.Mode == UD {
		r.ah = rocev2.AH{Addr: remote, QPN: rem.QPN, QKey: udQKey}
		return nil
	}
	typ := rocev2.RC
	if r.o.Mode == UC {
		typ = rocev2.UC
	}
	_, err := r.ep.Connect(r.qps[i], rocev2.ConnAttr{Type: typ, Remote: remote, RemoteQPN: rem.QPN,
		SendPSN: roce.PSN(r.my[i].PSN), RecvPSN: roce.PSN(rem.PSN), MTU: roce.MTUFromBytes(r.o.MTU)})
	if err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	return nil
}

// connectAll connects every QP to its entry of rem, refusing a peer that has fewer QPs
// than -q (a zero entry) instead of sending to QP 0. The peer's address is the GID of its
// first entry (srq_pingpong uses it for every QP), else from (where the exchange came
// from).
func (r *run) connectAll(rem []Dest, from netip.Addr) error {
	peer := from
	if a, ok := rem[0].Addr(); ok {
		peer = a
	}
	for i := range max(len(r.qps), 1) {
		if rem[i].QPN == 0 {
			return fmt.Errorf("the peer has %d QPs, this side %d: both sides need the same -q", i, len(r.qps))
		}
		if err := r.connect(i, rem[i], peer); err != nil {
			return err
		}
	}
	return nil
}

// exchange swaps addresses with the peer (pp_client_exch_dest / pp_server_exch_dest) and
// connects the QPs: entries messages each way (1, or 256 for --srq).
func (r *run) exchange(ctx context.Context, entries int) ([]Dest, error) {
	msgs := make([]byte, 0, entries*MsgLen)
	for i := range entries {
		var d Dest
		if i < len(r.my) {
			d = r.my[i]
		}
		msgs = d.Append(msgs)
	}
	if r.o.Peer != "" {
		return r.clientExchange(ctx, msgs, entries)
	}
	return r.serverExchange(ctx, msgs, entries)
}

func parseAll(b []byte, entries int) ([]Dest, error) {
	rem := make([]Dest, entries)
	for i := range rem {
		d, err := ParseDest(b[i*MsgLen : (i+1)*MsgLen])
		if err != nil {
			return nil, err
		}
		rem[i] = d
	}
	return rem, nil
}

// clientExchange: send ours, read theirs, send "done", connect. Like the examples, it
// connects once and does not retry: the server must be listening.
func (r *run) clientExchange(ctx context.Context, msgs []byte, entries int) ([]Dest, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(r.o.Peer, strconv.Itoa(r.o.Port)))
	if err != nil {
		return nil, fmt.Errorf("Couldn't connect to %s:%d: %w", r.o.Peer, r.o.Port, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write(msgs); err != nil {
		return nil, fmt.Errorf("Couldn't send local address: %w", err)
	}
	in := make([]byte, entries*MsgLen)
	if _, err := io.ReadFull(c, in); err != nil {
		return nil, fmt.Errorf("Couldn't read/write remote address: %w", ctxErr(ctx, err))
	}
	if _, err := c.Write([]byte(DoneMsg)); err != nil {
		return nil, fmt.Errorf("Couldn't read/write remote address: %w", err)
	}
	rem, err := parseAll(in, entries)
	if err != nil {
		return nil, err
	}
	return rem, r.connectAll(rem, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
}

// serverExchange: accept one client, read its addresses, connect, send ours, wait for
// "done".
func (r *run) serverExchange(ctx context.Context, msgs []byte, entries int) ([]Dest, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(r.o.Port))
	if err != nil {
		return nil, fmt.Errorf("Couldn't listen to port %d: %w", r.o.Port, err)
	}
	if r.o.Listening != nil {
		r.o.Listening(ln.Addr())
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", ctxErr(ctx, err))
	}
	defer c.Close()
	stop = context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	in := make([]byte, entries*MsgLen)
	if _, err := io.ReadFull(c, in); err != nil {
		return nil, fmt.Errorf("Couldn't read remote address: %w", ctxErr(ctx, err))
	}
	rem, err := parseAll(in, entries)
	if err != nil {
		return nil, err
	}
	if err := r.connectAll(rem, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()); err != nil {
		return nil, err
	}
	if _, err := c.Write(msgs); err != nil {
		return nil, fmt.Errorf("Couldn't send/recv local address: %w", err)
	}
	if _, err := io.ReadFull(c, in[:len(DoneMsg)]); err != nil {
		return nil, fmt.Errorf("Couldn't send/recv local address: %w", ctxErr(ctx, err))
	}
	return rem, nil
}

// ctxErr prefers the context's error (a timeout, an interrupt) to the closed socket's.
func ctxErr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w (%v)", c, err)
	}
	return err
}
