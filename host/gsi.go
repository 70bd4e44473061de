package host

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// gsiLink carries the device's QP1 MADs between this process and the daemon over the
// GSI socketpair (internal/attach): each datagram is an address (the sender's from the
// daemon, the destination's to it) and a RoCEv2 UDP payload.
type gsiLink struct {
	f      *os.File
	rc     syscall.RawConn
	addr   netip.AddrPort
	closed atomic.Bool
}

func newGSILink(f *os.File, addr netip.AddrPort) (*gsiLink, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("GSI socket: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("GSI socket: %w", err)
	}
	g := &gsiLink{f: os.NewFile(uintptr(fd), "gsi"), addr: addr}
	if g.rc, err = g.f.SyscallConn(); err != nil {
		g.f.Close()
		return nil, err
	}
	return g, nil
}

func (g *gsiLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	var hdr [attach.AddrLen]byte
	attach.PutAddr(hdr[:], dst)
	for _, b := range bufs {
		var serr error
		err := g.rc.Write(func(fd uintptr) bool {
			_, serr = unix.SendmsgBuffers(int(fd), [][]byte{hdr[:], b}, nil, nil, 0)
			return serr != unix.EAGAIN
		})
		if err != nil {
			return g.mapErr(err)
		}
		if serr != nil {
			return fmt.Errorf("host: GSI send: %w", serr)
		}
	}
	return nil
}

func (g *gsiLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	var hdr [attach.AddrLen]byte
	for {
		var n int
		var rerr error
		err := g.rc.Read(func(fd uintptr) bool {
			n, _, _, _, rerr = unix.RecvmsgBuffers(int(fd), [][]byte{hdr[:], bufs[0][:cap(bufs[0])]}, nil, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return 0, g.mapErr(err)
		}
		if rerr != nil {
			return 0, fmt.Errorf("host: GSI receive: %w", rerr)
		}
		if n == 0 {
			return 0, ErrDaemonGone
		}
		if n <= attach.AddrLen {
			continue
		}
		sizes[0], from[0] = n-attach.AddrLen, attach.GetAddr(hdr[:])
		return 1, nil
	}
}

func (g *gsiLink) mapErr(err error) error {
	if g.closed.Load() {
		return rocev2.ErrLinkClosed
	}
	return err
}

func (g *gsiLink) LocalAddr() netip.AddrPort { return g.addr }
func (g *gsiLink) BatchSize() int            { return 1 }
func (g *gsiLink) Close() error {
	if g.closed.Swap(true) {
		return nil
	}
	return g.f.Close()
}
