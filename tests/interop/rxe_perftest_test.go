package interop

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// perftest over RoCEv2: the guest's ib_write_bw / ib_read_bw -R -x 1 on rxe0 (rdma_cm with
// the IB CM; two CM connections to one port: the communication QP, then the data QP)
// against softrnic perftest --roce, in both roles. Sizes and iteration counts are checked;
// the bandwidth must be positive where softrnic measured it (see ptParseReport).
func TestRxePerftest(t *testing.T) {
	g := guest(t)
	const size, iters = 65536, 1000
	for _, v := range ptVerbs[:2] { // write, read (Send on RoCE needs RNR-based flow: not supported)
		t.Run(v.verb+"/guest-client", func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("%s -R -x 1 -s %d -n %d (guest client)", v.tool, size, iters), "server")
			port := ptPort()
			srv := ptStartHost(t, g, 3*time.Minute, "perftest", v.verb, "--roce", "-R", "--bind", HostRxeAddr, "-p", strconv.Itoa(port),
				"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "--timeout", "120s")
			if !srv.WaitOutput("Waiting for client to connect", 30*time.Second) {
				t.Fatalf("softrnic perftest server did not start:\n%s", srv.Output())
			}
			cli, err := g.Run(fmt.Sprintf("%s -R -x 1 -d rxe0 -F -s %d -n %d -p %d %s", v.tool, size, iters, port, HostRxeAddr), 150*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			code := ptExit(srv, 60*time.Second)
			if cli.Code != 0 || code != 0 {
				t.Fatalf("guest %s exit %d:\n%s\nsoftrnic server exit %d:\n%s", v.tool, cli.Code, Tail(cli.Output, 3000), code, Tail(srv.Output(), 3000))
			}
			cbw := ptParseReport(t, "guest "+v.tool, cli.Output, size, iters, false)
			sbw := ptParseReport(t, "softrnic server", srv.Output(), size, iters, false)
			t.Logf("%s over RoCEv2: guest client %.2f MB/s, softrnic server (client's report) %.2f MB/s", v.tool, cbw, sbw)
		})
		t.Run(v.verb+"/softrnic-client", func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("%s -R -x 1 -s %d -n %d (guest server)", v.tool, size, iters), "client")
			port := ptPort()
			srv, err := g.Start(fmt.Sprintf("exec %s -R -x 1 -d rxe0 -F -s %d -n %d -p %d", v.tool, size, iters, port), 150*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(port, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			cli := ptStartHost(t, g, 3*time.Minute, "perftest", v.verb, "--roce", "-R", "-p", strconv.Itoa(port),
				"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "--timeout", "120s", GuestRxeAddr)
			code := ptExit(cli, 150*time.Second)
			sr, err := srv.Wait(60 * time.Second)
			if err != nil || code != 0 || sr.Code != 0 {
				t.Fatalf("%v: softrnic client exit %d:\n%s\nguest %s server exit %d:\n%s", err, code, Tail(cli.Output(), 3000), v.tool, sr.Code, Tail(sr.Output, 3000))
			}
			cbw := ptParseReport(t, "softrnic client", cli.Output(), size, iters, true)
			sbw := ptParseReport(t, "guest "+v.tool+" server", sr.Output, size, iters, true)
			t.Logf("%s over RoCEv2: softrnic client %.2f MB/s, guest server (client's report) %.2f MB/s", v.tool, cbw, sbw)
		})
	}
}
