//go:build linux

package netstack

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// conn is a TCP connection of the stack as a net.Conn, with the optional methods of a
// kernel connection that rnic/iwarp uses (see its package documentation, "Other TCP
// stacks"): vectored reads and writes (mpa.VectoredReader, mpa.VectoredWriter), half
// close, linger, no-delay, keepalive, user timeout and MSS. It talks to gVisor's
// endpoint directly rather than through gonet, whose Read and Write allocate per call
// and whose errors are strings: here a blocked Read or Write reuses one waiter entry,
// and errors carry the errno a kernel socket returns.
//
// It holds a reference to its port's reservation until gVisor has closed its endpoint
// (after FIN-WAIT, TIME-WAIT or a reset): until then segments for it must keep arriving.
type conn struct {
	st            *Stack
	r             *reservation
	ep            tcpip.Endpoint
	wq            *waiter.Queue
	local, remote *net.TCPAddr
	mss           int
	closed        atomic.Bool
	closing       chan struct{} // closed by Close: wakes blocked calls
	hup           waiter.Entry  // releases the reservation (watch)
	once          sync.Once

	rmu   sync.Mutex // one reader at a time; guards the fields below
	rdl   deadline
	rdst  scatter
	rwait waiter.Entry
	rch   chan struct{}

	wmu   sync.Mutex // one writer at a time; guards the fields below
	wdl   deadline
	wsrc  gather
	wwait waiter.Entry
	wch   chan struct{}
}

var (
	_ net.Conn           = (*conn)(nil)
	_ mpa.VectoredReader = (*conn)(nil)
	_ mpa.VectoredWriter = (*conn)(nil)
)

// newConn wraps a connected endpoint holding a reference to r.
func newConn(st *Stack, r *reservation, ep tcpip.Endpoint, wq *waiter.Queue) *conn {
	c := &conn{st: st, r: r, ep: ep, wq: wq, closing: make(chan struct{})}
	if a, err := ep.GetLocalAddress(); err == nil {
		c.local = tcpAddr(a)
	}
	if a, err := ep.GetRemoteAddress(); err == nil {
		c.remote = tcpAddr(a)
	}
	c.rwait, c.rch = waiter.NewChannelEntry(waiter.ReadableEvents)
	c.wwait, c.wch = waiter.NewChannelEntry(waiter.WritableEvents)
	c.rdl.init()
	c.wdl.init()
	c.mss = segmentPayload(int(st.ep.MTU()), st.local.Is6(), ep)

	c.watch()
	return c
}

// segmentPayload is the largest payload gVisor's TCP puts in a segment on a link of this
// MTU: the MSS (RFC 9293 §3.7.1) less room for the largest options it may send (its
// sender's maxOptionSize: the timestamp option and as many SACK blocks as fit, NOP
// padded), whether or not a segment carries them. 1420 on Ethernet over IPv4 with
// timestamps and SACK, as negotiated with Linux.
func segmentPayload(mtu int, v6 bool, ep tcpip.Endpoint) int {
	mss := mtu - header.TCPMinimumSize - header.IPv4MinimumSize
	if v6 {
		mss = mtu - header.TCPMinimumSize - header.IPv6MinimumSize
	}
	te, ok := ep.(*tcp.Endpoint)
	if !ok {
		return mss
	}
	opts := 0
	if te.SendTSOk {
		opts = 2 + header.TCPOptionTSLength // NOP, NOP, timestamps
	}
	if te.SACKPermitted {
		blocks := min(header.TCPMaxSACKBlocks, (header.TCPOptionsMaximumSize-opts-4)/8)
		opts += 4 + 8*blocks // NOP, NOP, kind, length, blocks
	}
	return mss - (opts+3)&^3
}

func tcpAddr(a tcpip.FullAddress) *net.TCPAddr {
	ip, _ := netip.AddrFromSlice(a.Addr.AsSlice())
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, a.Port))
}

// watch releases the reservation reference once the endpoint is closed: on the EventHUp
// gVisor signals when an endpoint reaches CLOSE or ERROR.
func (c *conn) watch() {
	check := func(waiter.EventMask) {
		switch tcp.EndpointState(c.ep.State()) {
		case tcp.StateClose, tcp.StateError:
			c.once.Do(func() {
				go func() { // not under gVisor's notification lock
					c.wq.EventUnregister(&c.hup)
					c.st.drop(c.r)
				}()
			})
		}
	}
	c.hup = waiter.NewFunctionEntry(waiter.EventHUp|waiter.EventErr, check)
	c.wq.EventRegister(&c.hup)
	check(0)
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

// Read implements net.Conn.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rdst.one[0] = b
	c.rdst.reset(c.rdst.one[:])
	n, err := c.read()
	c.rdst.one[0] = nil
	return n, err
}

// ReadVectored implements mpa.VectoredReader: what is queued is copied into bufs in
// order with one call into the stack, so a payload lands in its destination and the
// next FPDU's header is picked up at once.
func (c *conn) ReadVectored(bufs [][]byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rdst.reset(bufs)
	if c.rdst.room == 0 {
		return 0, nil
	}
	return c.read()
}

// read copies what the endpoint has into c.rdst, waiting for data (rmu held).
func (c *conn) read() (int, error) {
	registered := false
	defer func() {
		if registered {
			c.wq.EventUnregister(&c.rwait)
		}
	}()
	for {
		if c.closed.Load() {
			return 0, c.opError("read", net.ErrClosed)
		}
		res, e := c.ep.Read(&c.rdst, tcpip.ReadOptions{})
		switch e.(type) {
		case nil:
			c.ep.ModerateRecvBuf(res.Count)
			c.rdst.reset(nil)
			return res.Count, nil
		case *tcpip.ErrWouldBlock:
		case *tcpip.ErrClosedForReceive:
			return 0, io.EOF
		default:
			if c.closed.Load() {
				return 0, c.opError("read", net.ErrClosed)
			}
			return 0, c.opError("read", tcpipErr(e))
		}
		if !registered { // register, then try again: data may have come meanwhile
			c.wq.EventRegister(&c.rwait)
			registered = true
			continue
		}
		select {
		case <-c.rch:
		case <-c.closing:
		case <-c.rdl.wait():
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
	}
}

// Write implements net.Conn: all of b is queued, or an error returned.
func (c *conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wsrc.one[0] = b
	c.wsrc.reset(c.wsrc.one[:])
	n, err := c.write()
	c.wsrc.one[0] = nil
	return int(n), err
}

// WriteVectored implements mpa.VectoredWriter: bufs are queued as one write, which the
// stack cuts into full segments (a Write per piece would queue header, payload and CRC
// separately, and the stack, which does not split queued writes to merge them, could
// send each as a segment of its own).
func (c *conn) WriteVectored(bufs [][]byte) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wsrc.reset(bufs)
	return c.write()
}

// write queues all of c.wsrc, waiting for send-buffer space (wmu held).
func (c *conn) write() (int64, error) {
	var done int64
	registered := false
	defer func() {
		c.wsrc.reset(nil)
		if registered {
			c.wq.EventUnregister(&c.wwait)
		}
	}()
	for c.wsrc.Len() > 0 {
		if c.closed.Load() {
			return done, c.opError("write", net.ErrClosed)
		}
		select {
		case <-c.wdl.wait():
			return done, c.opError("write", os.ErrDeadlineExceeded)
		default:
		}
		n, e := c.ep.Write(&c.wsrc, tcpip.WriteOptions{})
		done += n
		switch e.(type) {
		case nil:
			continue
		case *tcpip.ErrWouldBlock:
		default:
			return done, c.opError("write", tcpipErr(e))
		}
		if !registered {
			c.wq.EventRegister(&c.wwait)
			registered = true
			continue
		}
		select {
		case <-c.wch:
		case <-c.closing:
		case <-c.wdl.wait():
			return done, c.opError("write", os.ErrDeadlineExceeded)
		}
	}
	return done, nil
}

// Close implements net.Conn: a graceful close (FIN), or a reset after SetLinger(0).
// Blocked reads and writes return net.ErrClosed.
func (c *conn) Close() error {
	if c.closed.Swap(true) {
		return c.opError("close", net.ErrClosed)
	}
	close(c.closing)
	c.ep.Close()
	return nil
}

// CloseWrite shuts the sending direction down (FIN), as net.TCPConn's.
func (c *conn) CloseWrite() error {
	if e := c.ep.Shutdown(tcpip.ShutdownWrite); e != nil {
		return c.opError("close", tcpipErr(e))
	}
	return nil
}

// CloseRead shuts the receiving direction down, as net.TCPConn's.
func (c *conn) CloseRead() error {
	if e := c.ep.Shutdown(tcpip.ShutdownRead); e != nil {
		return c.opError("close", tcpipErr(e))
	}
	return nil
}

// SetLinger sets SO_LINGER, as net.TCPConn's: 0 makes Close reset the connection.
func (c *conn) SetLinger(sec int) error {
	c.ep.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: sec >= 0, Timeout: time.Duration(max(sec, 0)) * time.Second})
	return nil
}

// SetNoDelay turns Nagle's algorithm off (true, the stack's default) or on.
func (c *conn) SetNoDelay(noDelay bool) error {
	c.ep.SocketOptions().SetDelayOption(!noDelay)
	return nil
}

// SetKeepAlive turns keepalive probes on or off, as net.TCPConn's.
func (c *conn) SetKeepAlive(on bool) error {
	c.ep.SocketOptions().SetKeepAlive(on)
	return nil
}

// SetKeepAliveConfig configures keepalive probes, as net.TCPConn's (zero fields keep
// the stack's values: 2 h idle, 75 s interval, 9 probes).
func (c *conn) SetKeepAliveConfig(k net.KeepAliveConfig) error {
	if k.Idle > 0 {
		o := tcpip.KeepaliveIdleOption(k.Idle)
		if e := c.ep.SetSockOpt(&o); e != nil {
			return c.opError("set", tcpipErr(e))
		}
	}
	if k.Interval > 0 {
		o := tcpip.KeepaliveIntervalOption(k.Interval)
		if e := c.ep.SetSockOpt(&o); e != nil {
			return c.opError("set", tcpipErr(e))
		}
	}
	if k.Count > 0 {
		if e := c.ep.SetSockOptInt(tcpip.KeepaliveCountOption, k.Count); e != nil {
			return c.opError("set", tcpipErr(e))
		}
	}
	c.ep.SocketOptions().SetKeepAlive(k.Enable)
	return nil
}

// SetUserTimeout sets TCP_USER_TIMEOUT (RFC 5482): data unacknowledged this long ends
// the connection with ETIMEDOUT.
func (c *conn) SetUserTimeout(d time.Duration) error {
	o := tcpip.TCPUserTimeoutOption(d)
	if e := c.ep.SetSockOpt(&o); e != nil {
		return c.opError("set", tcpipErr(e))
	}
	return nil
}

// MSS is the largest segment payload the connection sends (the EMSS of RFC 5044 §4.5).
func (c *conn) MSS() int { return c.mss }

// LocalAddr implements net.Conn.
func (c *conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn.
func (c *conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline implements net.Conn.
func (c *conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *conn) SetReadDeadline(t time.Time) error { c.rdl.set(t); return nil }

// SetWriteDeadline implements net.Conn.
func (c *conn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }

// scatter is the io.Writer the endpoint reads into: it fills bufs in order without
// changing them.
type scatter struct {
	bufs [][]byte
	one  [1][]byte // Read's single buffer
	i    int       // current buffer
	off  int       // offset in it
	room int       // bytes left
}

func (s *scatter) reset(bufs [][]byte) {
	s.bufs, s.i, s.off, s.room = bufs, 0, 0, 0
	for _, b := range bufs {
		s.room += len(b)
	}
}

// Write copies what fits; a short count ends the endpoint's Read.
func (s *scatter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && s.i < len(s.bufs) {
		k := copy(s.bufs[s.i][s.off:], p)
		n += k
		p = p[k:]
		s.off += k
		if s.off == len(s.bufs[s.i]) {
			s.i, s.off = s.i+1, 0
		}
	}
	s.room -= n
	if len(p) > 0 {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// gather is the tcpip.Payloader the endpoint writes from: bufs in order.
type gather struct {
	bufs [][]byte
	one  [1][]byte // Write's single buffer
	i    int
	off  int
	left int
}

func (g *gather) reset(bufs [][]byte) {
	g.bufs, g.i, g.off, g.left = bufs, 0, 0, 0
	for _, b := range bufs {
		g.left += len(b)
	}
}

// Len implements tcpip.Payloader.
func (g *gather) Len() int { return g.left }

// Read implements tcpip.Payloader.
func (g *gather) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for len(p) > 0 && g.i < len(g.bufs) {
		k := copy(p, g.bufs[g.i][g.off:])
		n += k
		p = p[k:]
		g.off += k
		if g.off == len(g.bufs[g.i]) {
			g.i, g.off = g.i+1, 0
		}
	}
	g.left -= n
	return n, nil
}

// deadline is one direction's deadline: wait's channel is closed once it passes.
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	done    chan struct{}
	expired bool
}

func (d *deadline) init() { d.done = make(chan struct{}) }

// set arms the deadline at t; the zero time disarms it.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.expired {
		d.done, d.expired = make(chan struct{}), false
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.done)
		d.expired = true
		return
	}
	ch := d.done
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.done == ch && !d.expired {
			close(ch)
			d.expired = true
		}
	})
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}
