package iwarp

// The responder's connection set-up (RFC 5044 §7.1.2, RFC 6581 §9): the listener, its
// accept loop and limits, and connection requests.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
)

// Listener accepts iWARP connection requests on a TCP address (or any net.Listener, see
// Serve).
type Listener struct {
	dev  *rnic.Device
	ln   net.Listener
	cfg  Config
	log  *slog.Logger
	reqs chan *ConnRequest
	quit chan struct{}
	dead chan struct{} // closed when the accept loop ended on its own (err holds why)
	err  error
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	once sync.Once
	st   listenerCounters
}

// ListenerStats counts what a listener did with the connections it was offered. Every
// refusal has its counter.
type ListenerStats struct {
	Accepted          uint64 // TCP connections accepted
	AcceptErrors      uint64 // failed accept calls, each retried after a backoff
	RefusedListener   uint64 // closed at once: the listener's MaxConns was reached
	RefusedDevice     uint64 // closed at once: the device's MaxDeviceConns was reached
	RefusedBacklog    uint64 // MPA Request answered with a Reject: Backlog was full
	BadRequests       uint64 // no valid MPA Request within Timeout: closed
	Unanswered        uint64 // ConnRequests not answered within Timeout: closed
	Rejected          uint64 // ConnRequests refused by the application (Reject)
	Established       uint64 // ConnRequests accepted
	FirstFPDUTimeouts uint64 // accepted connections ended by ErrFirstFPDUTimeout
	Active            int64  // connections held now (pending and established)
}

type listenerCounters struct {
	accepted, acceptErrors, refusedListener, refusedDevice, refusedBacklog atomic.Uint64
	badRequests, unanswered, rejected, established, firstFPDUTimeouts      atomic.Uint64
	active                                                                 atomic.Int64
}

// Stats returns a snapshot of the listener's counters.
func (l *Listener) Stats() ListenerStats {
	s := &l.st
	return ListenerStats{s.accepted.Load(), s.acceptErrors.Load(), s.refusedListener.Load(),
		s.refusedDevice.Load(), s.refusedBacklog.Load(), s.badRequests.Load(), s.unanswered.Load(),
		s.rejected.Load(), s.established.Load(), s.firstFPDUTimeouts.Load(), s.active.Load()}
}

// Listen listens on addr ("host:port"; port 0 picks one; "" means the device's LocalAddr
// or Interface address, else 127.0.0.1, port 0). Errors wrap the cause (errors.Is(err,
// syscall.EADDRINUSE), errors.As a *net.OpError).
func Listen(dev *rnic.Device, addr string, cfg *Config) (*Listener, error) {
	if addr == "" {
		h := dev.Config().LocalIP()
		if h == "" {
			h = "127.0.0.1"
		}
		addr = net.JoinHostPort(h, "0")
	}
	lc := net.ListenConfig{KeepAlive: -1} // tuneConn sets keepalive per connection
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("iwarp: listen: %w", err)
	}
	return Serve(dev, ln, cfg), nil
}

// Serve accepts iWARP connection requests from ln, which the Listener owns from now on
// (Listener.Close closes it). ln may be any net.Listener, e.g. one of a user-space TCP
// stack; its connections get the fast paths only when they are *net.TCPConn (see the
// package documentation).
func Serve(dev *rnic.Device, ln net.Listener, cfg *Config) *Listener {
	c := cfg.norm()
	l := &Listener{dev: dev, ln: ln, cfg: c, log: c.Logger, reqs: make(chan *ConnRequest, c.Backlog),
		quit: make(chan struct{}), dead: make(chan struct{})}
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening, drops pending requests and waits for the listener's goroutines.
// Established connections stay up.
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
				r.drop()
			}
		default:
			return nil
		}
	}
}

func (l *Listener) closed() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// Accept backoff after a failed accept (as net/http's Server does): the first retry after
// acceptBackoffMin, doubling up to acceptBackoffMax while accept keeps failing.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts TCP connections and starts their MPA handshakes. A failed accept —
// EMFILE/ENFILE when the process or system is out of file descriptors, ENOBUFS, ENOMEM,
// ECONNABORTED, or anything else short of the listener being closed — is counted, logged
// once per run of failures (and its end once), and retried after a growing backoff, so
// the listener recovers when the resource comes back.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	failures := 0
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if l.closed() {
				return
			}
			if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
				// Closed underneath us: nothing more will come.
				l.err = fmt.Errorf("iwarp: accept: %w", err)
				l.log.Error("iwarp: listener stopped", "addr", l.Addr().String(), "err", err)
				close(l.dead)
				return
			}
			l.st.acceptErrors.Add(1)
			if failures == 0 {
				l.log.Warn("iwarp: accept failed; retrying with backoff", "addr", l.Addr().String(), "err", err)
			}
			failures++
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.quit:
				t.Stop()
				return
			}
			continue
		}
		if failures > 0 {
			l.log.Info("iwarp: accept recovered", "addr", l.Addr().String(), "failures", failures)
			failures, delay = 0, 0
		}
		l.st.accepted.Add(1)
		release, ok := l.admit()
		if !ok {
			_ = nc.Close() // refused before any MPA Reply
			continue
		}
		tuneConn(nc, &l.cfg)
		l.wg.Add(1)
		go l.handshake(nc, release)
	}
}

// admit takes a connection slot of the listener and of its device, or counts the refusal.
// The returned release gives both back; it may be called more than once.
func (l *Listener) admit() (release func(), ok bool) {
	if n := l.st.active.Add(1); l.cfg.MaxConns > 0 && n > int64(l.cfg.MaxConns) {
		l.st.active.Add(-1)
		l.st.refusedListener.Add(1)
		return nil, false
	}
	if !devConns.acquire(l.dev, l.cfg.MaxDeviceConns) {
		l.st.active.Add(-1)
		l.st.refusedDevice.Add(1)
		return nil, false
	}
	var done atomic.Bool
	return func() {
		if !done.Swap(true) {
			l.st.active.Add(-1)
			devConns.release(l.dev)
		}
	}, true
}

// devConns counts the accepted connections (pending and established) of each device; a
// device's entry lives only while it has connections.
var devConns = deviceConns{n: map[*rnic.Device]int{}}

type deviceConns struct {
	mu sync.Mutex
	n  map[*rnic.Device]int
}

func (d *deviceConns) acquire(dev *rnic.Device, limit int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if limit > 0 && d.n[dev] >= limit {
		return false
	}
	d.n[dev]++
	return true
}

func (d *deviceConns) release(dev *rnic.Device) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n[dev] <= 1 {
		delete(d.n, dev)
	} else {
		d.n[dev]--
	}
}

func (d *deviceConns) count(dev *rnic.Device) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[dev]
}

// handshake reads the MPA Request (siw's responder waits 5 s, MPAREP_TIMEOUT; we wait
// Config.Timeout) and queues the ConnRequest for Accept.
func (l *Listener) handshake(nc net.Conn, release func()) {
	defer l.wg.Done()
	_ = nc.SetDeadline(time.Now().Add(l.cfg.Timeout))
	stop := context.AfterFunc(l.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	raw, f, err := readFrame(nc, l.cfg.MPA.MaxPrivateData)
	stop()
	_ = nc.SetDeadline(time.Time{})
	if err != nil || f.Reply {
		if !l.closed() {
			l.st.badRequests.Add(1)
		}
		_ = nc.Close()
		release()
		return
	}
	r := &ConnRequest{l: l, nc: nc, req: f, raw: raw, release: release}
	// An unanswered request is dropped after the MPA timeout (the initiator gives up too).
	r.mu.Lock()
	r.timer = time.AfterFunc(l.cfg.Timeout, func() {
		if r.take() {
			l.st.unanswered.Add(1)
			r.drop()
		}
	})
	r.mu.Unlock()
	select {
	case l.reqs <- r:
	default:
		if r.take() {
			l.st.refusedBacklog.Add(1)
			_ = r.reject(nil)
		}
	}
}

// Accept waits for the next connection request. It returns ErrClosed after Close, the
// accept loop's error if it stopped on its own (its listener was closed underneath it),
// or ctx's error.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.quit:
		return nil, ErrClosed
	case <-l.dead:
		return nil, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ConnRequest is an incoming connection request (a received MPA Request frame). It must
// be answered with Accept or Reject within Config.Timeout, else the connection is dropped.
type ConnRequest struct {
	l       *Listener
	nc      net.Conn
	req     mpa.Frame
	raw     []byte
	release func() // gives back the listener's and the device's connection slot
	mu      sync.Mutex
	used    bool
	timer   *time.Timer
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

// drop closes the connection of a request that will not be answered.
func (r *ConnRequest) drop() {
	_ = r.nc.Close()
	r.release()
}

// Accept binds qp (Idle) to the connection and sends the MPA Reply with pd (RFC 5044
// §7.1.2 rule 2, RFC 6581 §9). The QP is in RTS on return; as RFC 5044 requires, it sends
// nothing until the initiator's first FPDU (the RTR in peer-to-peer mode) has arrived,
// and if that does not come within Config.FirstFPDUTimeout the connection ends with
// ErrFirstFPDUTimeout.
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
		r.drop()
		return nil, fmt.Errorf("iwarp: accept %s: %w", r.nc.RemoteAddr(), err)
	}
	conn := newConn(qp, r.nc, c, params, false, r.req.PrivateData)
	if err := conn.attach(); err != nil {
		r.drop()
		return nil, fmt.Errorf("iwarp: accept %s: %w", r.nc.RemoteAddr(), err)
	}
	conn.release, conn.lst = r.release, &r.l.st
	_ = r.nc.SetWriteDeadline(time.Now().Add(c.Timeout))
	_, err = r.nc.Write(rep.Append(nil))
	_ = r.nc.SetWriteDeadline(time.Time{})
	if err != nil {
		r.drop()
		err = fmt.Errorf("iwarp: accept %s: MPA Reply: %w", r.nc.RemoteAddr(), err)
		conn.qp.TransportDone(err)
		return nil, err
	}
	// RTS before the goroutines run, so nothing the initiator sends finds the QP Idle.
	if err := conn.qp.Established(); err != nil {
		r.drop()
		err = fmt.Errorf("iwarp: accept %s: %w", r.nc.RemoteAddr(), err)
		conn.qp.TransportDone(err)
		return nil, err
	}
	r.l.st.established.Add(1)
	if c.FirstFPDUTimeout > 0 {
		conn.firstTimer = time.AfterFunc(c.FirstFPDUTimeout, conn.firstFPDUExpired)
	}
	conn.run()
	return conn, nil
}

// Reject refuses the request with an MPA Reply carrying the R bit and pd, then closes.
func (r *ConnRequest) Reject(pd []byte) error {
	if !r.take() {
		return errUsed
	}
	r.l.st.rejected.Add(1)
	return r.reject(pd)
}

func (r *ConnRequest) reject(pd []byte) error {
	defer r.drop()
	rep := mpa.RejectReply(&r.req, pd)
	if l := r.l.cfg.MPA.MaxPrivateData; rep.PDLength() > l {
		return fmt.Errorf("iwarp: reject: %w", mpa.ErrPrivateDataTooLong)
	}
	_ = r.nc.SetWriteDeadline(time.Now().Add(r.l.cfg.Timeout))
	_, err := r.nc.Write(rep.Append(nil))
	closeWrite(r.nc)
	if err != nil {
		return fmt.Errorf("iwarp: reject: %w", err)
	}
	return nil
}
