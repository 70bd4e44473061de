package interop

import (
	"strings"
	"testing"
	"time"
)

// rping over RoCEv2: the guest's rping on rxe0 (rdma_cm with the IB CM REQ/REP/RTU as MADs
// to QP1, the RDMA-CM service ID and cma_hdr) against softrnic rping --roce on the host end
// of tap1, in both roles, with the same payload checks as the siw rping tests.

// rxeRping is the rping interop link to the guest's rxe0.
var rxeRping = rpingLink{peer: PeerRxe, flags: []string{"--roce"}, hostAddr: HostRxeAddr, guestAddr: GuestRxeAddr,
	timeout: "120s", guestCli: 150 * time.Second, hostCli: 150 * time.Second}

// TestRxeGuestClientSoftrnicServer: guest rping -c (rxe) against softrnic rping --roce -s.
func TestRxeGuestClientSoftrnicServer(t *testing.T) {
	testGuestClientSoftrnicServer(t, rxeRping, func(t *testing.T, srvOut string) {
		// rping's rdma_conn_param: responder_resources = initiator_depth = 1.
		if !strings.Contains(srvOut, "ird 1 ord 1") {
			t.Errorf("softrnic server did not log the REQ's IRD/ORD 1/1:\n%s", Tail(srvOut, 2000))
		}
	})
}

// TestRxeSoftrnicClientGuestServer: softrnic rping --roce -c against guest rping -s (rxe).
func TestRxeSoftrnicClientGuestServer(t *testing.T) {
	testSoftrnicClientGuestServer(t, rxeRping, func(t *testing.T, cliOut, srvOut string) {
		if !strings.Contains(srvOut, "DISCONNECT EVENT") {
			t.Errorf("guest rping server did not see the disconnect (DREQ):\n%s", Tail(srvOut, 2000))
		}
	})
}
