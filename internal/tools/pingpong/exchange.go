package pingpong

// This file is the only place pingpong connects: the out-of-band address exchange over
// TCP (the client dials, the server listens) and the QP's connection to the peer's QP.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// connectQP moves qp to RTS towards the peer's QP (ibv_modify_qp to RTR and RTS with
// rc_pingpong's attributes): the peer's address is its GID, else the address the
// exchange came from.
func connectQP(ep *rocev2.Endpoint, qp *rnic.QP, o *Options, mtu roce.MTU, my, rem Dest, peer netip.Addr) error {
	if a, ok := rem.Addr(); ok {
		peer = a
	}
	_, err := ep.Connect(qp, rocev2.ConnAttr{Type: rocev2.RC, Remote: netip.AddrPortFrom(peer, uint16(o.UDPPort)),
		RemoteQPN: rem.QPN, SendPSN: roce.PSN(my.PSN), RecvPSN: roce.PSN(rem.PSN), MTU: mtu})
	if err != nil {
		return fmt.Errorf("Couldn't connect to remote QP: %w", err)
	}
	return nil
}

// exchange swaps addresses with the peer as the options' role does and calls connect
// with the peer's address and the address of its TCP end; it returns the peer's address.
func exchange(ctx context.Context, o *Options, my Dest, connect func(Dest, netip.Addr) error) (Dest, error) {
	if o.Peer != "" {
		return clientExchange(ctx, o, my, connect)
	}
	return serverExchange(ctx, o, my, connect)
}

func readFull(c net.Conn, b []byte) error {
	_, err := io.ReadFull(c, b)
	return err
}

// clientExchange is pp_client_exch_dest: send ours, read theirs, send "done", connect.
func clientExchange(ctx context.Context, o *Options, my Dest, connect func(Dest, netip.Addr) error) (Dest, error) {
	var rem Dest
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(o.Peer, strconv.Itoa(o.Port)))
	if err != nil {
		return rem, fmt.Errorf("Couldn't connect to %s:%d", o.Peer, o.Port)
	}
	defer c.Close()
	if _, err := c.Write(my.Append(nil)); err != nil {
		return rem, errors.New("Couldn't send local address")
	}
	msg := make([]byte, MsgLen)
	if err := readFull(c, msg); err != nil {
		return rem, errors.New("Couldn't read/write remote address")
	}
	if _, err := c.Write([]byte(DoneMsg)); err != nil {
		return rem, errors.New("Couldn't read/write remote address")
	}
	if rem, err = ParseDest(msg); err != nil {
		return rem, err
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	return rem, connect(rem, peer)
}

// serverExchange is pp_server_exch_dest: accept one client, read its address, connect,
// send ours, wait for "done".
func serverExchange(ctx context.Context, o *Options, my Dest, connect func(Dest, netip.Addr) error) (Dest, error) {
	var rem Dest
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(o.Port))
	if err != nil {
		return rem, fmt.Errorf("Couldn't listen to port %d", o.Port)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		return rem, errors.New("accept() failed")
	}
	defer c.Close()
	msg := make([]byte, MsgLen)
	if err := readFull(c, msg); err != nil {
		return rem, errors.New("Couldn't read remote address")
	}
	if rem, err = ParseDest(msg); err != nil {
		return rem, err
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if err := connect(rem, peer); err != nil {
		return rem, err
	}
	if _, err := c.Write(my.Append(nil)); err != nil {
		return rem, errors.New("Couldn't send/recv local address")
	}
	if err := readFull(c, msg[:len(DoneMsg)]); err != nil {
		return rem, errors.New("Couldn't send/recv local address")
	}
	return rem, nil
}
