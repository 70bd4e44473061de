//go:build !linux

package iwarp

import (
	"net"
	"time"
)

// tcpMSS returns the connection's MSS method's answer, else the typical Ethernet MSS
// (the socket option is not read here).
func tcpMSS(nc net.Conn) int {
	if m, ok := nc.(mssReporter); ok {
		if v := m.MSS(); v > 0 {
			return v
		}
	}
	return defaultMSS
}

// setUserTimeout sets the user timeout of a connection that has a SetUserTimeout method;
// TCP_USER_TIMEOUT is not wired up here, and keepalive still bounds the detection of a
// dead peer on an idle connection.
func setUserTimeout(nc net.Conn, d time.Duration) {
	if u, ok := nc.(userTimeouter); ok {
		_ = u.SetUserTimeout(d)
	}
}
