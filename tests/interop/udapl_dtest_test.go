package interop

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// OFA DAPL's dtest (Debian dapl2-utils) over softrnic's uDAPL provider on the host against
// dtest over OFA's cma provider (libdaplofa, rdma_cm) on the guest's siw0 and rxe0: the
// uDAPL wire of udapl/README.md ("Interoperating with OFA's cma provider").
//
// dtest's client opens the IA name its server tells it over TCP port 15828, so both sides
// use one name, daplIA: the host's dat.conf maps it to softrnic, the guest's to libdaplofa.

const daplIA = "ofa-v2-interop"

var (
	daplOnce sync.Once
	daplLib  string // host: libdaplsoftrnic.so
	daplSkip string
	daplErr  error
)

// daplLibrary builds the provider library for the host side (needs cgo, gcc, libdapl-dev
// and dtest on the host; CI installs them), or skips saying what is missing.
func daplLibrary(t *testing.T) string {
	t.Helper()
	daplOnce.Do(func() {
		var miss []string
		for _, p := range []string{"gcc", "dtest"} {
			if _, err := exec.LookPath(p); err != nil {
				miss = append(miss, p)
			}
		}
		if _, err := os.Stat("/usr/include/dat2/udat.h"); err != nil {
			miss = append(miss, "/usr/include/dat2/udat.h")
		}
		if len(miss) > 0 {
			daplSkip = "host lacks " + strings.Join(miss, ", ") + " (apt-get install gcc libdapl-dev dapl2-utils)"
			return
		}
		dir, err := os.MkdirTemp("", "softrnic-interop-udapl-")
		if err != nil {
			daplErr = err
			return
		}
		lib := filepath.Join(dir, "libdaplsoftrnic.so")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "udapl", "-buildmode=c-shared", "-o", lib, "./udapl")
		cmd.Dir = filepath.Join(Dir(), "..", "..")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			daplErr = fmt.Errorf("building the provider: %v\n%s", err, out)
			return
		}
		daplLib = lib
	})
	if daplSkip != "" {
		t.Skip("INTEROP SKIPPED: " + daplSkip)
	}
	if daplErr != nil {
		t.Fatal(daplErr)
	}
	return daplLib
}

// daplLink is what the dtest interop tests vary by the guest's provider.
type daplLink struct {
	peer      string // PeerSiw, PeerRxe
	transport string // softrnic's: "iwarp", "rocev2"
	hostAddr  string
	guestAddr string
	guestDev  string // the netdev of OFA's ia_params
}

var (
	siwDapl = daplLink{peer: PeerSiw, transport: "iwarp", hostAddr: HostSiwAddr, guestAddr: GuestSiwAddr, guestDev: "eth0"}
	rxeDapl = daplLink{peer: PeerRxe, transport: "rocev2", hostAddr: HostRxeAddr, guestAddr: GuestRxeAddr, guestDev: "eth1"}
)

// hostConf writes the host's dat.conf: daplIA on softrnic.
func (l daplLink) hostConf(t *testing.T, lib string) string {
	p := filepath.Join(t.TempDir(), "dat.conf")
	line := fmt.Sprintf("%s u2.0 nonthreadsafe default %s softrnic.1.0 \"%s %s\" \"\"\n", daplIA, lib, l.transport, l.hostAddr)
	if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// guestScript runs dtest in the guest with daplIA on OFA's cma provider (libdaplofa).
func (l daplLink) guestScript(args string) string {
	return fmt.Sprintf("printf '%%s\\n' '%s u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 \"%s 0\" \"\"' > /tmp/dat.conf\n"+
		"export DAT_OVERRIDE=/tmp/dat.conf\n%s\n", daplIA, l.guestDev, args)
}

var dtestFlags = "-b 4096 -B 100"

// checkDtest checks a dtest's output for its verdict and every phase.
func checkDtest(t *testing.T, who, out string) {
	t.Helper()
	if !strings.Contains(out, "DAPL Test Complete. PASSED") {
		t.Errorf("%s did not pass:\n%s", who, Tail(out, 3000))
		return
	}
	for _, ph := range []string{"RDMA WRITE DATA with SEND MSG", "RDMA READ DATA with SEND MSG", "PING DATA with SEND MSG"} {
		if !strings.Contains(out, ph) {
			t.Errorf("%s skipped the phase %q:\n%s", who, ph, Tail(out, 3000))
		}
	}
}

// dtest's server hands its address to the client (TCP port 15828) before it creates its PSP
// (dtest.c connect_ep: send_server_params, then dat_psp_create), so a client that connects
// at once races the server's listen. OFA's cma client loses no race against a fast server
// (rdma_resolve_addr and rdma_resolve_route come first); softrnic connects straight away,
// and the guest (QEMU TCG) is slow, so its connect found no listener and was (correctly)
// rejected. sideChannelRelay passes dtest's side channel through the host and releases the
// server's message to the client only once the guest listens on the connection qualifier,
// without a fixed delay.
const (
	dtestSidePort = 15828 // CONN_PORT
	dtestConnQual = 45248 // SERVER_CONN_QUAL, a port for OFA's cma provider
)

func sideChannelRelay(g *Guest, hostAddr, guestAddr string) (ready, done chan error) {
	ready, done = make(chan error, 1), make(chan error, 1)
	go func() {
		listening := false
		err := g.InNetns(func() error {
			ln, err := net.Listen("tcp", net.JoinHostPort(hostAddr, strconv.Itoa(dtestSidePort)))
			ready <- err
			listening = true
			if err != nil {
				return err
			}
			defer ln.Close()
			_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(90 * time.Second))
			cli, err := ln.Accept()
			if err != nil {
				return fmt.Errorf("relay accept: %w", err)
			}
			defer cli.Close()
			if err := g.WaitTCPListen(dtestSidePort, 60*time.Second); err != nil {
				return err
			}
			srv, err := net.DialTimeout("tcp", net.JoinHostPort(guestAddr, strconv.Itoa(dtestSidePort)), 30*time.Second)
			if err != nil {
				return fmt.Errorf("relay dial: %w", err)
			}
			defer srv.Close()
			_ = srv.SetDeadline(time.Now().Add(60 * time.Second))
			msg := make([]byte, 128) // CONN_MSG_SIZE
			if _, err := io.ReadFull(srv, msg); err != nil {
				return fmt.Errorf("relay read: %w", err)
			}
			if err := g.WaitCMListen(dtestConnQual, 60*time.Second); err != nil {
				return err
			}
			_, err = cli.Write(msg)
			return err
		})
		if !listening { // InNetns failed before fn ran
			ready <- err
		}
		done <- err
	}()
	return ready, done
}

// The guest dtest server's teardown race. dtest prints its verdict only after its teardown:
// the client disconnects (dapl-2.1.10 dtest.c disconnect_ep: dat_ep_disconnect with
// DAT_CLOSE_DEFAULT, which dat.h defines as DAT_CLOSE_ABRUPT_FLAG, so softrnic resets the TCP
// connection), the server waits with DAT_TIMEOUT_INFINITE on its connection EVD for
// DISCONNECTED, then frees its PSP, EP, EVDs and IA and prints "DAPL Test Complete". siw
// delivers that disconnect: with siw_cm.c's dynamic debug on, the guest's log shows the reset
// (siw_cm_llp_error_report: error 104), SIW_CM_WORK_PEER_CLOSE and both upcalls,
// IW_CM_EVENT_DISCONNECT and IW_CM_EVENT_CLOSE (rdma_cm's DISCONNECTED), alike in runs where
// the server ends and in a run where it hung (its rdma_cm ID still listed, state CONNECT). Yet
// now and then (2 of 60 runs with the host's CPUs saturated, none of 41 unloaded; 2026-11-28)
// the guest's dtest then never ends, or dies with "Segmentation fault", after the host client
// has passed every phase: a race in libdaplofa/dtest's own teardown, like the guest client's
// segfault on rxe (README finding 9), where the guest had disconnected gracefully itself.
//
// So a guest server that stalls or crashes after the connection was up and after the host
// client passed is logged with the guest's view (dtest's threads, rdma_cm IDs, siw's log) and
// the whole exchange runs once more; that run must pass on both sides like any other.
// Anything else, or a second such failure, fails the test.
const dtestServerExit = 60 * time.Second // the server ends within ~1 s of the client when it ends

// testDtestGuestServer: guest dtest -P (OFA cma) against host dtest -h (softrnic).
func testDtestGuestServer(t *testing.T, l daplLink) {
	g := guest(t)
	lib := daplLibrary(t)
	record(t, l.peer, "OFA dtest "+dtestFlags+" (guest server, libdaplofa)", "client")
	conf := l.hostConf(t, lib)
	for attempt := 1; ; attempt++ {
		cr, sr, err := dtestGuestServerOnce(t, g, l, conf)
		if err != nil && attempt == 1 && guestTeardownStall(cr, sr, err) {
			t.Logf("KNOWN PEER RACE: guest dtest server did not end cleanly after the host client passed (%v); "+
				"repeating the exchange once\nguest dtest server:\n%s\nguest state:\n%s",
				err, Tail(sr.Output, 1500), dtestGuestState(g))
			continue
		}
		if err != nil {
			t.Fatalf("guest dtest server: %v\n%s\nhost dtest client (exit %d):\n%s", err, Tail(sr.Output, 3000), cr.Code, Tail(cr.Output, 3000))
		}
		checkDtest(t, "host dtest client (softrnic)", cr.Output)
		checkDtest(t, "guest dtest server (libdaplofa)", sr.Output)
		t.Logf("host dtest client:\n%s\nguest dtest server:\n%s", Tail(cr.Output, 400), Tail(sr.Output, 400))
		return
	}
}

// dtestGuestServerOnce runs one exchange. A host client that fails or a side channel that
// breaks ends the test; the server's result is returned with the error of waiting for it
// (also an error: a non-zero exit status).
func dtestGuestServerOnce(t *testing.T, g *Guest, l daplLink, conf string) (cr, sr Result, err error) {
	t.Helper()
	srv, err := g.Start(l.guestScript("dtest -P "+daplIA+" "+dtestFlags), 240*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Kill()
		// the next exchange must not meet this server's sockets or rdma_cm IDs
		_, _ = g.Run("i=0; while pidof dtest > /dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done", 20*time.Second)
	}()
	ready, relayed := sideChannelRelay(g, l.hostAddr, l.guestAddr)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	cli, err := g.StartHost(4*time.Minute, "env", "DAT_OVERRIDE="+conf, "dtest", "-h", l.hostAddr, "-b", "4096", "-B", "100")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Kill()
	if err := <-relayed; err != nil {
		t.Fatalf("side channel: %v\nhost dtest client:\n%s\nguest dtest server:\n%s", err, Tail(cli.Output(), 2000), Tail(srv.Output(), 2000))
	}
	cr, err = cli.Wait(200 * time.Second)
	if err != nil {
		t.Fatalf("host dtest client: %v\n%s", err, Tail(cr.Output, 3000))
	}
	sr, err = srv.Wait(dtestServerExit)
	if err == nil && sr.Code != 0 {
		err = fmt.Errorf("exit status %d", sr.Code)
	}
	return cr, sr, err
}

// guestTeardownStall reports whether a failed guest server shows the teardown race: the
// host client passed, the server got as far as the connection, and then it either never
// ended or crashed (its buffered stdout is lost then; dash reports the signal).
func guestTeardownStall(cr, sr Result, err error) bool {
	if cr.Code != 0 || !strings.Contains(cr.Output, "DAPL Test Complete. PASSED") || !strings.Contains(sr.Output, "CONNECTED!") {
		return false
	}
	return strings.Contains(err.Error(), "still running") || strings.Contains(sr.Output, "Segmentation fault")
}

// dtestGuestState is the guest's view of a stalled dtest: each thread's wait channel and
// kernel stack, its rdma_cm IDs, and siw's and the kernel's last messages.
func dtestGuestState(g *Guest) string {
	r, _ := g.Run("for p in $(pidof dtest); do for t in /proc/$p/task/*; do echo \"task $t: $(cat $t/wchan)\"; cat $t/stack; done; done\n"+
		"rdma res show cm_id; dmesg | grep -E 'siw|segfault|trap' | tail -20", 20*time.Second)
	return r.Output
}

// testDtestHostServer: host dtest -P (softrnic) against guest dtest -h (OFA cma).
func testDtestHostServer(t *testing.T, l daplLink) {
	g := guest(t)
	lib := daplLibrary(t)
	record(t, l.peer, "OFA dtest "+dtestFlags+" (guest client, libdaplofa)", "server")
	conf := l.hostConf(t, lib)
	srv, err := g.StartHost(4*time.Minute, "env", "DAT_OVERRIDE="+conf, "dtest", "-P", daplIA, "-b", "4096", "-B", "100")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if !srv.WaitOutput("Server is waiting for client connection", 30*time.Second) {
		t.Fatalf("host dtest server not ready:\n%s", srv.Output())
	}
	// dtest's client gives up at once when the server's side channel is not listening yet
	script := "i=0; while :; do dtest -h " + l.hostAddr + " " + dtestFlags + " > /tmp/dcli.out 2>&1; rc=$?\n" +
		"grep -q \"Couldn't connect to\" /tmp/dcli.out || break; i=$((i+1)); [ $i -lt 20 ] || break; sleep 0.5; done\n" +
		"cat /tmp/dcli.out; exit $rc"
	cr, err := g.Run(l.guestScript(script), 200*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.Wait(60 * time.Second)
	if err != nil {
		t.Fatalf("host dtest server: %v\n%s", err, Tail(sr.Output, 3000))
	}
	checkDtest(t, "guest dtest client (libdaplofa)", cr.Output)
	checkDtest(t, "host dtest server (softrnic)", sr.Output)
	t.Logf("guest dtest client:\n%s\nhost dtest server:\n%s", Tail(cr.Output, 400), Tail(sr.Output, 400))
}

func TestDtestSiwGuestServer(t *testing.T) { testDtestGuestServer(t, siwDapl) }
func TestDtestSiwHostServer(t *testing.T)  { testDtestHostServer(t, siwDapl) }
func TestDtestRxeGuestServer(t *testing.T) { testDtestGuestServer(t, rxeDapl) }
func TestDtestRxeHostServer(t *testing.T)  { testDtestHostServer(t, rxeDapl) }
