package interop

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestToolsPingpong: ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on rxe0 (GID
// index 1, the IPv4-mapped GID) against softrnic pingpong --uc, --ud and --srq on the
// host end of tap1, in both roles. Both sides must print the result lines with the byte
// count, and the address lines of every QP.
func TestToolsPingpong(t *testing.T) {
	g := guest(t)
	for _, c := range []struct {
		tool, flag string
		args       string
		size       int
		iters      int
		qps        int
	}{
		{"ibv_uc_pingpong", "--uc", "-s 4096 -n 100", 4096, 100, 1},
		{"ibv_ud_pingpong", "--ud", "-s 1024 -n 100", 1024, 100, 1},
		{"ibv_srq_pingpong", "--srq", "-q 4 -s 4096 -n 200", 4096, 200, 4},
		{"ibv_srq_pingpong", "--srq", "-s 64 -n 200 -c", 64, 200, 16},
	} {
		done := regexp.MustCompile(fmt.Sprintf(`(?m)^%d bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n%d iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`,
			2*c.iters*c.size, c.iters))
		check := func(t *testing.T, r pairResult) {
			t.Helper()
			r.ok(t, c.tool)
			for who, out := range map[string]string{"guest " + c.tool: r.guest, "softrnic": r.host} {
				if !done.MatchString(out) || strings.Count(out, "remote address: LID 0x0000") != c.qps ||
					strings.Contains(out, "invalid data") {
					t.Errorf("%s output:\n%s", who, Tail(out, 3000))
				}
			}
		}
		name := c.tool + "/" + strings.ReplaceAll(c.args, " ", "")
		t.Run(name+"/guest-server", func(t *testing.T) {
			guestBinary(t, g, c.tool)
			record(t, PeerRxe, fmt.Sprintf("%s -g 1 %s (guest server)", c.tool, c.args), "client")
			p := toolPort()
			script := fmt.Sprintf("%s -d rxe0 -g 1 %s -p %d", c.tool, c.args, p)
			args := append([]string{"pingpong", c.flag, "-a", HostRxeAddr, "-g", "1", "-p", strconv.Itoa(p), "--timeout", "90s"},
				append(strings.Fields(c.args), GuestRxeAddr)...)
			check(t, guestServer(t, g, script, ready{tcpPort: p}, args, 120*time.Second))
		})
		t.Run(name+"/guest-client", func(t *testing.T) {
			guestBinary(t, g, c.tool)
			record(t, PeerRxe, fmt.Sprintf("%s -g 1 %s (guest client)", c.tool, c.args), "server")
			p := toolPort()
			script := fmt.Sprintf("%s -d rxe0 -g 1 %s -p %d %s", c.tool, c.args, p, HostRxeAddr)
			args := append([]string{"pingpong", c.flag, "-a", HostRxeAddr, "-g", "1", "-p", strconv.Itoa(p), "--timeout", "90s"},
				strings.Fields(c.args)...)
			check(t, hostServer(t, g, args, ready{tcpPort: p}, script, 120*time.Second))
		})
	}
	// A different -q on each side: srq_pingpong would send to QP 0 and wait forever;
	// softrnic refuses with the reason.
	t.Run("ibv_srq_pingpong/q-mismatch", func(t *testing.T) {
		record(t, PeerRxe, "ibv_srq_pingpong -q 2 server, softrnic --srq -q 4 client (mismatch): refused with one line", "client")
		p := toolPort()
		srv, err := g.Start(fmt.Sprintf("exec ibv_srq_pingpong -d rxe0 -g 1 -q 2 -n 50 -p %d", p), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		if err := g.WaitTCPListen(p, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		cli, err := g.StartHost(60*time.Second, softrnic(t), "pingpong", "--srq", "-q", "4", "-a", HostRxeAddr, "-g", "1", "-n", "50",
			"-p", strconv.Itoa(p), GuestRxeAddr)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := cli.Wait(50 * time.Second)
		if r.Code != 1 || !strings.Contains(r.Output, "the peer has 2 QPs, this side 4: both sides need the same -q") {
			t.Fatalf("softrnic exit %d:\n%s", r.Code, r.Output)
		}
	})
}
