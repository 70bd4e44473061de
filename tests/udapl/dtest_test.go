package udapl

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dtest exchanges its server's address over TCP port 15828 and connects
// on connection qualifier 45248 (SERVER_CONN_QUAL): one pair at a time.

type dtestCase struct {
	transport string // "iwarp", "rocev2"
	flags     []string
	phases    []string // output lines proving each phase ran
}

var (
	fullPhases  = []string{"RDMA WRITE DATA with SEND MSG", "RDMA READ DATA with SEND MSG", "PING DATA with SEND MSG"}
	immedPhases = []string{"RDMA WRITE IMM DATA with SEND MSG"}
)

func TestDtest(t *testing.T) {
	e := setup(t)
	cases := []dtestCase{
		{"iwarp", []string{"-b", "4096", "-B", "100"}, fullPhases},
		{"iwarp", []string{"-b", "65536", "-B", "100"}, fullPhases},
		// -w: RDMA writes ending in an IB-extension write with immediate data
		{"iwarp", []string{"-w", "-b", "4096", "-B", "100"}, immedPhases},
		{"rocev2", []string{"-b", "4096", "-B", "100"}, fullPhases},
		{"rocev2", []string{"-b", "65536", "-B", "100"}, fullPhases},
	}
	for _, c := range cases {
		t.Run(c.transport+strings.Join(c.flags, ""), func(t *testing.T) { runDtest(t, e, c) })
	}
}

func runDtest(t *testing.T, e *env, c dtestCase) {
	ia := "softrnic-" + c.transport
	srvConf, cliConf, host := e.conf, e.conf, "127.0.0.1"
	if c.transport == "rocev2" {
		srvConf, cliConf, host = e.confA, e.confB, "127.0.0.2"
	}
	cmdline := fmt.Sprintf("dtest -P %s %s; dtest -h %s %s", ia, strings.Join(c.flags, " "), host, strings.Join(c.flags, " "))
	t0 := time.Now()
	res := "FAIL"
	defer func() {
		results.add(row{program: "dtest", transport: c.transport, command: cmdline, result: res, secs: time.Since(t0).Seconds()})
	}()
	cout := dtestPair(t, srvConf, cliConf, ia, host, c.flags, c.phases)
	res = "pass"
	t.Logf("client:\n%s", tail(cout, 6))
}

// TestDtestx runs OFA's dtestx, the IB extension test (RDMA Write with
// immediate data, compare-and-swap, fetch-and-add through
// dat_ib_post_*), over RoCEv2, where they are native IB operations. Over
// iWARP (RFC 7306) dtestx stops at its check of the write-with-immediate
// target's length: softrnic's Immediate Data receive reports 0 bytes, IB
// reports the write's length (udapl/README.md).
func TestDtestx(t *testing.T) {
	e := setup(t)
	const ia = "softrnic-rocev2"
	cmdline := "dtestx -s -P " + ia + "; dtestx -c -h 127.0.0.2 -P " + ia
	t0 := time.Now()
	res := "FAIL"
	defer func() {
		results.add(row{program: "dtestx (IB extensions)", transport: "rocev2", command: cmdline, result: res, secs: time.Since(t0).Seconds()})
	}()
	// dtestx's stdout is block buffered in a pipe, so its readiness line is not
	// seen before it exits: the client is retried while the server's side
	// channel does not accept yet. dtestx's server sends its address over that
	// channel before it calls dat_psp_create, so a quick client can connect
	// before anyone listens and get DAT_CONNECTION_EVENT_NON_PEER_REJECTED
	// (0x4003; the IB CM's REJ for an unknown service ID, as on hardware): the
	// server then waits for ever, so the whole pair is started again.
	var srv, cli *proc
	for pair := 1; ; pair++ {
		srv = start(t, e.confA, "", 60*time.Second, "dtestx", "-s", "-P", ia)
		for attempt := 0; ; attempt++ {
			cli = start(t, e.confB, "", 60*time.Second, "dtestx", "-c", "-h", "127.0.0.2", "-P", ia)
			out, err := cli.wait()
			if err == nil || !strings.Contains(out, "Couldn't connect to") || attempt == 200 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		out, _ := cli.wait()
		if !strings.Contains(out, "!conn established: 0x4003") || pair == 10 {
			break
		}
		t.Logf("pair %d: the client connected before dtestx's server called dat_psp_create (rejected: no listener); starting both again", pair)
		_ = syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGKILL)
		_, _ = srv.wait()
	}
	cout, cerr := cli.wait()
	sout, serr := srv.wait()
	for _, p := range []struct {
		role, out string
		err       error
	}{{"client", cout, cerr}, {"server", sout, serr}} {
		for _, want := range []string{"CMP_SWAP test - PASSED", "FETCH_ADD test - PASSED", "immed/atomic test PASSED"} {
			if p.err != nil || !strings.Contains(p.out, want) {
				t.Fatalf("dtestx %s (%v): no %q:\n%s", p.role, p.err, want, tail(p.out, 40))
			}
		}
	}
	res = "pass"
}

// dtestPair runs dtest -P ia (DAT_OVERRIDE srvConf) and dtest -h host (cliConf) with
// flags, and checks that both pass every phase; it returns the client's output.
func dtestPair(t *testing.T, srvConf, cliConf, ia, host string, flags, phases []string) string {
	t.Helper()
	srv := start(t, srvConf, "Server is waiting for client connection", 60*time.Second, "dtest", append([]string{"-P", ia}, flags...)...)
	if !srv.waitFor(20 * time.Second) {
		t.Fatalf("dtest server did not get ready:\n%s", tail(srv.output(), 30))
	}
	// the server listens on its side-channel port right after saying so:
	// a client that came too early fails at once, try again
	var cli *proc
	for attempt := 0; ; attempt++ {
		cli = start(t, cliConf, "", 60*time.Second, "dtest", append([]string{"-h", host}, flags...)...)
		out, err := cli.wait()
		if err == nil || !strings.Contains(out, "Couldn't connect to") || attempt == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cout, cerr := cli.wait()
	sout, serr := srv.wait()
	for _, p := range []struct {
		role, out string
		err       error
	}{{"client", cout, cerr}, {"server", sout, serr}} {
		if p.err != nil || !strings.Contains(p.out, "DAPL Test Complete. PASSED") {
			t.Fatalf("dtest %s: %v\n%s\nthe other side:\n%s", p.role, p.err, tail(p.out, 40), tail(map[bool]string{true: sout, false: cout}[p.role == "client"], 40))
		}
		for _, ph := range phases {
			if !strings.Contains(p.out, ph) {
				t.Fatalf("dtest %s skipped the phase %q:\n%s", p.role, ph, tail(p.out, 40))
			}
		}
	}
	return cout
}
