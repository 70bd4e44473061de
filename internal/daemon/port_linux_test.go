package daemon

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/internal/uapi"
)

// TestPortFollowsNetdev: the device on a veth (-netdev, its address taken from the
// netdev) reports the netdev, ACTIVE, its MTU and one GID per address; taking the veth
// down makes the port DOWN and up again ACTIVE, and an address added to or removed from
// the netdev appears in or leaves the GID table — from the kernel's notifications.
func TestPortFollowsNetdev(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	sock := filepath.Join(t.TempDir(), "p0.sock")
	var d *Daemon
	netnstest.In(t, e.NS[0], func() {
		o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-netdev", e.Dev[0], "-target-mib", "0", "-name", "p0"}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if o.RoCEv2 != e.Addr[0].String() {
			t.Fatalf("-netdev %s: address %q, want %v", e.Dev[0], o.RoCEv2, e.Addr[0])
		}
		o.LogOut = testLog{t}
		if d, err = Start(o); err != nil {
			t.Fatal(err)
		}
	})
	defer d.Close()
	// wait until the status satisfies ok (the port follows notifications)
	waitPort := func(what string, ok func(uapi.Status) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := uapi.GetStatus(context.Background(), sock)
			if err != nil {
				t.Fatal(err)
			}
			if ok(st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: port %q %q mtu %d gids %q", what, st.Netdev, st.PortState, st.MTU, st.GIDs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	mine := "::ffff:" + e.Addr[0].String()
	waitPort("initial", func(st uapi.Status) bool {
		return st.Netdev == e.Dev[0] && st.PortState == "ACTIVE" && st.MTU == 1500 && slices.Contains(st.GIDs, mine) &&
			slices.Contains(st.GIDs, e.Addr6[0].String())
	})
	netnstest.In(t, e.NS[0], func() {
		l, err := netlink.LinkByName(e.Dev[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetDown(l); err != nil {
			t.Fatal(err)
		}
		waitPort("veth down", func(st uapi.Status) bool { return st.PortState == "DOWN" })
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		waitPort("veth up", func(st uapi.Status) bool { return st.PortState == "ACTIVE" })
		extra := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.199.77.5"), Mask: net.CIDRMask(24, 32)}}
		if err := netlink.AddrAdd(l, extra); err != nil {
			t.Fatal(err)
		}
		waitPort("address added", func(st uapi.Status) bool { return slices.Contains(st.GIDs, "::ffff:10.199.77.5") })
		if err := netlink.AddrDel(l, extra); err != nil {
			t.Fatal(err)
		}
		waitPort("address removed", func(st uapi.Status) bool { return !slices.Contains(st.GIDs, "::ffff:10.199.77.5") })
	})
}
