package iwarp

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
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

// localIP returns the device's configured local address: LocalAddr, else the first
// address of Interface (IPv4 preferred), else "".
func localIP(d *rnic.Device) string {
	c := d.Config()
	if c.LocalAddr != "" || c.Interface == "" {
		return c.LocalAddr
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return ""
	}
	addrs, _ := ifi.Addrs()
	first := ""
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
			if first == "" {
				first = ipn.IP.String()
			}
		}
	}
	return first
}

// Dial connects qp (Idle) to a listener at addr (RFC 5044 §7.1.2 initiator): TCP connect,
// MPA Request with p's private data and IRD/ORD, MPA Reply, then the QP goes to RTS. A
// rejection is a *RejectError. ctx cancels the connect and the exchange.
func Dial(ctx context.Context, qp *rnic.QP, addr string, cfg *Config, p ConnParam) (*Conn, error) {
	c := cfg.norm()
	mc := c.MPA
	mc.IRD, mc.ORD = defDepth(p.IRD), defDepth(p.ORD)
	mc.MaxIRD = uint16(min(qp.Device().Config().MaxIRD, mpa.MaxIRDORD-1))
	req, err := mpa.Request(mc, p.PrivateData)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: c.Timeout}
	if la := localIP(qp.Device()); la != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(la)}
	}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := deadline(ctx, nc, c.Timeout)
	fail := func(err error) (*Conn, error) {
		stop()
		_ = nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if _, err := nc.Write(req.Append(nil)); err != nil {
		return fail(err)
	}
	_, rep, err := readFrame(nc, mc.MaxPrivateData)
	if err != nil {
		return fail(err)
	}
	params, err := mpa.Complete(mc, &req, &rep)
	if errors.Is(err, mpa.ErrRejected) {
		return fail(&RejectError{PrivateData: append([]byte(nil), rep.PrivateData...)})
	}
	var me *mpa.Error
	if errors.As(err, &me) && (me.Code == mpa.CodeInsufficientIRD || me.Code == mpa.CodeNoMatchingRTR) {
		// RFC 6581 §9: tell the responder with a Terminate, then close.
		sendLLPTerm(nc, params, rdmap.FromLLP(uint8(me.Code)))
		return fail(err)
	}
	if err != nil {
		return fail(err)
	}
	stop()
	if _, ok := inProc.Load(tupleKey(nc.LocalAddr(), nc.RemoteAddr())); ok {
		c.Settle = 0 // the responder is ours: no siw race to wait out
	}
	conn := newConn(qp, nc, c, params, true, append([]byte(nil), rep.PrivateData...))
	if err := conn.start(); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return conn, nil
}

// sendLLPTerm writes a bare Terminate on a connection whose MPA negotiation failed.
func sendLLPTerm(nc net.Conn, p mpa.Params, te rdmap.TerminateError) {
	t := rdmap.TerminateFor(te, 0, nil, nil)
	b := rdmap.AppendTerminateMessage(nil, 1, &t)
	_ = mpa.NewWriter(nc, p.TxFraming()).WriteFPDU(b, nil)
}

// inProc holds the TCP connections (tupleKey of initiator and responder address) that
// Listeners of this process accepted and that are still open, so Dial can tell an
// in-process responder, which has no siw race, and skip Config.Settle.
var inProc sync.Map

func tupleKey(initiator, responder net.Addr) string {
	return initiator.String() + ">" + responder.String()
}

// Listener accepts iWARP connection requests on a TCP address.
type Listener struct {
	dev  *rnic.Device
	ln   net.Listener
	cfg  Config
	reqs chan *ConnRequest
	quit chan struct{}
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	once sync.Once
}

// Listen listens on addr ("host:port"; port 0 picks one; "" means the device's LocalAddr
// or Interface address, else 127.0.0.1, port 0).
func Listen(dev *rnic.Device, addr string, cfg *Config) (*Listener, error) {
	c := cfg.norm()
	if addr == "" {
		h := localIP(dev)
		if h == "" {
			h = "127.0.0.1"
		}
		addr = net.JoinHostPort(h, "0")
	}
	lc := net.ListenConfig{}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{dev: dev, ln: ln, cfg: c, reqs: make(chan *ConnRequest, c.Backlog), quit: make(chan struct{})}
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening, drops pending requests and waits for the listener's goroutines.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.quit)
		l.stop()
		_ = l.ln.Close()
	})
	l.wg.Wait()
	for {
		select {
		case r := <-l.reqs:
			if r.take() {
				_ = r.nc.Close()
			}
		default:
			return nil
		}
	}
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go l.handshake(nc)
	}
}

// handshake reads the MPA Request (siw's responder waits 5 s, MPAREP_TIMEOUT).
func (l *Listener) handshake(nc net.Conn) {
	defer l.wg.Done()
	_ = nc.SetDeadline(time.Now().Add(l.cfg.Timeout))
	stop := context.AfterFunc(l.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	raw, f, err := readFrame(nc, l.cfg.MPA.MaxPrivateData)
	stop()
	_ = nc.SetDeadline(time.Time{})
	if err != nil || f.Reply {
		_ = nc.Close()
		return
	}
	r := &ConnRequest{l: l, nc: nc, req: f, raw: raw}
	// An unanswered request is dropped after the MPA timeout (the initiator gives up too).
	r.mu.Lock()
	r.timer = time.AfterFunc(l.cfg.Timeout, func() {
		if r.take() {
			_ = nc.Close()
		}
	})
	r.mu.Unlock()
	select {
	case l.reqs <- r:
	default:
		_ = nc.Close() // backlog full
	}
}

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.quit:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ConnRequest is an incoming connection request (a received MPA Request frame). It must
// be answered with Accept or Reject within Config.Timeout, else the connection is dropped.
type ConnRequest struct {
	l     *Listener
	nc    net.Conn
	req   mpa.Frame
	raw   []byte
	mu    sync.Mutex
	used  bool
	timer *time.Timer
}

// PrivateData returns the initiator's private data (without the RFC 6581 IRD/ORD word).
func (r *ConnRequest) PrivateData() []byte { return r.req.PrivateData }

// IRD returns the initiator's IRD (RFC 6581 §9.1), 0 for a non-enhanced request.
func (r *ConnRequest) IRD() int { return int(r.req.IRD) }

// ORD returns the initiator's ORD.
func (r *ConnRequest) ORD() int { return int(r.req.ORD) }

// Frame returns the parsed MPA Request.
func (r *ConnRequest) Frame() mpa.Frame { return r.req }

// RemoteAddr returns the initiator's address.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.nc.RemoteAddr() }

// LocalAddr returns the local address of the connection.
func (r *ConnRequest) LocalAddr() net.Addr { return r.nc.LocalAddr() }

func (r *ConnRequest) take() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used {
		return false
	}
	r.used = true
	if r.timer != nil {
		r.timer.Stop()
	}
	return true
}

var errUsed = errors.New("iwarp: connection request already answered")

// Accept binds qp (Idle) to the connection and sends the MPA Reply with pd (RFC 5044
// §7.1.2 rule 2, RFC 6581 §9). The QP is in RTS on return; as RFC 5044 requires, it sends
// nothing until the initiator's first FPDU (the RTR in peer-to-peer mode) has arrived.
func (r *ConnRequest) Accept(qp *rnic.QP, p ConnParam) (*Conn, error) {
	if !r.take() {
		return nil, errUsed
	}
	c := r.l.cfg
	mc := c.MPA
	mc.IRD, mc.ORD = defDepth(p.IRD), defDepth(p.ORD)
	rep, params, err := mpa.Respond(mc, &r.req, p.PrivateData)
	if err != nil {
		if rep.Reject {
			_, _ = r.nc.Write(rep.Append(nil))
		}
		_ = r.nc.Close()
		return nil, err
	}
	conn := newConn(qp, r.nc, c, params, false, r.req.PrivateData)
	if err := conn.attach(); err != nil {
		_ = r.nc.Close()
		return nil, err
	}
	// Registered before the Reply is written, so the initiator finds it when it has read it.
	conn.procKey = tupleKey(r.nc.RemoteAddr(), r.nc.LocalAddr())
	inProc.Store(conn.procKey, struct{}{})
	_ = r.nc.SetWriteDeadline(time.Now().Add(c.Timeout))
	_, err = r.nc.Write(rep.Append(nil))
	_ = r.nc.SetWriteDeadline(time.Time{})
	if err != nil {
		inProc.Delete(conn.procKey)
		_ = r.nc.Close()
		conn.qp.TransportDone(err)
		return nil, err
	}
	conn.running.Store(2)
	go conn.sendLoop()
	go conn.recvLoop()
	if err := conn.qp.Established(); err != nil {
		conn.abort(true)
		return nil, err
	}
	return conn, nil
}

// Reject refuses the request with an MPA Reply carrying the R bit and pd, then closes.
func (r *ConnRequest) Reject(pd []byte) error {
	if !r.take() {
		return errUsed
	}
	rep := mpa.RejectReply(&r.req, pd)
	if l := r.l.cfg.MPA.MaxPrivateData; rep.PDLength() > l {
		_ = r.nc.Close()
		return mpa.ErrPrivateDataTooLong
	}
	_ = r.nc.SetWriteDeadline(time.Now().Add(r.l.cfg.Timeout))
	_, err := r.nc.Write(rep.Append(nil))
	if tc, ok := r.nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = r.nc.Close()
	return err
}
