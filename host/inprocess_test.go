package host_test

import (
	"path/filepath"
	"testing"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
)

// TestAttachedToInProcess: an attached device (its peers told to answer on the device's
// port, rocev2.Config.PeerPort) dials an in-process device on another IP at that
// device's own UDP port ("ip:port@udpport"): the REP from that port is taken.
func TestAttachedToInProcess(t *testing.T) {
	dm := startDaemon(t, steer.ModeAuto)
	da, err := host.Open("t0", dm.opts())
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	ext, err := host.Open("x", &host.Options{Socket: filepath.Join(t.TempDir(), "n.sock"), Local: "127.0.0.2:0", RoCE: &rocev2.Config{PeerPort: dm.b.Addr().Port()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	a, b := newRes(t, da), newRes(t, ext)
	connectPair(t, a, b, 7301)
}
