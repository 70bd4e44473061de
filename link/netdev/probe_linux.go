//go:build linux

package netdev

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/internal/sockopt"
)

// xdpUseSG is XDP_USE_SG (include/uapi/linux/if_xdp.h, Linux 6.6).
const xdpUseSG = 1 << 4

// Probe finds a netdev's XDP capabilities by trying them, for kernels
// without the netdev family: it attaches an XDP_PASS program in driver
// mode (then detaches it) and binds AF_XDP sockets to queue 0 in zero-copy
// and in multi-buffer copy mode. It needs root, must run in the netdev's
// network namespace, and refuses a netdev that already carries an XDP
// program. A driver-mode attach can make some NICs reset their rings:
// probe only when asked.
func Probe(name string) (XDPCaps, error) {
	c := XDPCaps{Source: "probe"}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return c, fmt.Errorf("netdev %q: %w", name, err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return c, fmt.Errorf("netdev %q carries XDP program %d: cannot probe", name, x.ProgId)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "softrnic_probe", Type: ebpf.XDP, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()}})
	if err != nil {
		return c, fmt.Errorf("probe program: %w", err)
	}
	defer prog.Close()
	if xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode}); err == nil {
		// native XDP; a driver with ndo_bpf also redirects (every
		// in-tree driver with native XDP implements XDP_REDIRECT)
		c.Features |= XDPBasic | XDPRedirect
		_ = xl.Close()
	}
	if bindXSK(l.Attrs().Index, unix.XDP_ZEROCOPY) == nil {
		c.Features |= XDPXSKZeroCopy
	}
	if bindXSK(l.Attrs().Index, unix.XDP_COPY|xdpUseSG) == nil {
		c.KernelSG = true
	}
	return c, nil
}

// bindXSK binds a throwaway AF_XDP socket with a small UMEM to queue 0.
func bindXSK(ifindex int, flags uint16) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	const frames, size = 64, 4096
	mem, err := unix.Mmap(-1, 0, frames*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint64(len(mem)), Size: size}
	if err := sockopt.Set(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return err
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, frames); err != nil {
			return err
		}
	}
	return unix.Bind(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: 0})
}
