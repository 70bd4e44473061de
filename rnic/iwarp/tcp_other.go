//go:build !linux

package iwarp

import (
	"net"
	"time"
)

// tcpMSS returns the typical Ethernet MSS where the socket option is not read.
func tcpMSS(net.Conn) int { return defaultMSS }

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not wired up; keepalive still
// bounds the detection of a dead peer on an idle connection.
func setUserTimeout(*net.TCPConn, time.Duration) {}
