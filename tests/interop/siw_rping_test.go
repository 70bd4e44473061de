package interop

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pingLine is the text rping -v prints for ping i of a size-byte buffer (rping.c: the
// "rdma-ping-%d: " prefix, then 'A'..'z' from 'A'+i mod 58, NUL in the last byte).
func pingLine(i, size int) string {
	b := make([]byte, size)
	n := copy(b, fmt.Sprintf("rdma-ping-%d: ", i))
	c := byte('A' + i%58)
	for j := n; j < size; j++ {
		b[j] = c
		c++
		if c > 'z' {
			c = 'A'
		}
	}
	return string(b[:size-1])
}

// pingDigest is the md5 (as md5sum prints it) of the count lines prefix+pingLine(i).
func pingDigest(prefix string, count, size int) string {
	h := md5.New()
	for i := 0; i < count; i++ {
		h.Write([]byte(prefix + pingLine(i, size) + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// guestRping is a guest script running rping with args, keeping its output in files named
// by tag, and printing a summary: how many lines start with prefix, their md5, stderr and
// the other stdout lines (rping -v output is too large to ship whole).
func guestRping(args, tag, prefix string) string {
	return fmt.Sprintf("rping %s > /tmp/%s.out 2> /tmp/%s.err; rc=$?\n", args, tag, tag) + guestSummary(tag, prefix) + "exit $rc\n"
}

func guestSummary(tag, prefix string) string {
	return fmt.Sprintf("echo \"lines=$(grep -c '^%[2]s' /tmp/%[1]s.out)\"\n"+
		"echo \"md5=$(grep '^%[2]s' /tmp/%[1]s.out | md5sum | cut -d' ' -f1)\"\n"+
		"echo '--- stderr'; cat /tmp/%[1]s.err\n"+
		"echo '--- other stdout'; grep -v '^%[2]s' /tmp/%[1]s.out | tail -20\n", tag, prefix)
}

var summaryRE = regexp.MustCompile(`lines=(\d+)\nmd5=([0-9a-f]+)`)

// checkGuestSummary checks a guestRping summary for count correct lines.
func checkGuestSummary(t *testing.T, who, out, prefix string, count, size int) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(out)
	if m == nil {
		t.Errorf("%s: no summary in:\n%s", who, Tail(out, 3000))
		return
	}
	if n, _ := strconv.Atoi(m[1]); n != count {
		t.Errorf("%s printed %d %q lines, want %d:\n%s", who, n, prefix, count, Tail(out, 3000))
	}
	if want := pingDigest(prefix, count, size); m[2] != want {
		t.Errorf("%s ping data md5 %s, want %s (payload differs from rping's pattern)", who, m[2], want)
	}
}

// checkHostPings checks softrnic rping -v output for exactly count correct lines.
func checkHostPings(t *testing.T, who, out, prefix string, count, size int) {
	t.Helper()
	var n int
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		if want := prefix + pingLine(n, size); l != want {
			t.Errorf("%s line %d = %q, want %q", who, n, Tail(l, 200), Tail(want, 200))
			return
		}
		n++
	}
	if n != count {
		t.Errorf("%s printed %d ping lines, want %d:\n%s", who, n, count, Tail(out, 3000))
	}
}

var nextPort atomic.Int32

// port returns a fresh rping port for each run (avoids TIME_WAIT clashes between runs).
func port() int { return 7174 + int(nextPort.Add(1)) }

func softrnic(t *testing.T) string {
	t.Helper()
	if softrnicBin == "" {
		t.Fatal("softrnic binary not built")
	}
	return softrnicBin
}

// rpingSizes are the -S values of the interop runs. rping's largest size is 65535
// (RPING_BUFSIZE - 1); -S 65536 is refused by rping itself (TestRpingSizeLimit).
var rpingSizes = []int{64, 4096, 65535}

const rpingCount = 100

// TestGuestClientSoftrnicServer: guest rping -c (siw) against softrnic rping -s.
func TestGuestClientSoftrnicServer(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	for _, size := range rpingSizes {
		t.Run("S"+strconv.Itoa(size), func(t *testing.T) {
			record(t, PeerSiw, fmt.Sprintf("rping -C %d -S %d -V (guest client)", rpingCount, size), "server")
			p := port()
			// Like rping, the server's -S must cover the client's size (it reads into its buffer).
			srv, err := g.StartHost(4*time.Minute, bin, "rping", "-s", "-a", HostSiwAddr, "-p", strconv.Itoa(p), "-S", strconv.Itoa(size),
				"-v", "-d", "--timeout", "200s")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if !srv.WaitOutput("listening on", 30*time.Second) {
				t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
			}
			args := fmt.Sprintf("-c -a %s -p %d -C %d -S %d -V -v", HostSiwAddr, p, rpingCount, size)
			cli, err := g.Run(guestRping(args, "cli", "ping data: "), 200*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := srv.Wait(60 * time.Second)
			if err != nil {
				t.Fatalf("softrnic server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			if cli.Code != 0 || sr.Code != 0 {
				t.Fatalf("guest rping client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", rpingCount, size)
			checkHostPings(t, "softrnic server", sr.Output, "server ping data: ", rpingCount, size)
			if !strings.Contains(sr.Output, "server DISCONNECT EVENT...") {
				t.Errorf("softrnic server did not report the client's disconnect:\n%s", Tail(sr.Output, 2000))
			}
			// siw's request: rev 2, enhanced, no CRC, IRD = ORD = 1, client-server.
			if !strings.Contains(sr.Output, "mpa: rev 2 enhanced true crc false markers tx false rx false ird 1 ord 1 peer ird 1 ord 1 p2p false") {
				t.Errorf("unexpected MPA negotiation:\n%s", Tail(sr.Output, 2000))
			}
		})
	}
}

// TestSoftrnicClientGuestServer: softrnic rping -c against guest rping -s (siw).
func TestSoftrnicClientGuestServer(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	for _, size := range rpingSizes {
		t.Run("S"+strconv.Itoa(size), func(t *testing.T) {
			record(t, PeerSiw, fmt.Sprintf("rping -C %d -S %d -V (guest server)", rpingCount, size), "client")
			p := port()
			// The server's -S must cover the client's size (it reads into its own buffer).
			srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestSiwAddr, p, size), "srv", "server ping data: "), 240*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(p, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			cli, err := g.StartHost(4*time.Minute, bin, "rping", "-c", "-a", GuestSiwAddr, "-p", strconv.Itoa(p),
				"-C", strconv.Itoa(rpingCount), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--timeout", "200s")
			if err != nil {
				t.Fatal(err)
			}
			cr, err := cli.Wait(220 * time.Second)
			if err != nil {
				t.Fatalf("softrnic client: %v\n%s", err, Tail(cr.Output, 3000))
			}
			sr, err := srv.Wait(60 * time.Second)
			if err != nil {
				t.Fatalf("guest rping server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			if cr.Code != 0 || sr.Code != 0 {
				t.Fatalf("softrnic client exit %d:\n%s\nguest rping server exit %d:\n%s", cr.Code, Tail(cr.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkHostPings(t, "softrnic client", cr.Output, "ping data: ", rpingCount, size)
			checkGuestSummary(t, "guest rping server", sr.Output, "server ping data: ", rpingCount, size)
			if !strings.Contains(cr.Output, "mpa: rev 2 enhanced true crc false") {
				t.Errorf("unexpected MPA negotiation:\n%s", Tail(cr.Output, 2000))
			}
		})
	}
}

// TestRpingSizeLimit: rping itself refuses -S 65536 (its buffer is 64 KiB and the range
// check is size > 65535), and so does softrnic rping.
func TestRpingSizeLimit(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	record(t, PeerSiw, "rping -S 65536: refused by rping (max 65535), softrnic refuses alike", "both")
	r, err := g.Run("rping -c -a "+HostSiwAddr+" -S 65536 -C 1", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code == 0 || !strings.Contains(r.Output, "Invalid size 65536") {
		t.Errorf("guest rping -S 65536: exit %d:\n%s", r.Code, r.Output)
	}
	out, err := g.HostCommand(t.Context(), bin, "rping", "-c", "-a", GuestSiwAddr, "-S", "65536", "-C", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "invalid size 65536") {
		t.Errorf("softrnic rping -S 65536: %v:\n%s", err, out)
	}
}
