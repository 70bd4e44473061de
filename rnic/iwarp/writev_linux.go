package iwarp

import (
	"syscall"
	"unsafe"
)

// writevState performs one writev(2) that does not wait, through a RawConn and without
// allocating (the callback is a method value made once; arguments and results live here).
type writevState struct {
	rc  syscall.RawConn
	iov [64]syscall.Iovec
	niv int
	n   int
	err error
	fn  func(fd uintptr) bool
	try func(bufs [][]byte) (int, error) // tryWritev, made once
}

func (s *writevState) init() {
	s.fn = s.do
	s.try = s.tryWritev
}

func (s *writevState) do(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(s.niv))
		switch e {
		case 0:
			s.n, s.err = int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			s.n, s.err = 0, nil
		default:
			s.n, s.err = 0, e
		}
		return true // never wait for the socket to become writable
	}
}

// tryWritev writes what the socket takes now of bufs (its first 64 non-empty slices)
// with one system call and returns how much that was; it never blocks.
func (s *writevState) tryWritev(bufs [][]byte) (int, error) {
	s.niv = 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if s.niv == len(s.iov) {
			break
		}
		s.iov[s.niv].Base = &b[0]
		s.iov[s.niv].SetLen(len(b))
		s.niv++
	}
	if s.niv == 0 {
		return 0, nil
	}
	err := s.rc.Write(s.fn)
	for i := range s.niv {
		s.iov[i].Base = nil
	}
	if err != nil {
		return 0, err
	}
	return s.n, s.err
}
