//go:build !linux

package iwarp

import (
	"io"
	"syscall"
)

// readvState falls back to a plain read into the first non-empty buffer where readv(2)
// is not wired up.
type readvState struct {
	a         []byte
	n         int
	err       error
	fn        func(fd uintptr) bool
	stop      func() bool // as on Linux
	spinState             // as on Linux
}

func (s *readvState) init() { s.fn = s.do }

func (s *readvState) do(fd uintptr) bool {
	n, err := syscall.Read(int(fd), s.a)
	for err == syscall.EAGAIN {
		if s.stop != nil && s.stop() {
			s.n, s.err = 0, errStopped
			return true
		}
		if !s.spinning() {
			return false
		}
		n, err = syscall.Read(int(fd), s.a)
	}
	if err == nil {
		s.got()
	}
	s.n, s.err = n, err
	return true
}

func (s *readvState) readv(rc syscall.RawConn, bufs [][]byte) (int, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			s.a = b
			break
		}
	}
	if len(s.a) == 0 {
		return 0, nil
	}
	s.spinState.start()
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
