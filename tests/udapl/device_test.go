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
	dtestPair(t, conf, conf, "softrnic-dev", "127.0.0.4", flags, fullPhases)
	res = "pass"
}
