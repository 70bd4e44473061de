//go:build linux

package afxdp

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/sockopt"
)

// copyHeadroom is XDP_PACKET_HEADROOM, kept in front of received frames in
// copy mode.
const copyHeadroom = 256

// xsk is one AF_XDP socket with its own UMEM and rings. Its RX ring is read
// by one goroutine; the fill ring is written under fmu (that goroutine and
// Release); the TX and completion rings and txFree under the port's send
// lock.
type xsk struct {
	fd     int
	queue  int
	file   *os.File
	rc     syscall.RawConn
	umem   []byte
	fill   ring
	comp   ring
	rx     ring
	tx     ring
	fmu    sync.Mutex
	txFree []uint64 // free TX frames
	zc     bool
	sg     bool // bound with XDP_USE_SG: a packet may span several RX descriptors
	txMeta bool // the UMEM has txMetaLen bytes of TX metadata before each frame sent
	// chain assembles a packet spanning several RX descriptors (sg): chainLen
	// bytes so far, chainBad once it overflowed (the rest is dropped)
	chain    []byte
	chainLen int
	chainBad bool
	// kept counts frames receivers hold (at most the port's keepLimit)
	kept atomic.Int64
	// rxCount counts frames read from the RX ring
	rxCount atomic.Uint64
}

// txMetaLen is the TX metadata area in front of a frame sent: struct
// xsk_tx_metadata (include/uapi/linux/if_xdp.h: flags, then the checksum
// request; 24 bytes with 6.14's launch time), a multiple of 8 as the kernel
// requires.
const txMetaLen = 24

// maxChain bounds a multi-buffer packet: the kernel's 64 KiB IP packet (a
// GSO or GRO super-packet from a local sender) behind an Ethernet header.
const maxChain = 14 + 65535

// openXSK creates a socket, registers its UMEM (2·half frames), maps the
// four rings (half entries each), fills the fill ring with the first half
// of the frames and binds to ifindex/queue, with XDP_USE_SG when sg is set
// and the kernel takes it (Linux 6.6).
//
// With txMeta the UMEM is registered with room for TX metadata in front of
// each frame sent (XDP_UMEM_TX_METADATA_LEN, Linux 6.11; an older kernel
// refuses the flag and the UMEM is registered without: s.txMeta tells).
func openXSK(ifindex, queue, half int, zc, sg, txMeta bool) (s *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	s = &xsk{fd: fd, queue: queue}
	s.umem, err = unix.Mmap(-1, 0, 2*half*FrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return s, err
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: FrameSize}
	if txMeta {
		meta := reg
		meta.Flags, meta.Tx_metadata_len = unix.XDP_UMEM_TX_METADATA_LEN, txMetaLen
		s.txMeta = sockopt.Set(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&meta), unsafe.Sizeof(meta)) == nil
	}
	if !s.txMeta {
		if err := sockopt.Set(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			return s, fmt.Errorf("XDP_UMEM_REG: %w", err)
		}
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, half); err != nil {
			return s, fmt.Errorf("ring size option %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if _, err := sockopt.Get(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return s, fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	if s.fill, err = mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, half, 8); err != nil {
		return s, err
	}
	if s.comp, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, half, 8); err != nil {
		return s, err
	}
	dsz := unsafe.Sizeof(unix.XDPDesc{})
	if s.rx, err = mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, half, dsz); err != nil {
		return s, err
	}
	if s.tx, err = mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, half, dsz); err != nil {
		return s, err
	}
	for i := range half {
		*s.fill.addr(s.fill.local) = uint64(i * FrameSize)
		s.fill.local++
	}
	s.fill.publish()
	s.txFree = make([]uint64, 0, half)
	for i := half; i < 2*half; i++ {
		s.txFree = append(s.txFree, uint64(i*FrameSize))
	}
	// Bind, trying the wanted modes in order: zero-copy before copy, multi-buffer
	// before single-buffer (a kernel before 6.6, or a zero-copy driver without
	// multi-buffer support, refuses XDP_USE_SG).
	var tries []uint16
	for _, mode := range []uint16{unix.XDP_ZEROCOPY, unix.XDP_COPY} {
		if mode == unix.XDP_ZEROCOPY && !zc {
			continue
		}
		if sg {
			tries = append(tries, mode|unix.XDP_USE_SG)
		}
		tries = append(tries, mode)
	}
	for i, f := range tries {
		err = unix.Bind(fd, &unix.SockaddrXDP{Ifindex: uint32(ifindex), QueueID: uint32(queue), Flags: f})
		if err == nil {
			s.zc, s.sg = f&unix.XDP_ZEROCOPY != 0, f&unix.XDP_USE_SG != 0
			break
		}
		if i == len(tries)-1 {
			return s, fmt.Errorf("bind: %w", err)
		}
	}
	if s.sg {
		s.chain = make([]byte, maxChain)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return s, err
	}
	// The runtime poller waits for the socket (xsk_poll reports EPOLLIN
	// when the RX ring has entries), so a blocked receive goroutine holds
	// no thread and Close unblocks it.
	s.file = os.NewFile(uintptr(fd), "xsk")
	if s.rc, err = s.file.SyscallConn(); err != nil {
		return s, err
	}
	return s, nil
}

// close releases the socket, rings and UMEM (callers exclude every user).
func (s *xsk) close() {
	if s.file != nil {
		_ = s.file.Close()
	} else if s.fd >= 0 {
		_ = unix.Close(s.fd)
	}
	s.fd = -1
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		r.unmap()
	}
	if s.umem != nil {
		_ = unix.Munmap(s.umem)
		s.umem = nil
	}
}

// kick asks the kernel to transmit the TX ring (copy mode transmits in the
// system call, a bounded number of frames per call). It reports false on
// an error other than a transient one (e.g. the netdev is down).
func (s *xsk) kick() bool {
	for range 64 {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if atomic.LoadUint32(s.tx.cons) == s.tx.local {
			return true
		}
		switch e {
		case 0:
		case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			runtime.Gosched()
		default:
			return false
		}
	}
	return true
}

// reclaim moves completed TX frames back to the free list.
func (s *xsk) reclaim() {
	n := s.comp.ready()
	for range n {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.local)&^(FrameSize-1))
		s.comp.local++
	}
	if n > 0 {
		s.comp.release()
	}
}

// makeRoom publishes what is queued, kicks and reclaims until a TX frame
// and a TX ring slot are free.
func (s *xsk) makeRoom() bool { return s.room(1) }

// room publishes what is queued, kicks and reclaims until k TX frames and k
// TX ring slots are free (a bounded number of rounds).
func (s *xsk) room(k int) bool {
	if len(s.txFree) >= k && int(s.tx.free()) >= k {
		return true
	}
	for range 1000 {
		s.tx.publish()
		ok := s.kick()
		s.reclaim()
		if len(s.txFree) >= k && int(s.tx.free()) >= k {
			return true
		}
		if !ok {
			return false
		}
		runtime.Gosched()
	}
	return false
}

// stats reads the kernel's XDP_STATISTICS.
func (s *xsk) stats() (ks unix.XDPStatistics) {
	if s.rc == nil {
		return
	}
	_ = s.rc.Control(func(fd uintptr) {
		_, _ = sockopt.Get(int(fd), unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks))
	})
	return ks
}
