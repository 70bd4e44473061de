//go:build linux && record

package netdev

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/softrnic/softrnic/internal/netnstest"
)

// TestRecord rewrites testdata/*.genl from this machine's kernel (build
// tag record: go test -tags record -run TestRecord ./link/netdev): the NETDEV_CMD_DEV_GET answers (genlmsghdr and
// attributes, as received) for lo, a veth and the netdev named by
// SOFTRNIC_RECORD_ZC (one whose driver offers AF_XDP zero-copy; recorded
// here from virtio_net on Linux 6.18 as virtio-zc.genl).
func TestRecord(t *testing.T) {
	write := func(file string, ifindex int) {
		b, err := QueryXDP(ifindex)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("lo.genl", 1)
	if zc := os.Getenv("SOFTRNIC_RECORD_ZC"); zc != "" {
		in, err := Inspect(zc)
		if err != nil {
			t.Fatal(err)
		}
		write("virtio-zc.genl", in.Index)
	}
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	netnstest.In(t, e.NS[0], func() {
		in, err := Inspect(e.Dev[0])
		if err != nil {
			t.Fatal(err)
		}
		write("veth.genl", in.Index)
	})
}
