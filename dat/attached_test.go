package dat

import (
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/broker"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// TestDTestFlowAttached: two IAs of provider instance "rocev2 @t0" attach to device t0
// of a running daemon (a broker with the daemon's endpoint, as the softrnic daemon runs
// it) and share its one RoCEv2 address; dtest's flow runs between them. Without the
// daemon the same IA fails to open with DAT_INSUFFICIENT_RESOURCES/DAT_RESOURCE_DEVICE
// wrapping host.ErrNoDaemon.
func TestDTestFlowAttached(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "t0.sock")
	t.Setenv("SOFTRNIC_SOCK", sock)
	r := NewRegistry()
	if err := r.AddProvider(&Provider{Info: ProviderInfo{Name: "t", VersionMajor: 2}, InstanceData: "rocev2 @t0"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.OpenIA("t", 8, nil); !errors.Is(err, ErrResourceDevice) || !errors.Is(err, host.ErrNoDaemon) {
		t.Fatalf("open without a daemon: %v", err)
	}
	b, err := broker.New(broker.Config{Name: "t0", Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: attach.Path(sock)})
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := rnic.Open(rnic.Config{QPNumbers: b.QPNumbers()})
	ep := rocev2.NewEndpoint(dev, b.Link(), nil)
	defer func() { ep.Close(); dev.Close(); b.Close() }()
	srv := newSideOn(t, "rocev2 @t0")
	cli := newSideOn(t, "rocev2 @t0")
	if !srv.ia.local.Equal(net.IPv4(127, 0, 0, 1)) || srv.ia.udpPort != int(b.Addr().Port()) {
		t.Fatalf("attached IA at %v port %d, the device is %v", srv.ia.local, srv.ia.udpPort, b.Addr())
	}
	dtestFlow(t, srv, cli, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(b.Addr().Port())})
	if len(b.Processes()) != 2 {
		t.Fatalf("the daemon lists %d attachments, want 2", len(b.Processes()))
	}
}
