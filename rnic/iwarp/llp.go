package iwarp

// The LLP (RFC 5044 §1: TCP) as the engine uses it: the fast paths of a *net.TCPConn and
// what any other net.Conn does instead (the package documentation, "Other TCP stacks").

import (
	"io"
	"net"
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
	rc syscall.RawConn
	rv readvState
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

// ReadVectored implements mpa.VectoredReader.
func (v *vecConn) ReadVectored(bufs [][]byte) (int, error) { return v.rv.readv(v.rc, bufs) }

var _ mpa.VectoredReader = (*vecConn)(nil)

// closeWrite half-closes nc (TCP FIN) and reports whether it could.
func closeWrite(nc net.Conn) bool {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok {
		return false
	}
	_ = cw.CloseWrite()
	return true
}

// closeAbortive closes nc; a TCP connection is reset (RST) rather than closed with FIN.
func closeAbortive(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
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
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if cfg.KeepAlive > 0 {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: cfg.KeepAlive,
			Interval: cfg.KeepAlive, Count: keepAliveProbes})
	} else {
		_ = tc.SetKeepAlive(false)
	}
	if cfg.UserTimeout > 0 {
		setUserTimeout(tc, cfg.UserTimeout)
	}
}

// keepAliveProbes is the number of unanswered keepalive probes after which the kernel
// drops the connection.
const keepAliveProbes = 3

// userTimeoutOf rounds d to the milliseconds TCP_USER_TIMEOUT takes.
func userTimeoutOf(d time.Duration) int { return int(max(d/time.Millisecond, 1)) }
