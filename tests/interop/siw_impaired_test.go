package interop

import (
	"testing"
	"time"
)

// TestSiwImpairedRping: rping between the guest's siw and softrnic over iWARP on an
// impaired link (issue 10): netem on the guest's eth0 (siw0's netdev) delays,
// reorders, loses and duplicates what the guest sends — MPA frames, FPDUs, TCP ACKs.
// TCP recovers underneath MPA; both sides must still see every ping intact (the
// checks of the clean-link tests), in both roles. The host kernel has no sch_netem,
// so only the guest → host direction is impaired.
func TestSiwImpairedRping(t *testing.T) {
	l := siwRping
	l.what = " over netem \"" + dataImpair + "\""
	l.guestCli, l.hostCli = 4*time.Minute, 4*time.Minute
	t.Run("guest-client", func(t *testing.T) {
		impairDev(t, guest(t), "eth0", dataImpair, false)
		testGuestClientSoftrnicServer(t, l, func(*testing.T, string) {})
	})
	t.Run("softrnic-client", func(t *testing.T) {
		impairDev(t, guest(t), "eth0", dataImpair, false)
		testSoftrnicClientGuestServer(t, l, func(*testing.T, string, string) {})
	})
}
