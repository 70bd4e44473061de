package udapl

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/dat"
	"github.com/softrnic/softrnic/internal/daemon"
)

// TestDtestDaemonDevice: OFA dtest's server and client, unmodified C programs, both
// attached through libdaplsoftrnic.so to one device of a running softrnic daemon (the IA
// "softrnic-dev", instance data "rocev2 @ud0"): one RoCEv2 address and UDP port shared by
// the two processes, the daemon steering their packets and routing their CM MADs.
func TestDtestDaemonDevice(t *testing.T) {
	e := setup(t)
	sock := filepath.Join(t.TempDir(), "ud0.sock")
	o, err := daemon.ParseArgs([]string{"-foreground", "-name", "ud0", "-sock", sock, "-rocev2", "127.0.0.4:0", "-target-mib", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = io.Discard
	d, err := daemon.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Setenv("SOFTRNIC_SOCK", sock) // the programs' host.Open finds the daemon by it
	var entries []dat.ConfEntry
	for _, ts := range []bool{false, true} {
		entries = append(entries, dat.ConfEntry{IAName: "softrnic-dev", APIMajor: dat.VersionMajor, APIMinor: dat.VersionMinor,
			ThreadSafe: ts, Default: true, Library: e.lib, ProviderID: "softrnic", ProviderMajor: 1, InstanceData: "rocev2 @ud0"})
	}
	var b bytes.Buffer
	if err := dat.WriteConf(&b, entries); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "dat-dev.conf")
	if err := os.WriteFile(conf, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"-b", "4096", "-B", "100"}
	cmdline := "softrnic daemon -rocev2 127.0.0.4; dtest -P softrnic-dev " + strings.Join(flags, " ") + "; dtest -h 127.0.0.4 " + strings.Join(flags, " ")
	t0 := time.Now()
	res := "FAIL"
	defer func() {
		results.add(row{program: "dtest, both on one daemon device", transport: "rocev2", command: cmdline, result: res, secs: time.Since(t0).Seconds()})
	}()
	srv := start(t, conf, "Server is waiting for client connection", 60*time.Second, "dtest", append([]string{"-P", "softrnic-dev"}, flags...)...)
	if !srv.waitFor(20 * time.Second) {
		t.Fatalf("dtest server did not get ready:\n%s", tail(srv.output(), 30))
	}
	var cli *proc
	for attempt := 0; ; attempt++ {
		cli = start(t, conf, "", 60*time.Second, "dtest", append([]string{"-h", "127.0.0.4"}, flags...)...)
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
			t.Fatalf("dtest %s: %v\n%s", p.role, p.err, tail(p.out, 40))
		}
		for _, ph := range fullPhases {
			if !strings.Contains(p.out, ph) {
				t.Fatalf("dtest %s skipped the phase %q:\n%s", p.role, ph, tail(p.out, 40))
			}
		}
	}
	res = "pass"
}
