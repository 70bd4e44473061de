package iwarp

// The initiator's connection set-up (RFC 5044 §7.1.2, RFC 6581 §9).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

func defDepth(v int) uint16 {
	if v <= 0 {
		v = 16
	}
	return uint16(min(v, mpa.MaxIRDORD-1))
}

// readFrame reads one MPA Request or Reply frame, exactly (RFC 5044 §7.1.2: no trailing bytes).
func readFrame(nc net.Conn, maxPD int) ([]byte, mpa.Frame, error) {
	buf := make([]byte, mpa.HeaderLen, mpa.HeaderLen+64)
	if _, err := io.ReadFull(nc, buf); err != nil {
		return nil, mpa.Frame{}, err
	}
	n, err := mpa.FrameLenMax(buf, maxPD)
	if err != nil {
		return nil, mpa.Frame{}, err
	}
	buf = append(buf, make([]byte, n-mpa.HeaderLen)...)
	if _, err := io.ReadFull(nc, buf[mpa.HeaderLen:]); err != nil {
		return nil, mpa.Frame{}, err
	}
	f, err := mpa.ParseFrame(buf)
	return buf, f, err
}

// deadline applies ctx and the timeout to nc until the returned stop is called.
func deadline(ctx context.Context, nc net.Conn, d time.Duration) (stop func()) {
	_ = nc.SetDeadline(time.Now().Add(d))
	s := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	return func() {
		s()
		_ = nc.SetDeadline(time.Time{})
	}
}

// dialLLP makes the TCP connection: through cfg.Dial when set, else a net.Dialer bound
// to the device's local address.
func dialLLP(ctx context.Context, dev *rnic.Device, addr string, cfg *Config) (net.Conn, error) {
	if cfg.Dial != nil {
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		return cfg.Dial(ctx, "tcp", addr)
	}
	d := net.Dialer{Timeout: cfg.Timeout, KeepAlive: -1} // tuneConn sets keepalive
	if la := dev.Config().LocalIP(); la != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(la)}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// Dial connects qp (Idle) to a listener at addr (RFC 5044 §7.1.2 initiator): TCP connect
// (Config.Dial, or from the device's LocalAddr/Interface address), MPA Request with p's
// private data and IRD/ORD, MPA Reply, then the QP goes to RTS and Dial returns; the
// first FPDU (the RTR in peer-to-peer mode) goes out at once. A rejection is a
// *RejectError. ctx cancels the connect and the exchange. Errors wrap their cause:
// errors.Is reaches the syscall error of a failed connect, os.ErrDeadlineExceeded of an
// MPA timeout, ctx's error, and errors.As a *net.OpError or *mpa.Error.
func Dial(ctx context.Context, qp *rnic.QP, addr string, cfg *Config, p ConnParam) (*Conn, error) {
	c := cfg.norm()
	mc := c.MPA
	mc.IRD, mc.ORD = defDepth(p.IRD), defDepth(p.ORD)
	mc.MaxIRD = uint16(min(qp.Device().Config().MaxIRD, mpa.MaxIRDORD-1))
	req, err := mpa.Request(mc, p.PrivateData)
	if err != nil {
		return nil, fmt.Errorf("iwarp: dial %s: %w", addr, err)
	}
	nc, err := dialLLP(ctx, qp.Device(), addr, &c)
	if err != nil {
		return nil, fmt.Errorf("iwarp: dial %s: %w", addr, err)
	}
	tuneConn(nc, &c)
	stop := deadline(ctx, nc, c.Timeout)
	fail := func(what string, err error) (*Conn, error) {
		stop()
		_ = nc.Close()
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// The I/O error is the deadline ctx's cancellation set: report both.
			return nil, fmt.Errorf("iwarp: dial %s: %s: %w (%w)", addr, what, cerr, err)
		}
		return nil, fmt.Errorf("iwarp: dial %s: %s: %w", addr, what, err)
	}
	if _, err := nc.Write(req.Append(nil)); err != nil {
		return fail("MPA Request", err)
	}
	_, rep, err := readFrame(nc, mc.MaxPrivateData)
	if err != nil {
		return fail("MPA Reply", err)
	}
	params, err := mpa.Complete(mc, &req, &rep)
	if errors.Is(err, mpa.ErrRejected) {
		return fail("MPA Reply", &RejectError{PrivateData: append([]byte(nil), rep.PrivateData...)})
	}
	var me *mpa.Error
	if errors.As(err, &me) && (me.Code == mpa.CodeInsufficientIRD || me.Code == mpa.CodeNoMatchingRTR) {
		// RFC 6581 §9: tell the responder with a Terminate, then close.
		sendLLPTerm(nc, params, rdmap.FromLLP(uint8(me.Code)))
		return fail("MPA Reply", err)
	}
	if err != nil {
		return fail("MPA Reply", err)
	}
	stop()
	conn := newConn(qp, nc, c, params, true, append([]byte(nil), rep.PrivateData...))
	if err := conn.start(); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("iwarp: dial %s: %w", addr, err)
	}
	return conn, nil
}

// sendLLPTerm writes a bare Terminate on a connection whose MPA negotiation failed.
func sendLLPTerm(nc net.Conn, p mpa.Params, te rdmap.TerminateError) {
	t := rdmap.TerminateFor(te, 0, nil, nil)
	b := rdmap.AppendTerminateMessage(nil, 1, &t)
	_ = mpa.NewWriter(nc, p.TxFraming()).WriteFPDU(b, nil)
}
