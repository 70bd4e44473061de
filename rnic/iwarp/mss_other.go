//go:build !linux

package iwarp

import "net"

// tcpMSS returns the typical Ethernet MSS where the socket option is not read.
func tcpMSS(net.Conn) int { return 1460 }
