package interop

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// rpingSoftrnicServerViaProxy runs softrnic rping -s on the host's siw link (hostArgs
// follow "-p port"; hostLimit bounds the process) and the guest's rping -c (script
// cliName, limit cliLimit) through an MPAProxy, count pings of size bytes. It fails t unless
// both exit 0 (or the guest's rping ends in rping's teardown race: rpingChannelRace), then
// calls check with the guest client's and the softrnic server's results
// and returns the streams the proxy relayed (up: client → server).
func rpingSoftrnicServerViaProxy(t *testing.T, g *Guest, bin string, count, size int, hostLimit time.Duration, hostArgs []string,
	cliName string, cliLimit time.Duration, check func(cli, sr Result)) (up, down MPAStream) {
	t.Helper()
	p := port()
	srv, err := g.StartHost(hostLimit, bin, append([]string{"rping", "-s", "-a", HostSiwAddr, "-p", strconv.Itoa(p)}, hostArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if !srv.WaitOutput("listening on", 30*time.Second) {
		t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
	}
	px, err := g.StartMPAProxy(HostSiwAddr+":0", fmt.Sprintf("%s:%d", HostSiwAddr, p))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	cli, err := g.Run(guestRping(fmt.Sprintf("-c -a %s -p %d -C %d -S %d -V -v", HostSiwAddr, px.Addr().Port, count, size), cliName, "ping data: "), cliLimit)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if (cli.Code != 0 && !rpingChannelRace(t, "guest rping client", cli.Code, cli.Output)) || sr.Code != 0 {
		t.Fatalf("guest client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), sr.Code, Tail(sr.Output, 3000))
	}
	check(cli, sr)
	up, down, err = px.Wait(30 * time.Second)
	if err != nil {
		t.Errorf("mpa proxy: %v", err)
	}
	return up, down
}

// rpingSoftrnicClientViaProxy runs the guest's rping -s (script srvName, limit srvLimit)
// with size-byte buffers and softrnic rping -c on the host's siw link through an MPAProxy
// (hostArgs follow "-p port"; hostLimit bounds the process, cliWait the wait for it). It
// fails t unless both exit 0 (or the guest's rping ends in rping's teardown race:
// rpingChannelRace), then calls check with the softrnic client's and the guest server's
// results and returns the streams the proxy relayed (up: client → server).
func rpingSoftrnicClientViaProxy(t *testing.T, g *Guest, bin string, size int, srvName string, srvLimit time.Duration,
	hostLimit time.Duration, hostArgs []string, cliWait time.Duration, check func(cr, sr Result)) (up, down MPAStream) {
	t.Helper()
	p := port()
	srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestSiwAddr, p, size), srvName, "server ping data: "), srvLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	px, err := g.StartMPAProxy(HostSiwAddr+":0", fmt.Sprintf("%s:%d", GuestSiwAddr, p))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	if err := g.WaitCMListen(p, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cli, err := g.StartHost(hostLimit, bin, append([]string{"rping", "-c", "-a", HostSiwAddr, "-p", strconv.Itoa(px.Addr().Port)}, hostArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := cli.Wait(cliWait)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Code != 0 || (sr.Code != 0 && !rpingChannelRace(t, "guest rping server", sr.Code, sr.Output)) {
		t.Fatalf("softrnic client exit %d:\n%s\nguest server exit %d:\n%s", cr.Code, Tail(cr.Output, 3000), sr.Code, Tail(sr.Output, 3000))
	}
	check(cr, sr)
	up, down, err = px.Wait(30 * time.Second)
	if err != nil {
		t.Errorf("mpa proxy: %v", err)
	}
	return up, down
}
