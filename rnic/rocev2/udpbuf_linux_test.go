package rocev2

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUDPLinkBuffers: a UDP link's socket buffers are sockBuf, forced past
// net.core.rmem_max/wmem_max where the process may (CAP_NET_ADMIN), else capped there.
// (Linux reports twice what was set: the doubling covers its bookkeeping.)
func TestUDPLinkBuffers(t *testing.T) {
	sysctl := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/core/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Whether this process may force buffers: try it on a socket of its own.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ferr := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1<<20)
	unix.Close(fd)
	if ferr != nil && !errors.Is(ferr, syscall.EPERM) {
		t.Fatalf("SO_RCVBUFFORCE: %v", ferr)
	}
	forced := ferr == nil
	t.Logf("SO_RCVBUFFORCE allowed: %v", forced)

	l, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		opt    int
		sysctl string
	}{{unix.SO_RCVBUF, "rmem_max"}, {unix.SO_SNDBUF, "wmem_max"}} {
		var got int
		var gerr error
		if err := l.rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, c.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatal(gerr)
		}
		want := 2 * sockBuf
		if !forced {
			want = 2 * min(sockBuf, sysctl(c.sysctl))
		}
		if got != want {
			t.Errorf("%s: %d bytes, want %d (forcing allowed %v, %s %d)", c.sysctl, got, want, forced, c.sysctl, sysctl(c.sysctl))
		}
	}
}

// TestUDPLinkSocketDrops: datagrams the kernel drops because nobody reads the link's
// socket show in SocketDrops.
func TestUDPLinkSocketDrops(t *testing.T) {
	l, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n, err := l.SocketDrops(); err != nil || n != 0 {
		t.Fatalf("a new socket: %d drops, %v", n, err)
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(l.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Loopback delivers within the send: once the buffer (at most 2×sockBuf) is full,
	// each datagram is dropped. Send three times that.
	pkt := make([]byte, 8000)
	sent := 0
	for range 6 * sockBuf / len(pkt) {
		if _, err := c.Write(pkt); err == nil {
			sent++
		}
	}
	n, err := l.SocketDrops()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > uint64(sent) {
		t.Fatalf("%d drops after %d datagrams sent to a socket nobody reads", n, sent)
	}
	t.Logf("%d of %d datagrams dropped", n, sent)
}
