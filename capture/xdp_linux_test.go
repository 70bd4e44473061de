//go:build linux

package capture

import (
	"net/netip"
	"os"
	"testing"

	"github.com/safchain/ethtool"
	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/xdp"
	"github.com/softrnic/softrnic/roce"
)

// xdpExchange runs RC traffic from an AF_XDP link whose port records its
// frames as they are, to a UDP link in another namespace. Without the
// privileges it logs why and records nothing (the other sources still
// run).
func xdpExchange(t *testing.T, w *Writer) {
	if os.Geteuid() != 0 {
		t.Log("SKIP part (privileged): AF_XDP frames need root; the capture has the other sources only")
		return
	}
	e := netnstest.New(t, 1500, 1)
	var la, lb rocev2.Link
	netnstest.In(t, e.NS[0], func() {
		p, err := afxdp.Open(afxdp.Options{Interface: e.Dev[0], Addr: e.Addr[0], Tap: w})
		if err != nil {
			t.Fatal(err)
		}
		x, err := xdp.New(xdp.Options{Port: p, Addr: netip.AddrPortFrom(e.Addr[0], roce.UDPPort)})
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close(); p.Close() })
		la = x
	})
	netnstest.In(t, e.NS[1], func() {
		// a kernel sender on veth leaves UDP checksums partial, and the
		// AF_XDP side records the frames as they are
		et, err := ethtool.NewEthtool()
		if err != nil {
			t.Fatal(err)
		}
		defer et.Close()
		if err := et.Change(e.Dev[1], map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
			t.Fatal(err)
		}
		if lb, err = rocev2.ListenUDP(netip.AddrPortFrom(e.Addr[1], roce.UDPPort), nil); err != nil {
			t.Fatal(err)
		}
	})
	roceRC(t, la, lb)
}
