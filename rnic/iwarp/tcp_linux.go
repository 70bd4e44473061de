package iwarp

import (
	"net"
	"syscall"
	"time"
)

// tcpMSS returns the connection's current TCP MSS (the EMSS of RFC 5044 §4.5): the
// connection's MSS method, else TCP_MAXSEG of its socket, else defaultMSS.
func tcpMSS(nc net.Conn) int {
	if m, ok := nc.(mssReporter); ok {
		if v := m.MSS(); v > 0 {
			return v
		}
	}
	sc, ok := nc.(syscallConner)
	if !ok {
		return defaultMSS
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return defaultMSS
	}
	mss := defaultMSS
	_ = rc.Control(func(fd uintptr) {
		if v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG); err == nil && v > 0 {
			mss = v
		}
	})
	return mss
}

// tcpUserTimeout is TCP_USER_TIMEOUT (linux/tcp.h), absent from package syscall.
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT: data left unacknowledged (or keepalive probes left
// unanswered) for d aborts the connection with ETIMEDOUT. A connection with a
// SetUserTimeout method sets it itself.
func setUserTimeout(nc net.Conn, d time.Duration) {
	if u, ok := nc.(userTimeouter); ok && !unsupported(u.SetUserTimeout(d)) {
		return
	}
	sc, ok := nc.(syscallConner)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, userTimeoutOf(d))
	})
}
