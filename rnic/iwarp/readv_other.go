//go:build !linux

package iwarp

import (
	"io"
	"syscall"
)

// readvState falls back to a plain read into a where readv(2) is not wired up.
type readvState struct {
	a   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (s *readvState) init() { s.fn = s.do }

func (s *readvState) do(fd uintptr) bool {
	n, err := syscall.Read(int(fd), s.a)
	if err == syscall.EAGAIN {
		return false
	}
	s.n, s.err = n, err
	return true
}

func (s *readvState) readv(rc syscall.RawConn, a, _ []byte) (int, error) {
	s.a = a
	err := rc.Read(s.fn)
	s.a = nil
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
