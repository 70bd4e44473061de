package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The suite shares one guest: booting under TCG costs ~10 s of wall time.
var (
	shared      *Guest
	skipReason  string
	results     Results
	softrnicBin string // cmd/softrnic built for this run
	// guestSoftrnicHost is the static build of cmd/softrnic that Boot put into the shared
	// guest as GuestSoftrnic.
	guestSoftrnicHost string
)

// GuestSoftrnic is where the shared guest has softrnic (a CGO_ENABLED=0 build of this tree).
const GuestSoftrnic = "/usr/bin/softrnic"

const banner = "\n" +
	"###############################################################################\n" +
	"## INTEROP TESTS SKIPPED: %s\n" +
	"###############################################################################\n"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv("SOFTRNIC_INTEROP") != "1" {
		skipReason = "SOFTRNIC_INTEROP is not 1 (tests/interop/ci.sh sets it)"
		return m.Run()
	}
	if why := CanRun(); why != "" {
		skipReason = why
		fmt.Fprintf(os.Stderr, banner, why)
		return m.Run()
	}
	t0 := time.Now()
	img, err := BuildImage(context.Background(), func(s string) { fmt.Fprintln(os.Stderr, s) })
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop: FAIL: building the guest: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "interop: guest image ready in %v (kernel %s)\n", time.Since(t0).Round(time.Second), img.Release)
	binDir, err := os.MkdirTemp("", "softrnic-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop: FAIL: %v\n", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	if softrnicBin, err = BuildSoftrnic(binDir); err != nil {
		fmt.Fprintf(os.Stderr, "interop: FAIL: %v\n", err)
		return 1
	}
	// The guest gets a static build too (GuestSoftrnic), for the tests that run softrnic
	// inside it (siw_vs_softrnic_test.go).
	if guestSoftrnicHost, err = BuildStaticSoftrnic(binDir); err != nil {
		fmt.Fprintf(os.Stderr, "interop: FAIL: %v\n", err)
		return 1
	}
	t1 := time.Now()
	// One retry: a TCG boot on a loaded 2-core host occasionally dies early.
	var g *Guest
	for attempt := 1; ; attempt++ {
		g, err = Boot(img, Options{KeepDir: os.Getenv("SOFTRNIC_INTEROP_KEEP") == "1",
			Files: map[string]string{GuestSoftrnic: guestSoftrnicHost}})
		if err == nil {
			break
		}
		fmt.Fprintf(os.Stderr, "interop: booting the guest (attempt %d): %v\n", attempt, err)
		if attempt == 2 {
			fmt.Fprintf(os.Stderr, "interop: FAIL: the guest did not boot\n")
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "interop: guest up in %v (netns %s, run dir %s)\n", time.Since(t1).Round(100*time.Millisecond), g.Netns, g.RunDir)
	shared = g
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- guest console (tail) ---\n%s\n", g.ConsoleTail(60))
	}
	g.Close()
	out := os.Getenv("SOFTRNIC_INTEROP_RESULTS")
	if out == "" {
		out = filepath.Join(CacheDir(), "results.md")
	}
	hdr := fmt.Sprintf("Interop results (guest kernel %s, %s)", img.Release, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	if err := results.WriteFile(out, hdr); err != nil {
		fmt.Fprintf(os.Stderr, "interop: writing %s: %v\n", out, err)
	} else {
		fmt.Fprintf(os.Stderr, "interop: results table written to %s\n%s", out, results.Markdown(hdr))
	}
	return code
}

// guest returns the shared guest, or skips the test (loudly) when the harness cannot run.
func guest(t *testing.T) *Guest {
	t.Helper()
	if shared == nil {
		if skipReason == "" {
			skipReason = "guest not booted"
		}
		t.Skipf("INTEROP SKIPPED: %s", skipReason)
	}
	return shared
}

// record adds the test's outcome to the results table when it ends.
func record(t *testing.T, peer, op, role string) {
	t.Helper()
	t.Cleanup(func() {
		res := "pass"
		switch {
		case t.Failed():
			res = "FAIL"
		case t.Skipped():
			res = "skip"
		}
		results.Add(Row{Peer: peer, Operation: op, Role: role, Result: res, Test: t.Name()})
	})
}

// Peer names used in the results table.
const (
	PeerSiw = "siw (Linux 6.1)"
	PeerRxe = "rxe (Linux 6.1)"
)
