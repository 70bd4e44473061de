package interop

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCRC: softrnic asks for MPA CRC (C bit) in either role; siw accepts and uses it.
// The connection runs through an MPAProxy in the namespace, which records the MPA Request
// and Reply and checks the CRC32c of every FPDU in both directions independently of
// softrnic. softrnic itself checks every CRC it receives (a bad one is a Terminate, which
// fails the run) and its CRCErrors counter must stay 0.
func TestCRC(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	const count, size = 20, 4096
	t.Run("softrnic client", func(t *testing.T) {
		record(t, PeerSiw, fmt.Sprintf("MPA CRC requested by softrnic, rping -C %d -S %d -V (guest server)", count, size), "client")
		up, down := rpingSoftrnicClientViaProxy(t, g, bin, size, "crcsrv", 120*time.Second,
			2*time.Minute, []string{"-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--crc", "--timeout", "90s"},
			100*time.Second, func(cr, sr Result) {
				checkHostPings(t, "softrnic client", cr.Output, "ping data: ", count, size)
				checkGuestSummary(t, "guest rping server", sr.Output, "server ping data: ", count, size)
				checkCRCUsed(t, cr.Output)
			})
		t.Logf("softrnic Request bits %#04x, siw Reply bits %#04x; softrnic→siw %+v; siw→softrnic %+v",
			up.Bits(), down.Bits(), crcOnly(up), crcOnly(down))
		if up.Bits()&MPABitC == 0 || down.Bits()&MPABitC == 0 {
			t.Errorf("C bit: softrnic Request %#04x, siw Reply %#04x; want both set", up.Bits(), down.Bits())
		}
		checkCRCStream(t, "siw → softrnic", down)
		checkCRCStream(t, "softrnic → siw", up)
	})
	t.Run("softrnic server", func(t *testing.T) {
		record(t, PeerSiw, fmt.Sprintf("MPA CRC required by softrnic, rping -C %d -S %d -V (guest client)", count, size), "server")
		up, down := rpingSoftrnicServerViaProxy(t, g, bin, count, size, 2*time.Minute,
			[]string{"-S", strconv.Itoa(size), "-v", "-d", "--crc", "--timeout", "90s"},
			"crccli", 100*time.Second, func(cli, sr Result) {
				checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", count, size)
				checkHostPings(t, "softrnic server", sr.Output, "server ping data: ", count, size)
				checkCRCUsed(t, sr.Output)
			})
		t.Logf("siw Request bits %#04x, softrnic Reply bits %#04x; siw→softrnic %+v; softrnic→siw %+v",
			up.Bits(), down.Bits(), crcOnly(up), crcOnly(down))
		// siw asks for no CRC (mpa_crc_required is off) and accepts a Reply that turns it on.
		if up.Bits()&MPABitC != 0 || down.Bits()&MPABitC == 0 {
			t.Errorf("C bit: siw Request %#04x, softrnic Reply %#04x; want clear, set", up.Bits(), down.Bits())
		}
		checkCRCStream(t, "siw → softrnic", up)
		checkCRCStream(t, "softrnic → siw", down)
	})
}

// crcOnly is s without its frame, for logging.
func crcOnly(s MPAStream) MPAStream { s.Frame, s.First = nil, nil; return s }

func checkCRCStream(t *testing.T, dir string, s MPAStream) {
	t.Helper()
	if s.FPDUs == 0 || s.GoodCRC != s.FPDUs || s.BadCRC != 0 {
		t.Errorf("%s: %d FPDUs, %d with a correct CRC32c, %d wrong (%d zero)", dir, s.FPDUs, s.GoodCRC, s.BadCRC, s.ZeroCRC)
	}
}

func checkCRCUsed(t *testing.T, out string) {
	t.Helper()
	if !strings.Contains(out, " crc true ") {
		t.Errorf("CRC not negotiated:\n%s", Tail(out, 2000))
	}
	if !strings.Contains(out, "CRCErrors:0 ") || strings.Contains(out, "RxSegments:0 ") {
		t.Errorf("CRC errors or nothing received:\n%s", Tail(out, 2000))
	}
}

// kernelLog turns on siw's debug messages (dynamic debug) and clears the guest kernel log;
// the returned function collects the log and turns them off again. siw reports each
// Terminate it receives with pr_warn ("siw: got TERMINATE. layer L, type T, code C") and,
// with debug on, the Terminate it builds ("init TERM: layer L, type T, code C").
func kernelLog(t *testing.T, g *Guest) func() string {
	t.Helper()
	const ctl = "/sys/kernel/debug/dynamic_debug/control"
	if _, err := g.MustRun("mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug; "+
		"dmesg -c > /dev/null; echo 'module siw +p' > "+ctl, 20*time.Second); err != nil {
		t.Fatalf("enabling siw debug messages: %v", err)
	}
	return func() string {
		out, err := g.MustRun("dmesg -c; echo 'module siw -p' > "+ctl, 20*time.Second)
		if err != nil {
			t.Errorf("reading the guest kernel log: %v", err)
		}
		return out
	}
}

// TestSiwRefusesInvalidSTag: softrnic (rping server) uses a corrupted STag for its RDMA
// WRITE, then for its RDMA READ; siw must refuse with a Terminate.
func TestSiwRefusesInvalidSTag(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	for _, c := range []struct {
		fault, op string
		want      string // in softrnic's output
		kernel    string // in the guest kernel log
	}{
		// siw finds the bad STag in the tagged Write (RFC 5041 §7.2 tagged buffer error,
		// invalid STag: DDP layer 1, type 1, code 0) and sends that Terminate.
		{"write-bad-stag", "RDMA WRITE",
			"Terminate received: DDP tagged buffer error: invalid STag (1/1/0x00)",
			"init TERM: layer 1, type 1, code 0"},
		// siw finds the bad source STag when it builds the Read Response and means RDMAP
		// layer 0, remote protection type 1, invalid STag code 0 (RFC 5040 §7.4.1), as its log
		// says; but siw 6.1 encodes the Terminate control word with little-endian bitfields,
		// which puts the EType in the Layer nibble and vice versa, so on the wire it reads as
		// layer 1 (DDP), type 0 (catastrophic). softrnic decodes the wire per RFC 5040 §4.8.
		{"read-bad-stag", "RDMA READ",
			"wait for RDMA_READ_COMPLETE: Terminate received: DDP local catastrophic: local catastrophic (1/0/0x00)",
			"init TERM: layer 0, type 1, code 0"},
	} {
		t.Run(c.fault, func(t *testing.T) {
			record(t, PeerSiw, c.op+" to an invalid STag → siw Terminate; guest rping gets no ping", "server")
			for attempt := 1; ; attempt++ {
				if !runInvalidSTag(t, g, bin, c.fault, c.want, c.kernel) {
					return
				}
				if attempt == siwTermAttempts {
					t.Errorf("siw did not send its Terminate in any of %d attempts (its log: %q each time)", attempt, siwTermBusy)
					return
				}
				t.Logf("attempt %d: siw did not send its Terminate (%q: its send queue was busy); again", attempt, siwTermBusy)
			}
		})
	}
}

// siw (siw_send_terminate) does not send a Terminate while an operation of its send queue
// is in progress, and logs siwTermBusy instead: the guest rping client may be sending at
// that moment. TestSiwRefusesInvalidSTag then runs its case again, up to siwTermAttempts
// times in all.
const (
	siwTermBusy     = "cannot send TERMINATE"
	siwTermAttempts = 3
)

// runInvalidSTag runs one attempt of a TestSiwRefusesInvalidSTag case: the softrnic rping
// server with the fault against the guest rping client. It checks softrnic's output (want),
// the guest kernel log (kernel) and the client's output, unless siw logged siwTermBusy:
// then nothing can be expected of the attempt, and it reports siwBusy.
func runInvalidSTag(t *testing.T, g *Guest, bin, fault, want, kernel string) (siwBusy bool) {
	t.Helper()
	klog := kernelLog(t, g)
	p := port()
	srv, err := g.StartHost(time.Minute, bin, "rping", "-s", "-a", HostSiwAddr, "-p", strconv.Itoa(p), "-v", "-d", "--fault", fault, "--timeout", "45s")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if !srv.WaitOutput("listening on", 30*time.Second) {
		t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
	}
	cli, err := g.Run(guestRping(fmt.Sprintf("-c -a %s -p %d -C 3 -S 64 -V -v", HostSiwAddr, p), "errcli", "ping data: "), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.Wait(50 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kl := klog()
	t.Logf("guest rping client (exit %d):\n%s\nsoftrnic server (exit %d):\n%s\nguest kernel log:\n%s",
		cli.Code, Tail(cli.Output, 2000), sr.Code, Tail(sr.Output, 2000), Tail(kl, 3000))
	if strings.Contains(kl, siwTermBusy) {
		return true
	}
	if sr.Code == 0 || !strings.Contains(sr.Output, want) {
		t.Errorf("softrnic server: exit %d, want %q in its output", sr.Code, want)
	}
	if !strings.Contains(kl, kernel) {
		t.Errorf("guest kernel log lacks %q", kernel)
	}
	// rping ignores QP async events: its side of the error is a lost connection and
	// a missing ping.
	if !strings.Contains(cli.Output, "lines=0\n") || !strings.Contains(cli.Output, "client DISCONNECT EVENT...") {
		t.Errorf("guest rping: want no ping and a disconnect, got:\n%s", cli.Output)
	}
	return false
}

// TestSoftrnicTerminatesOutOfBoundsWrite: softrnic (rping client) advertises its sink half
// a buffer past its start, so siw's RDMA WRITE of -S bytes (from the unmodified guest rping
// server) runs past the end of softrnic's region: softrnic must send a Terminate (RFC 5041
// §7.2 tagged buffer error, base or bounds violation: 1/1/0x01) and siw must take it.
func TestSoftrnicTerminatesOutOfBoundsWrite(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	record(t, PeerSiw, "siw RDMA WRITE out of bounds into softrnic → softrnic Terminate (1/1/0x01)", "client")
	klog := kernelLog(t, g)
	p := port()
	srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S 64 -v", GuestSiwAddr, p), "oobsrv", "server ping data: "), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	if err := g.WaitCMListen(p, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cli, err := g.StartHost(time.Minute, bin, "rping", "-c", "-a", GuestSiwAddr, "-p", strconv.Itoa(p), "-C", "3", "-S", "64", "-V", "-v", "-d",
		"--fault", "sink-oob", "--timeout", "45s")
	if err != nil {
		t.Fatal(err)
	}
	cr, err := cli.Wait(50 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := srv.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kl := klog()
	t.Logf("softrnic client (exit %d):\n%s\nguest rping server (exit %d):\n%s\nguest kernel log:\n%s",
		cr.Code, Tail(cr.Output, 2000), sr.Code, Tail(sr.Output, 2000), Tail(kl, 3000))
	// siw logs every Terminate it receives (siw_proc_terminate, pr_warn).
	if !strings.Contains(kl, "siw: got TERMINATE. layer 1, type 1, code 1") {
		t.Errorf("guest kernel log lacks siw's report of the Terminate")
	}
	// The first ping's Read worked, the Write was refused: rping printed the read data once
	// and then saw the connection go down.
	if !strings.Contains(sr.Output, "lines=1\n") || !strings.Contains(sr.Output, "server DISCONNECT EVENT...") {
		t.Errorf("guest rping server: want one ping read and a disconnect, got:\n%s", sr.Output)
	}
	want := "Terminate sent: DDP tagged buffer error: base or bounds violation (1/1/0x01)"
	if cr.Code == 0 || !strings.Contains(cr.Output, want) {
		t.Errorf("softrnic client: exit %d, want %q", cr.Code, want)
	}
	if strings.Contains(cr.Output, "\nping data: ") {
		t.Errorf("softrnic client completed a ping despite the out-of-bounds write")
	}
}
