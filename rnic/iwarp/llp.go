package iwarp

// The LLP (RFC 5044 §1: TCP) as the engine uses it: the fast paths of a *net.TCPConn and
// what any other net.Conn does instead (the package documentation, "Other TCP stacks").

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/mpa"
)

// rxReadBuffer is the mpa.Reader buffer: headers, pads and CRCs, and what a vectored
// read picks up after a payload (at least the next FPDU's header and CRC).
const rxReadBuffer = 8 << 10

// defaultMSS is the MSS assumed where the connection cannot tell (Ethernet).
const defaultMSS = 1460

// vecConn is the TCP connection as the receiver's mpa.Reader sees it: Read, plus
// mpa.VectoredReader over readv(2) on the socket, so a payload goes from the kernel
// straight into registered memory while the same system call picks up the next FPDU's
// header and CRC.
type vecConn struct {
	net.Conn
	rc  syscall.RawConn
	rv  readvState
	d   *rxDrive  // set when a CQ waiter may drive the receive: reads go through it
	one [1][]byte // Read's buffer as a vector
}

// rxStream returns what the receiver's mpa.Reader reads: nc wrapped as a vecConn when it
// is a TCP connection, else nc itself (which may implement mpa.VectoredReader).
func rxStream(nc net.Conn) io.Reader {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	v := &vecConn{Conn: nc, rc: rc}
	v.rv.init()
	return v
}

// txTry returns the socket for the receiver's inline responses (see respond) of a TCP
// connection, else nil: a wrapper (package capture's, say) must see every write, and
// another stack has no socket to write to directly.
func txTry(nc net.Conn) syscall.RawConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writevStates pools the non-blocking writev state (its iovecs), taken for one write: a
// connection holds none.
var writevStates = sync.Pool{New: func() any {
	s := &writevState{}
	s.init()
	return s
}}

// ReadVectored implements mpa.VectoredReader.
func (v *vecConn) ReadVectored(bufs [][]byte) (int, error) {
	if v.d != nil {
		return v.d.read(bufs)
	}
	return v.rv.readv(v.rc, bufs)
}

// Read reads through the driver when there is one, and with readv (ReadVectored) when
// the receive spins (readvState's spin).
func (v *vecConn) Read(p []byte) (int, error) {
	if v.d == nil && v.rv.spin <= 0 {
		return v.Conn.Read(p)
	}
	v.one[0] = p
	n, err := v.ReadVectored(v.one[:]) // through the driver, or readv with its spin
	v.one[0] = nil
	return n, err
}

var _ mpa.VectoredReader = (*vecConn)(nil)

// The optional methods of an LLP connection: *net.TCPConn has the first four; another
// net.Conn (a user-space TCP stack's, or a wrapper such as package capture's) gets the
// same treatment by having them. A wrapper that cannot forward one returns an error
// satisfying errors.Is(err, errors.ErrUnsupported).
type (
	halfCloser interface{ CloseWrite() error }
	lingerer   interface{ SetLinger(sec int) error }
	noDelayer  interface{ SetNoDelay(noDelay bool) error }
	keepAliver interface {
		SetKeepAliveConfig(c net.KeepAliveConfig) error
	}
	userTimeouter interface{ SetUserTimeout(d time.Duration) error } // TCP_USER_TIMEOUT
	mssReporter   interface{ MSS() int }                             // TCP_MAXSEG; ≤ 0: unknown
	syscallConner interface {
		SyscallConn() (syscall.RawConn, error)
	}
)

// unsupported reports whether err says a wrapper could not forward an optional method.
func unsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// closeWrite half-closes nc (TCP FIN) and reports whether it could.
func closeWrite(nc net.Conn) bool {
	cw, ok := nc.(halfCloser)
	return ok && !unsupported(cw.CloseWrite())
}

// closeAbortive closes nc; a TCP connection is reset (RST) rather than closed with FIN.
func closeAbortive(nc net.Conn) {
	if l, ok := nc.(lingerer); ok {
		_ = l.SetLinger(0)
	}
	_ = nc.Close()
}

// isLoopback reports whether nc is a TCP connection over a loopback address.
func isLoopback(nc net.Conn) bool {
	ta, ok := nc.RemoteAddr().(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// tuneConn applies the socket options of cfg to a TCP connection: keepalive probes and
// the user timeout, so a peer that vanished (host down, link cut) is detected within a
// bounded time even when the connection is idle or its data is unacknowledged.
func tuneConn(nc net.Conn, cfg *Config) {
	if nd, ok := nc.(noDelayer); ok {
		_ = nd.SetNoDelay(true)
	}
	if ka, ok := nc.(keepAliver); ok {
		kc := net.KeepAliveConfig{Enable: false}
		if cfg.KeepAlive > 0 {
			kc = net.KeepAliveConfig{Enable: true, Idle: cfg.KeepAlive, Interval: cfg.KeepAlive, Count: keepAliveProbes}
		}
		_ = ka.SetKeepAliveConfig(kc)
	}
	if cfg.UserTimeout > 0 {
		setUserTimeout(nc, cfg.UserTimeout)
	}
}

// keepAliveProbes is the number of unanswered keepalive probes after which the kernel
// drops the connection.
const keepAliveProbes = 3

// userTimeoutOf rounds d to the milliseconds TCP_USER_TIMEOUT takes.
func userTimeoutOf(d time.Duration) int { return int(max(d/time.Millisecond, 1)) }
