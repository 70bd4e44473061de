package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// MPA framing (RFC 5044 §7.1 Request/Reply frames, §4 FPDUs).
var (
	mpaReqKey = []byte("MPA ID Req Frame")
	mpaRepKey = []byte("MPA ID Rep Frame")
)

const (
	mpaFrameHeader = 20   // key, flags, revision, private data length
	mpaMarkerFlag  = 0x80 // M
	// maxSegment keeps a synthetic IPv4 packet under 64 KiB.
	maxSegment = 65535 - ipv6Len - tcpLen
	// maxPending bounds the bytes a direction holds while an FPDU is
	// incomplete; beyond it the stream is recorded as it comes.
	maxPending = 1 << 18
)

// WrapConn returns a net.Conn that records the iWARP byte stream of c in
// both directions as synthetic TCP segments (interface
// "iwarp-reconstructed"): the MPA Request and Reply frames and then one
// FPDU per segment, so Wireshark's MPA dissector finds each FPDU at a
// segment start. With markers negotiated, or bytes that are not MPA, the
// stream is recorded in the chunks it is read and written. Wrap c before
// the MPA exchange.
//
// The wrapper forwards the optional methods rnic/iwarp uses (see its
// package documentation, "Other TCP stacks") — CloseWrite, SetLinger,
// SetNoDelay, SetKeepAlive, SetKeepAliveConfig, SetUserTimeout, MSS,
// SyscallConn — returning an error satisfying errors.ErrUnsupported where
// c lacks one, and vectored I/O: WriteVectored records the pieces and
// writes them with c's own (or net.Buffers' writev on a *net.TCPConn);
// ReadVectored uses c's, else reads into the first buffer. A
// connection read through the wrapper misses only the kernel's readv
// placement (the bytes must pass the recorder).
func WrapConn(c net.Conn, w *Writer) net.Conn {
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	cc := &conn{Conn: c, w: w}
	cc.dir[0] = stream{src: local, dst: remote, seq: 1}
	cc.dir[1] = stream{src: remote, dst: local, seq: 1}
	return cc
}

type conn struct {
	net.Conn
	w   *Writer
	mu  sync.Mutex
	dir [2]stream // 0: written (local → remote), 1: read
}

type streamMode uint8

const (
	modeMPAFrame streamMode = iota
	modeFPDU
	modeRaw
)

type stream struct {
	src, dst netip.AddrPort
	seq      uint32
	mode     streamMode
	buf      []byte
}

// Write records p before handing it to the connection: recorded after, the peer's answer
// (read by another goroutine) could land in the capture ahead of what provoked it, and
// Wireshark would miss the MPA exchange that lets it decode the stream. net.Conn writes
// all of p or fail.
func (c *conn) Write(p []byte) (int, error) {
	if len(p) > 0 {
		c.feed(0, p)
	}
	return c.Conn.Write(p)
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.feed(1, p[:n])
	}
	return n, err
}

// Close records what is left of a partial FPDU and closes c.
func (c *conn) Close() error {
	c.mu.Lock()
	for d := range c.dir {
		c.emit(d, len(c.dir[d].buf))
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *conn) feed(d int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.dir[d]
	s.buf = append(s.buf, p...)
	for {
		n := c.next(s)
		if n == 0 {
			break
		}
		c.emit(d, n)
	}
	if len(s.buf) > maxPending {
		s.mode = modeRaw
		c.emit(d, len(s.buf))
	}
}

// next returns the length of the complete unit at the start of s.buf, or 0.
func (c *conn) next(s *stream) int {
	b := s.buf
	switch s.mode {
	case modeMPAFrame:
		if len(b) < mpaFrameHeader {
			return 0
		}
		if !bytes.Equal(b[:16], mpaReqKey) && !bytes.Equal(b[:16], mpaRepKey) {
			s.mode = modeRaw
			return len(b)
		}
		n := mpaFrameHeader + int(binary.BigEndian.Uint16(b[18:]))
		if len(b) < n {
			return 0
		}
		if b[16]&mpaMarkerFlag != 0 {
			// markers interleave every 512 bytes of the TCP stream: record
			// both directions as they come
			c.dir[0].mode, c.dir[1].mode = modeRaw, modeRaw
		} else {
			s.mode = modeFPDU
		}
		return n
	case modeFPDU:
		if len(b) < 2 {
			return 0
		}
		n := 2 + int(binary.BigEndian.Uint16(b))
		n += (4-n%4)%4 + 4 // pad, CRC
		if len(b) < n {
			return 0
		}
		return n
	default:
		return len(b)
	}
}

// emit records the first n bytes of direction d as segments and drops
// them from its buffer.
func (c *conn) emit(d, n int) {
	s, o := &c.dir[d], &c.dir[1-d]
	for off := 0; off < n; {
		k := min(n-off, maxSegment)
		c.w.tcp(IfaceIWARP, s.src, s.dst, s.seq, o.seq, tcpPSH|tcpACK, s.buf[off:off+k])
		s.seq += uint32(k)
		off += k
	}
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
}

// WrapListener returns a net.Listener whose accepted connections are
// wrapped with WrapConn.
func WrapListener(l net.Listener, w *Writer) net.Listener { return &listener{Listener: l, w: w} }

type listener struct {
	net.Listener
	w *Writer
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return WrapConn(c, l.w), nil
}

// The optional methods of the wrapped connection.

// WriteVectored records bufs, then writes them with one call.
func (c *conn) WriteVectored(bufs [][]byte) (int64, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			c.feed(0, b)
		}
	}
	if vw, ok := c.Conn.(interface {
		WriteVectored([][]byte) (int64, error)
	}); ok {
		return vw.WriteVectored(bufs)
	}
	nb := net.Buffers(bufs)
	return nb.WriteTo(c.Conn)
}

// ReadVectored reads into bufs with the connection's own vectored read, else
// into the first non-empty buffer, and records what it read.
func (c *conn) ReadVectored(bufs [][]byte) (int, error) {
	vr, ok := c.Conn.(interface {
		ReadVectored([][]byte) (int, error)
	})
	if !ok {
		for _, b := range bufs {
			if len(b) > 0 {
				return c.Read(b)
			}
		}
		return 0, nil
	}
	n, err := vr.ReadVectored(bufs)
	for k := n; k > 0 && len(bufs) > 0; bufs = bufs[1:] {
		p := bufs[0][:min(k, len(bufs[0]))]
		if len(p) > 0 {
			c.feed(1, p)
		}
		k -= len(p)
	}
	return n, err
}

func (c *conn) CloseWrite() error {
	if x, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return x.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *conn) SetLinger(sec int) error {
	if x, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return x.SetLinger(sec)
	}
	return errors.ErrUnsupported
}

func (c *conn) SetNoDelay(noDelay bool) error {
	if x, ok := c.Conn.(interface{ SetNoDelay(bool) error }); ok {
		return x.SetNoDelay(noDelay)
	}
	return errors.ErrUnsupported
}

func (c *conn) SetKeepAlive(on bool) error {
	if x, ok := c.Conn.(interface{ SetKeepAlive(bool) error }); ok {
		return x.SetKeepAlive(on)
	}
	return errors.ErrUnsupported
}

func (c *conn) SetKeepAliveConfig(k net.KeepAliveConfig) error {
	if x, ok := c.Conn.(interface {
		SetKeepAliveConfig(net.KeepAliveConfig) error
	}); ok {
		return x.SetKeepAliveConfig(k)
	}
	return errors.ErrUnsupported
}

func (c *conn) SetUserTimeout(d time.Duration) error {
	if x, ok := c.Conn.(interface{ SetUserTimeout(time.Duration) error }); ok {
		return x.SetUserTimeout(d)
	}
	return errors.ErrUnsupported
}

// MSS is the wrapped connection's, or 0 (unknown).
func (c *conn) MSS() int {
	if x, ok := c.Conn.(interface{ MSS() int }); ok {
		return x.MSS()
	}
	return 0
}

// SyscallConn gives the socket options of a kernel connection (rnic/iwarp reads
// TCP_MAXSEG and sets TCP_USER_TIMEOUT through it); reads through it would
// bypass the recorder.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if x, ok := c.Conn.(syscall.Conn); ok {
		return x.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
