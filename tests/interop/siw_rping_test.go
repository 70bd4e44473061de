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

// siwRping is the rping interop link to the guest's siw0.
var siwRping = rpingLink{peer: PeerSiw, hostAddr: HostSiwAddr, guestAddr: GuestSiwAddr,
	timeout: "200s", guestCli: 200 * time.Second, hostCli: 220 * time.Second}

// TestGuestClientSoftrnicServer: guest rping -c (siw) against softrnic rping -s.
func TestGuestClientSoftrnicServer(t *testing.T) {
	testGuestClientSoftrnicServer(t, siwRping, func(t *testing.T, srvOut string) {
		// siw's request: rev 2, enhanced, no CRC, IRD = ORD = 1, client-server.
		if !strings.Contains(srvOut, "mpa: rev 2 enhanced true crc false markers tx false rx false ird 1 ord 1 peer ird 1 ord 1 p2p false") {
			t.Errorf("unexpected MPA negotiation:\n%s", Tail(srvOut, 2000))
		}
	})
}

// TestSoftrnicClientGuestServer: softrnic rping -c against guest rping -s (siw).
func TestSoftrnicClientGuestServer(t *testing.T) {
	testSoftrnicClientGuestServer(t, siwRping, func(t *testing.T, cliOut, srvOut string) {
		if !strings.Contains(cliOut, "mpa: rev 2 enhanced true crc false") {
			t.Errorf("unexpected MPA negotiation:\n%s", Tail(cliOut, 2000))
		}
	})
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
