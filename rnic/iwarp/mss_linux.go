package iwarp

import (
	"net"
	"syscall"
)

// tcpMSS returns the connection's current TCP MSS (the EMSS of RFC 5044 §4.5).
func tcpMSS(nc net.Conn) int {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return 1460
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 1460
	}
	mss := 1460
	_ = rc.Control(func(fd uintptr) {
		if v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG); err == nil && v > 0 {
			mss = v
		}
	})
	return mss
}
