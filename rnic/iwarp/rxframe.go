package iwarp

import (
	"io"
	"net"
	"syscall"

	"github.com/softrnic/softrnic/mpa"
)

// rxReadBuffer is the mpa.Reader buffer: headers, pads and CRCs, and what a vectored
// read picks up after a payload (at least the next FPDU's header and CRC).
const rxReadBuffer = 8 << 10

// vecConn is the TCP connection as the receiver's mpa.Reader sees it: Read, plus
// mpa.VectoredReader over readv(2) on the socket, so a payload goes from the kernel
// straight into registered memory while the same system call picks up the next FPDU's
// header and CRC.
type vecConn struct {
	net.Conn
	rc syscall.RawConn
	rv readvState
}

// rxStream returns nc wrapped as a vecConn when it is a TCP connection.
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
