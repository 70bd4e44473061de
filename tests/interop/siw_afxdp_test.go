package interop

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// iWARP over AF_XDP against siw: softrnic's tools with --xdp run MPA/DDP/RDMAP over the
// user-space TCP of link/netstack on an AF_XDP port on tap0 (generic XDP: the tap's
// frames from QEMU reach the program as the kernel receives them), against the guest's
// real rping and ib_write_bw -R on siw0. Everything on tap0 that softrnic does not
// steer (ARP, the guest's other traffic) still goes to the host kernel.

// xdpFlags are the softrnic flags that select the AF_XDP datapath on the siw link.
var xdpFlags = []string{"--xdp", "tap0", "--xdp-mode", "generic"}

// siwXDPRping is the rping interop link to siw0 with softrnic over AF_XDP.
var siwXDPRping = rpingLink{peer: PeerSiw, flags: xdpFlags, hostAddr: HostSiwAddr, guestAddr: GuestSiwAddr,
	timeout: "200s", guestCli: 200 * time.Second, hostCli: 220 * time.Second, what: " over AF_XDP"}

// checkXDP checks that a softrnic tool reported running over the AF_XDP port.
func checkXDP(t *testing.T, who, out string) {
	t.Helper()
	if !strings.Contains(out, "AF_XDP on tap0 ("+HostSiwAddr+"): XDP generic mode") {
		t.Errorf("%s did not report the AF_XDP datapath on tap0:\n%s", who, Tail(out, 2000))
	}
}

// TestXDPGuestClientSoftrnicServer: guest rping -c (siw) against softrnic rping -s over
// AF_XDP.
func TestXDPGuestClientSoftrnicServer(t *testing.T) {
	testGuestClientSoftrnicServer(t, siwXDPRping, func(t *testing.T, srvOut string) {
		if !strings.Contains(srvOut, "mpa: rev 2 enhanced true crc false") {
			t.Errorf("unexpected MPA negotiation:\n%s", Tail(srvOut, 2000))
		}
		checkXDP(t, "softrnic rping server", srvOut)
	})
}

// TestXDPSoftrnicClientGuestServer: softrnic rping -c over AF_XDP against guest rping -s
// (siw).
func TestXDPSoftrnicClientGuestServer(t *testing.T) {
	testSoftrnicClientGuestServer(t, siwXDPRping, func(t *testing.T, cliOut, srvOut string) {
		if !strings.Contains(cliOut, "mpa: rev 2 enhanced true crc false") {
			t.Errorf("unexpected MPA negotiation:\n%s", Tail(cliOut, 2000))
		}
		checkXDP(t, "softrnic rping client", cliOut)
	})
}

// TestXDPWriteBW: ib_write_bw -R against softrnic perftest write over AF_XDP, each side
// the client in turn, at perftest's default size and a small one.
func TestXDPWriteBW(t *testing.T) {
	g := guest(t)
	for _, size := range ptSizes {
		t.Run(fmt.Sprintf("guest-client/%d", size), func(t *testing.T) {
			record(t, PeerSiw, fmt.Sprintf("ib_write_bw -R -s %d -n %d (guest client) over AF_XDP", size, ptIters), "server")
			port := ptPort()
			srv := ptStartHost(t, g, 4*time.Minute, append([]string{"perftest", "write", "-R", "--bind", HostSiwAddr, "-p", strconv.Itoa(port),
				"-s", strconv.Itoa(size), "-n", strconv.Itoa(ptIters), "--timeout", "180s"}, xdpFlags...)...)
			if !srv.WaitOutput("Waiting for client to connect", 30*time.Second) {
				t.Fatalf("softrnic perftest server did not start:\n%s", srv.Output())
			}
			cli, err := g.Run(fmt.Sprintf("ib_write_bw -R -d siw0 -F -s %d -n %d -p %d %s", size, ptIters, port, HostSiwAddr), 200*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			code := ptExit(srv, 60*time.Second)
			if cli.Code != 0 || code != 0 {
				t.Fatalf("guest ib_write_bw exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), code, Tail(srv.Output(), 3000))
			}
			cbw := ptParseReport(t, "guest ib_write_bw", cli.Output, size, ptIters, false)
			checkXDP(t, "softrnic perftest server", srv.Output())
			t.Logf("ib_write_bw -s %d over AF_XDP: guest client BW average %.2f MB/s", size, cbw)
		})
		t.Run(fmt.Sprintf("softrnic-client/%d", size), func(t *testing.T) {
			record(t, PeerSiw, fmt.Sprintf("ib_write_bw -R -s %d -n %d (guest server) over AF_XDP", size, ptIters), "client")
			port := ptPort()
			srv, err := g.Start(fmt.Sprintf("exec ib_write_bw -R -d siw0 -F -s %d -n %d -p %d", size, ptIters, port), 200*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(port, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			cli := ptStartHost(t, g, 4*time.Minute, append([]string{"perftest", "write", "-R", "-p", strconv.Itoa(port),
				"-s", strconv.Itoa(size), "-n", strconv.Itoa(ptIters), "--timeout", "180s"}, append(xdpFlags, GuestSiwAddr)...)...)
			code := ptExit(cli, 200*time.Second)
			sr, err := srv.Wait(60 * time.Second)
			if err != nil {
				t.Fatalf("guest ib_write_bw server: %v\n%s\nsoftrnic client exit %d:\n%s", err, Tail(sr.Output, 3000), code, Tail(cli.Output(), 3000))
			}
			if code != 0 || sr.Code != 0 {
				t.Fatalf("softrnic client exit %d:\n%s\nguest ib_write_bw server exit %d:\n%s", code, Tail(cli.Output(), 3000), sr.Code, Tail(sr.Output, 3000))
			}
			cbw := ptParseReport(t, "softrnic client", cli.Output(), size, ptIters, true)
			checkXDP(t, "softrnic perftest client", cli.Output())
			t.Logf("ib_write_bw -s %d over AF_XDP: softrnic client BW average %.2f MB/s", size, cbw)
		})
	}
}
