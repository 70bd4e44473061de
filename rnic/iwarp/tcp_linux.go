package iwarp

import (
	"net"
	"syscall"
	"time"
)

// tcpMSS returns the connection's current TCP MSS (the EMSS of RFC 5044 §4.5).
func tcpMSS(nc net.Conn) int {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return defaultMSS
	}
	rc, err := tc.SyscallConn()
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
// unanswered) for d aborts the connection with ETIMEDOUT.
func setUserTimeout(tc *net.TCPConn, d time.Duration) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, userTimeoutOf(d))
	})
}
