package interop

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestRxeDaemonDevice: the softrnic daemon serves device softrnic0 on the host end of tap1
// (UDP 4791, the port rxe always sends to), and two host processes attached to it run at
// the same time against rxe in the guest: softrnic pingpong -d softrnic0 against
// ibv_rc_pingpong, and softrnic rping --roce -d softrnic0 against rping -s. Both complete,
// every ping validated: the daemon steers each packet to the process owning its QP and
// routes the CM's MADs (issue 11).
func TestRxeDaemonDevice(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	record(t, PeerRxe, "two host processes on one softrnic device (daemon, UDP 4791): pingpong -n 200 -s 4096 and rping --roce -C 100 -S 4096 -V at once (guest servers)", "client")
	sock := filepath.Join(t.TempDir(), "softrnic0.sock")
	env := "SOFTRNIC_SOCK=" + sock
	dmn, err := g.StartHost(4*time.Minute, bin, "daemon", "-name", "softrnic0", "-rocev2", HostRxeAddr, "-sock", sock,
		"-foreground", "-target-mib", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer dmn.Kill()
	if !dmn.WaitOutput("msg=up", 30*time.Second) {
		t.Fatalf("daemon not up:\n%s", dmn.Output())
	}
	const iters, size = 200, 4096
	pp := 18515 + int(nextPort.Add(1))
	ppSrv, err := g.Start(fmt.Sprintf("exec ibv_rc_pingpong -d rxe0 -g 1 -n %d -s %d -p %d", iters, size, pp), 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ppSrv.Kill()
	rp := port()
	rpSrv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestRxeAddr, rp, size), "srv", "server ping data: "), 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rpSrv.Kill()
	if err := g.WaitTCPListen(pp, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitCMListen(rp, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	ppCli, err := g.StartHost(2*time.Minute, "env", env, bin, "pingpong", "-d", "softrnic0", "-g", "1", "-n", strconv.Itoa(iters),
		"-s", strconv.Itoa(size), "-p", strconv.Itoa(pp), GuestRxeAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ppCli.Kill()
	rpCli, err := g.StartHost(2*time.Minute, "env", env, bin, "rping", "--roce", "-d", "softrnic0", "-c", "-a", GuestRxeAddr,
		"-p", strconv.Itoa(rp), "-C", strconv.Itoa(rpingCount), "-S", strconv.Itoa(size), "-V", "-v", "--timeout", "100s")
	if err != nil {
		t.Fatal(err)
	}
	defer rpCli.Kill()
	st, err := g.StartHost(30*time.Second, "env", env, bin, "dev")
	if err == nil {
		if r, err := st.Wait(30 * time.Second); err == nil {
			t.Logf("softrnic dev while both run:\n%s", r.Output)
		}
	}
	pr, err := ppCli.Wait(110 * time.Second)
	if err != nil {
		t.Fatalf("softrnic pingpong: %v\n%s", err, Tail(pr.Output, 2000))
	}
	rr, err := rpCli.Wait(110 * time.Second)
	if err != nil {
		t.Fatalf("softrnic rping: %v\n%s", err, Tail(rr.Output, 2000))
	}
	psr, err := ppSrv.Wait(30 * time.Second)
	if err != nil {
		t.Fatalf("guest ibv_rc_pingpong: %v\n%s", err, Tail(psr.Output, 2000))
	}
	rsr, err := rpSrv.Wait(60 * time.Second)
	if err != nil {
		t.Fatalf("guest rping server: %v\n%s", err, Tail(rsr.Output, 2000))
	}
	done := regexp.MustCompile(fmt.Sprintf(`%d bytes in [0-9.]+ seconds`, 2*iters*size))
	if pr.Code != 0 || psr.Code != 0 || !done.MatchString(pr.Output) || !done.MatchString(psr.Output) {
		t.Fatalf("pingpong: softrnic exit %d:\n%s\nguest exit %d:\n%s", pr.Code, Tail(pr.Output, 2000), psr.Code, Tail(psr.Output, 2000))
	}
	if rr.Code != 0 || (rsr.Code != 0 && !rpingChannelRace(t, "guest rping server", rsr.Code, rsr.Output)) {
		t.Fatalf("rping: softrnic exit %d:\n%s\nguest exit %d:\n%s", rr.Code, Tail(rr.Output, 2000), rsr.Code, Tail(rsr.Output, 2000))
	}
	checkHostPings(t, "softrnic rping client", rr.Output, "ping data: ", rpingCount, size)
	checkGuestSummary(t, "guest rping server", rsr.Output, "server ping data: ", rpingCount, size)
	t.Logf("daemon log:\n%s", Tail(dmn.Output(), 1500))
}
