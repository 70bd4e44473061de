// Package tsharktest runs tshark over capture files for tests: it finds (or, as root on
// Debian, installs) tshark and returns each frame's interface, protocol stack, TCP
// payload length and expert messages, with checksum validation on and the RDMA
// upper-layer heuristics off.
package tsharktest

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Need returns tshark's path, installing the Debian package when it is missing and the
// test runs as root; it skips, saying so, only when tshark cannot be had.
func Need(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("tshark"); err == nil {
		return p
	}
	if runtime.GOOS == "linux" && os.Geteuid() == 0 {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "tshark")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if p, lerr := exec.LookPath("tshark"); lerr == nil {
			return p
		}
		t.Skipf("SKIP (tool): tshark missing and apt-get install tshark failed: %v\n%s", err, out)
	}
	t.Skip("SKIP (tool): tshark missing and not root to install it (apt-get install tshark)")
	return ""
}

// ULPHeuristics are the protocols whose heuristic dissectors guess at InfiniBand and
// DDP/RDMAP payloads (tshark -G heuristic-decodes); Decode disables them, since test
// payloads are not an upper-layer protocol.
var ULPHeuristics = []string{"rpcordma", "smb_direct", "smc", "nvme-rdma", "lnet", "iser", "infiniband_sdp", "fcoib", "infiniband.eoib", "drbd"}

// Frame is one frame as tshark decoded it.
type Frame struct {
	Num, Iface, Protocols, Expert string
	// TCPLen is the TCP payload length (-1: not TCP).
	TCPLen int
	// ReassembledIn names the frame where this one's TCP payload is decoded as part of
	// a PDU that spans segments ("" when it is decoded here or not at all).
	ReassembledIn string
}

// heuristicFirst has TCP try heuristic dissectors (MPA's) before those registered for
// the segment's ports: an iWARP connection's ephemeral port can be another protocol's
// (a run decoded a capture proxy's stream on port 34980 as EtherCAT).
var heuristicFirst = []string{"-o", "tcp.try_heuristic_first:TRUE"}

// Decode runs tshark over file (two passes, so a segment knows where its PDU was
// reassembled) with IP, TCP and UDP checksum validation on, and TCP's heuristic
// dissectors tried first.
func Decode(t testing.TB, tshark, file string, extra ...string) []Frame {
	t.Helper()
	args := append([]string{"-r", file, "-n", "-2",
		"-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"}, heuristicFirst...)
	for _, h := range ULPHeuristics {
		args = append(args, "--disable-protocol", h)
	}
	args = append(args, extra...)
	cmd := exec.Command(tshark, append(args,
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;",
		"-e", "frame.number", "-e", "frame.interface_name", "-e", "frame.protocols", "-e", "tcp.len", "-e", "tcp.reassembled_in", "-e", "_ws.expert.message")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	var fs []Frame
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		p := strings.SplitN(line, "|", 6)
		if len(p) != 6 {
			t.Fatalf("tshark line %q", line)
		}
		f := Frame{Num: p[0], Iface: p[1], Protocols: p[2], ReassembledIn: p[4], Expert: p[5], TCPLen: -1}
		if p[3] != "" {
			if f.TCPLen, err = strconv.Atoi(strings.Split(p[3], ";")[0]); err != nil {
				t.Fatalf("tshark tcp.len %q", p[3])
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// Count returns how many frames match the display filter.
func Count(t testing.TB, tshark, file, filter string) int {
	t.Helper()
	args := append([]string{"-r", file, "-n"}, heuristicFirst...)
	out, err := exec.Command(tshark, append(args, "-Y", filter, "-T", "fields", "-e", "frame.number")...).Output()
	if err != nil {
		t.Fatalf("tshark -Y %q: %v", filter, err)
	}
	return len(strings.Fields(string(out)))
}
