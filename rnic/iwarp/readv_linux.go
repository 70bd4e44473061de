package iwarp

import (
	"io"
	"syscall"
	"unsafe"
)

// readvState performs readv(2), or read(2) for one buffer, through a RawConn without
// allocating: the callback is a method value made once, and its arguments and results
// live here.
type readvState struct {
	iov   []syscall.Iovec // small, or a larger array once a read ahead needed one
	small [4]syscall.Iovec
	niov  int
	n     int
	err   error
	fn    func(fd uintptr) bool
	// stop, when set, is asked before waiting for the socket; true ends the read with
	// errStopped instead (the receive's hand-over between goroutines, rxdrive.go).
	stop      func() bool
	spinState // rnic.Config.ReceiveSpin (spin.go)
}

func (s *readvState) init() { s.fn, s.iov = s.do, s.small[:] }

func (s *readvState) do(fd uintptr) bool {
	for {
		// One buffer (every read of a small message's FPDU, into the Reader's buffer) is
		// read(2): the kernel then copies no iovec array in and walks no iovec iterator
		// (bench/README has what that saves).
		var n uintptr
		var e syscall.Errno
		if s.niov == 1 {
			n, _, e = syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(s.iov[0].Base)), uintptr(s.iov[0].Len))
		} else {
			n, _, e = syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(s.niov))
		}
		switch e {
		case 0:
			s.got()
			s.n, s.err = int(n), nil
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if s.stop != nil && s.stop() {
				s.n, s.err = 0, errStopped
				return true
			}
			if s.spinning() {
				continue
			}
			return false
		}
		s.n, s.err = 0, e
		return true
	}
}

// readv reads into the non-empty buffers of bufs in order with one system call. A
// connection's first read of more than four buffers (mpa.Reader.ReadAhead) makes the
// iovec array it keeps from then on.
func (s *readvState) readv(rc syscall.RawConn, bufs [][]byte) (int, error) {
	if len(bufs) > len(s.iov) {
		s.iov = make([]syscall.Iovec, len(bufs))
	}
	s.niov = 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if s.niov == len(s.iov) {
			break
		}
		s.iov[s.niov].Base = &b[0]
		s.iov[s.niov].SetLen(len(b))
		s.niov++
	}
	if s.niov == 0 {
		return 0, nil
	}
	s.spinState.start()
	err := rc.Read(s.fn)
	for i := range s.niov {
		s.iov[i].Base = nil
	}
	if err != nil {
		return 0, err
	}
	if s.err != nil {
		return 0, s.err
	}
	if s.n == 0 {
		return 0, io.EOF
	}
	return s.n, nil
}
