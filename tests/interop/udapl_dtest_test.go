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

// testDtestGuestServer: guest dtest -P (OFA cma) against host dtest -h (softrnic).
func testDtestGuestServer(t *testing.T, l daplLink) {
	g := guest(t)
	lib := daplLibrary(t)
	record(t, l.peer, "OFA dtest "+dtestFlags+" (guest server, libdaplofa)", "client")
	srv, err := g.Start(l.guestScript("dtest -P "+daplIA+" "+dtestFlags), 240*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	ready, relayed := sideChannelRelay(g, l.hostAddr, l.guestAddr)
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	conf := l.hostConf(t, lib)
	cli, err := g.StartHost(4*time.Minute, "env", "DAT_OVERRIDE="+conf, "dtest", "-h", l.hostAddr, "-b", "4096", "-B", "100")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Kill()
	if err := <-relayed; err != nil {
		t.Fatalf("side channel: %v\nhost dtest client:\n%s\nguest dtest server:\n%s", err, Tail(cli.Output(), 2000), Tail(srv.Output(), 2000))
	}
	cr, err := cli.Wait(200 * time.Second)
	if err != nil {
		t.Fatalf("host dtest client: %v\n%s", err, Tail(cr.Output, 3000))
	}
	sr, err := srv.Wait(120 * time.Second)
	if err != nil {
		t.Fatalf("guest dtest server: %v\n%s\nhost dtest client (exit %d):\n%s", err, Tail(sr.Output, 3000), cr.Code, Tail(cr.Output, 3000))
	}
	checkDtest(t, "host dtest client (softrnic)", cr.Output)
	checkDtest(t, "guest dtest server (libdaplofa)", sr.Output)
	t.Logf("host dtest client:\n%s\nguest dtest server:\n%s", Tail(cr.Output, 400), Tail(sr.Output, 400))
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
