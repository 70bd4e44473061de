package iwarp

import (
	"io"
	"syscall"
	"unsafe"
)

// readvState performs readv(2) through a RawConn without allocating: the callback is a
// method value made once, and its arguments and results live here.
type readvState struct {
	iov [2]syscall.Iovec
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (s *readvState) init() { s.fn = s.do }

func (s *readvState) do(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(len(s.iov)))
		switch e {
		case 0:
			s.n, s.err = int(n), nil
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.n, s.err = 0, e
		return true
	}
}

// readv reads into a, then b, with one system call (len(a) and len(b) > 0).
func (s *readvState) readv(rc syscall.RawConn, a, b []byte) (int, error) {
	s.iov[0].Base, s.iov[1].Base = &a[0], &b[0]
	s.iov[0].SetLen(len(a))
	s.iov[1].SetLen(len(b))
	err := rc.Read(s.fn)
	s.iov[0].Base, s.iov[1].Base = nil, nil
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
