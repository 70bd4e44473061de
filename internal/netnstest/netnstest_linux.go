//go:build linux

// Package netnstest builds two network namespaces joined by a veth pair
// for privileged tests of the AF_XDP datapaths. The namespaces are unnamed:
// they live while a handle, socket or device refers to them, so nothing
// outlives a test even if it dies.
package netnstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequirePriv skips (loudly) unless the test can create namespaces, veths,
// AF_XDP sockets and BPF programs.
func RequirePriv(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (privileged): AF_XDP netns tests need root (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF); running as uid", os.Geteuid())
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW, 0)
	if err != nil {
		t.Skip("SKIP (privileged): cannot create an AF_XDP socket (CONFIG_XDP_SOCKETS?):", err)
	}
	unix.Close(fd)
}

// Env is two network namespaces joined by a veth pair, Dev[i] in NS[i],
// with Addr[i] (10.199.9.i+1/24) and Addr6[i] (fd00:199:9::i+1/64).
type Env struct {
	NS    [2]netns.NsHandle
	Dev   [2]string
	Addr  [2]netip.Addr
	Addr6 [2]netip.Addr
}

var seq atomic.Int32

// New creates the namespaces, the veth pair (mtu, queues receive and
// transmit queues per side) and the addresses, and waits until both veths
// are operationally up.
func New(t testing.TB, mtu, queues int) *Env {
	t.Helper()
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, seq.Add(1))
	e := &Env{
		Dev:   [2]string{"na" + id, "nb" + id},
		Addr:  [2]netip.Addr{netip.MustParseAddr("10.199.9.1"), netip.MustParseAddr("10.199.9.2")},
		Addr6: [2]netip.Addr{netip.MustParseAddr("fd00:199:9::1"), netip.MustParseAddr("fd00:199:9::2")},
	}
	func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			t.Fatal(err)
		}
		defer func() {
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			orig.Close()
		}()
		for i := range e.NS {
			if e.NS[i], err = netns.New(); err != nil { // also switches this thread into it
				t.Fatalf("create netns: %v", err)
			}
			h := e.NS[i]
			t.Cleanup(func() { _ = h.Close() })
		}
	}()
	var nl [2]*netlink.Handle
	for i := range 2 {
		h, err := netlink.NewHandleAt(e.NS[i])
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		nl[i] = h
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: e.Dev[0], MTU: mtu, NumTxQueues: queues, NumRxQueues: queues},
		PeerName: e.Dev[1], PeerNamespace: netlink.NsFd(e.NS[1]), PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues)}
	if err := nl[0].LinkAdd(veth); err != nil {
		t.Fatalf("veth: %v", err)
	}
	for i := range 2 {
		for _, name := range []string{"lo", e.Dev[i]} {
			l, err := nl[i].LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if name != "lo" {
				if err := nl[i].LinkSetMTU(l, mtu); err != nil {
					t.Fatal(err)
				}
				for _, a := range []netip.Prefix{netip.PrefixFrom(e.Addr[i], 24), netip.PrefixFrom(e.Addr6[i], 64)} {
					na := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
					if err := nl[i].AddrAdd(l, na); err != nil {
						t.Fatalf("address %v: %v", a, err)
					}
				}
			}
			if err := nl[i].LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Until the kernel's link watcher has seen the carrier (up to a second
	// later) the veths drop what they are given.
	for i := range e.Dev {
		waitOperUp(t, e.NS[i], e.Dev[i])
	}
	return e
}

// AddAddr gives side i's veth one more address (prefix), for tests that need an address
// of the namespace that a datapath under test does not own.
func (e *Env) AddAddr(t testing.TB, i int, prefix netip.Prefix) {
	t.Helper()
	h, err := netlink.NewHandleAt(e.NS[i])
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(e.Dev[i])
	if err != nil {
		t.Fatal(err)
	}
	na := &netlink.Addr{IPNet: &net.IPNet{IP: prefix.Addr().AsSlice(), Mask: net.CIDRMask(prefix.Bits(), prefix.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
	if err := h.AddrAdd(l, na); err != nil {
		t.Fatalf("address %v: %v", prefix, err)
	}
}

// waitOperUp waits, from the namespace's link notifications (the current state first),
// until dev in ns is operationally up; it fails the test after 5 s.
func waitOperUp(t testing.TB, ns netns.NsHandle, dev string) {
	t.Helper()
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &ns, ListExisting: true}); err != nil {
		t.Fatalf("link notifications: %v", err)
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				t.Fatalf("%s: link notifications ended before it was up", dev)
			}
			if a := u.Link.Attrs(); a.Name == dev && a.OperState == netlink.OperUp {
				return
			}
		case <-timeout.C:
			t.Fatalf("%s not operationally up after 5 s", dev)
		}
	}
}

// In runs f on a thread switched into namespace ns: sockets, netlink
// handles and XDP attachments made there stay in ns.
func In(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer func() {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread() // else the thread dies with the goroutine
		}
	}()
	f()
}
