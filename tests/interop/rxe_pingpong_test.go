package interop

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestRxePingpong: ibv_rc_pingpong over RoCEv2 between the guest's rxe0 (GID index 1, the
// IPv4-mapped GID) and softrnic pingpong on the host end of tap1, in both roles.
func TestRxePingpong(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	const iters, size = 50, 4096
	done := regexp.MustCompile(fmt.Sprintf(`%d bytes in [0-9.]+ seconds`, 2*iters*size))
	t.Run("guest server", func(t *testing.T) {
		record(t, PeerRxe, fmt.Sprintf("ibv_rc_pingpong -g 1 -n %d -s %d (guest server)", iters, size), "client")
		p := 18515 + int(nextPort.Add(1))
		srv, err := g.Start(fmt.Sprintf("exec ibv_rc_pingpong -d rxe0 -g 1 -n %d -s %d -p %d", iters, size, p), 90*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		if err := g.WaitTCPListen(p, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		cli, err := g.StartHost(90*time.Second, bin, "pingpong", "-a", HostRxeAddr, "-g", "1", "-n", strconv.Itoa(iters),
			"-s", strconv.Itoa(size), "-p", strconv.Itoa(p), GuestRxeAddr)
		if err != nil {
			t.Fatal(err)
		}
		cr, err := cli.Wait(80 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := srv.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cr.Code != 0 || sr.Code != 0 || !done.MatchString(cr.Output) || !done.MatchString(sr.Output) {
			t.Fatalf("softrnic client exit %d:\n%s\nguest server exit %d:\n%s", cr.Code, Tail(cr.Output, 2000), sr.Code, Tail(sr.Output, 2000))
		}
	})
	t.Run("guest client", func(t *testing.T) {
		record(t, PeerRxe, fmt.Sprintf("ibv_rc_pingpong -g 1 -n %d -s %d (guest client)", iters, size), "server")
		p := 18515 + int(nextPort.Add(1))
		srv, err := g.StartHost(90*time.Second, bin, "pingpong", "-a", HostRxeAddr, "-g", "1", "-n", strconv.Itoa(iters),
			"-s", strconv.Itoa(size), "-p", strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		time.Sleep(time.Second)
		cli, err := g.Run(fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g 1 -n %d -s %d -p %d %s", iters, size, p, HostRxeAddr), 80*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := srv.Wait(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if cli.Code != 0 || sr.Code != 0 || !done.MatchString(cli.Output) || !done.MatchString(sr.Output) {
			t.Fatalf("guest client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 2000), sr.Code, Tail(sr.Output, 2000))
		}
	})
}
