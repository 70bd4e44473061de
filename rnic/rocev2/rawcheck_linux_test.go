//go:build linux

package rocev2

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

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
	tv := syscall.Timeval{Sec: 2}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)

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
	h := roce.Header{Opcode: roce.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x949ef3}
	payload := make([]byte, 64)
	b := h.Append(nil, len(payload))
	b = append(b, payload...)
	b = finish(b, len(payload), tx.LocalAddr(), rx.LocalAddr())
	// one packet: a GSO run would reach a raw socket on loopback unsegmented (its
	// segments' IDs are checked against an exact receiver in rocev2/xdp TestNetnsRC)
	if err := tx.Send([][]byte{b}, rx.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err == syscall.EINTR || err == syscall.EAGAIN {
			// Go's preemption signals interrupt the read (SO_RCVTIMEO
			// disables restarting); the deadline bounds the retries.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := buf[:n]
		ip, udp, _, err := roce.SplitIPPacket(pkt)
		if err != nil || len(udp) < 8 || int(udp[2])<<8|int(udp[3]) != int(rx.LocalAddr().Port()) {
			continue
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
	t.Fatal("packet not captured")
}
