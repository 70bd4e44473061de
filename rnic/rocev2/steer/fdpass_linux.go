//go:build linux

package steer

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// MaxFiles is the most descriptors one message carries (the kernel's
// SCM_MAX_FD is 253; a grant needs 2).
const MaxFiles = 8

// ErrTruncated is returned by RecvFiles when the message or its
// descriptors did not fit (the kernel closes descriptors that do not).
var ErrTruncated = errors.New("steer: message or descriptors truncated")

// SendFiles sends msg (at least one byte) over c with the descriptors of
// files attached (SCM_RIGHTS); the receiver gets its own duplicates, so the
// sender may close files afterwards. On a SOCK_STREAM connection the
// descriptors travel with msg's bytes: send them when the peer expects
// exactly len(msg) bytes next (a request/response turn), or use
// SOCK_SEQPACKET.
func SendFiles(c *net.UnixConn, msg []byte, files ...*os.File) error {
	if len(msg) == 0 {
		return errors.New("steer: SendFiles needs at least one byte of message")
	}
	if len(files) == 0 || len(files) > MaxFiles {
		return fmt.Errorf("steer: SendFiles: %d descriptors (1..%d)", len(files), MaxFiles)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	if err != nil {
		return fmt.Errorf("steer: send descriptors: %w", err)
	}
	if n != len(msg) {
		return fmt.Errorf("steer: send descriptors: wrote %d of %d bytes", n, len(msg))
	}
	return nil
}

// RecvFiles receives one message into msg and the descriptors attached to
// it (close-on-exec), at most MaxFiles. It returns the message length.
func RecvFiles(c *net.UnixConn, msg []byte) (int, []*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(MaxFiles*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(msg, oob)
	if err != nil {
		return n, nil, fmt.Errorf("steer: receive descriptors: %w", err)
	}
	var files []*os.File
	cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return n, nil, fmt.Errorf("steer: receive descriptors: %w", err)
	}
	for _, cm := range cmsgs {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		for _, f := range files {
			f.Close()
		}
		return n, nil, ErrTruncated
	}
	return n, files, nil
}
