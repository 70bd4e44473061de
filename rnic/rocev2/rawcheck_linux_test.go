//go:build linux

package rocev2

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/roce"
)

// TestWireICRCMatchesKernelIPHeader captures what a UDPLink really puts on
// the wire (a raw IPv4 socket sees the kernel-built IP header) and checks
// the ICRC over the real headers, as rxe does: DF set, IP ID 0.
func TestWireICRCMatchesKernelIPHeader(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
	if err != nil {
		t.Skip("SKIP: no raw socket (needs CAP_NET_RAW):", err)
	}
	defer syscall.Close(fd)

	tx, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	// A raw UDP socket gets a copy of every UDP datagram on the host: with other
	// packages' tests flooding loopback its queue overflows. A classic BPF filter
	// keeps only datagrams to rx's port (IPv4 header length from byte 0, then
	// the UDP destination port).
	port := uint32(rx.LocalAddr().Port())
	insns, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadMemShift{Off: 0},          // X = the IPv4 header's length
		bpf.LoadIndirect{Off: 2, Size: 2}, // X + 2: the UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: port, SkipFalse: 1},
		bpf.RetConstant{Val: 0xFFFF},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	filter := make([]unix.SockFilter, len(insns))
	for i, in := range insns {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		t.Fatal(err)
	}
	tv := syscall.Timeval{Usec: 200000}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)

	h := roce.Header{Opcode: roce.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x949ef3}
	payload := make([]byte, 64)
	b := h.Append(nil, len(payload))
	b = append(b, payload...)
	b = finish(b, len(payload), tx.LocalAddr(), rx.LocalAddr())
	buf := make([]byte, 65536)
	// UDP on a loaded loopback may drop the datagram (the backlog is bounded):
	// it is sent again each time 200 ms pass without it, until the deadline.
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; time.Now().Before(deadline); {
		// one packet: a GSO run would reach a raw socket on loopback unsegmented (its
		// segments' IDs are checked against an exact receiver in rocev2/xdp TestNetnsRC)
		if err := tx.Send([][]byte{b}, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		sent++
		for {
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if err == syscall.EINTR {
				// Go's preemption signals interrupt the read (SO_RCVTIMEO
				// disables restarting)
				continue
			}
			if err == syscall.EAGAIN {
				t.Logf("nothing captured 200 ms after send %d", sent)
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			pkt := buf[:n]
			ip, udp, _, err := roce.SplitIPPacket(pkt)
			if err != nil || len(udp) < 8 || int(udp[2])<<8|int(udp[3]) != int(rx.LocalAddr().Port()) {
				continue // queued before the filter was attached
			}
			if ip[6]&0x40 == 0 {
				t.Fatalf("DF not set: % x", ip[:20])
			}
			if ip[4] != 0 || ip[5] != 0 {
				t.Fatalf("IP ID %02x%02x, want 0 (the ICRC assumes it)", ip[4], ip[5])
			}
			if err := roce.VerifyICRC(pkt); err != nil {
				t.Fatalf("ICRC over the kernel's headers: %v", err)
			}
			return
		}
	}
	t.Fatal("packet not captured")
}
