//go:build !linux

package iwarp

import "syscall"

// writevState falls back to one write(2) of the first non-empty buffer where writev(2) is
// not wired up; it never blocks.
type writevState struct {
	rc  syscall.RawConn
	a   []byte
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
	n, err := syscall.Write(int(fd), s.a)
	switch {
	case err == syscall.EAGAIN:
		s.n, s.err = 0, nil
	case err != nil:
		s.n, s.err = 0, err
	default:
		s.n, s.err = n, nil
	}
	return true
}

func (s *writevState) tryWritev(bufs [][]byte) (int, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			s.a = b
			break
		}
	}
	if len(s.a) == 0 {
		return 0, nil
	}
	err := s.rc.Write(s.fn)
	s.a = nil
	if err != nil {
		return 0, err
	}
	return s.n, s.err
}
