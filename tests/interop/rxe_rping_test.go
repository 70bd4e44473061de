package interop

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rping over RoCEv2: the guest's rping on rxe0 (rdma_cm with the IB CM REQ/REP/RTU as MADs
// to QP1, the RDMA-CM service ID and cma_hdr) against softrnic rping --roce on the host end
// of tap1, in both roles, with the same payload checks as the siw rping tests.

// TestRxeGuestClientSoftrnicServer: guest rping -c (rxe) against softrnic rping --roce -s.
func TestRxeGuestClientSoftrnicServer(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	for _, size := range rpingSizes {
		t.Run("S"+strconv.Itoa(size), func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("rping -C %d -S %d -V (guest client)", rpingCount, size), "server")
			p := port()
			srv, err := g.StartHost(4*time.Minute, bin, "rping", "--roce", "-s", "-a", HostRxeAddr, "-p", strconv.Itoa(p),
				"-S", strconv.Itoa(size), "-v", "-d", "--timeout", "120s")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if !srv.WaitOutput("listening on", 30*time.Second) {
				t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
			}
			args := fmt.Sprintf("-c -a %s -p %d -C %d -S %d -V -v", HostRxeAddr, p, rpingCount, size)
			cli, err := g.Run(guestRping(args, "cli", "ping data: "), 150*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := srv.Wait(60 * time.Second)
			if err != nil {
				t.Fatalf("softrnic server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			if cli.Code != 0 || sr.Code != 0 {
				t.Fatalf("guest rping client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", rpingCount, size)
			checkHostPings(t, "softrnic server", sr.Output, "server ping data: ", rpingCount, size)
			if !strings.Contains(sr.Output, "server DISCONNECT EVENT...") {
				t.Errorf("softrnic server did not report the client's disconnect:\n%s", Tail(sr.Output, 2000))
			}
			// rping's rdma_conn_param: responder_resources = initiator_depth = 1.
			if !strings.Contains(sr.Output, "ird 1 ord 1") {
				t.Errorf("softrnic server did not log the REQ's IRD/ORD 1/1:\n%s", Tail(sr.Output, 2000))
			}
		})
	}
}

// TestRxeSoftrnicClientGuestServer: softrnic rping --roce -c against guest rping -s (rxe).
func TestRxeSoftrnicClientGuestServer(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	for _, size := range rpingSizes {
		t.Run("S"+strconv.Itoa(size), func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("rping -C %d -S %d -V (guest server)", rpingCount, size), "client")
			p := port()
			srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestRxeAddr, p, size), "srv", "server ping data: "), 240*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(p, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			cli, err := g.StartHost(4*time.Minute, bin, "rping", "--roce", "-c", "-a", GuestRxeAddr, "-p", strconv.Itoa(p),
				"-C", strconv.Itoa(rpingCount), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--timeout", "120s")
			if err != nil {
				t.Fatal(err)
			}
			cr, err := cli.Wait(150 * time.Second)
			if err != nil {
				t.Fatalf("softrnic client: %v\n%s", err, Tail(cr.Output, 3000))
			}
			sr, err := srv.Wait(60 * time.Second)
			if err != nil {
				t.Fatalf("guest rping server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			if cr.Code != 0 || sr.Code != 0 {
				t.Fatalf("softrnic client exit %d:\n%s\nguest rping server exit %d:\n%s", cr.Code, Tail(cr.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkHostPings(t, "softrnic client", cr.Output, "ping data: ", rpingCount, size)
			checkGuestSummary(t, "guest rping server", sr.Output, "server ping data: ", rpingCount, size)
			if !strings.Contains(sr.Output, "DISCONNECT EVENT") {
				t.Errorf("guest rping server did not see the disconnect (DREQ):\n%s", Tail(sr.Output, 2000))
			}
		})
	}
}
