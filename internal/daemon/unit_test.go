package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit: the unit file's ExecStart is a command line the daemon accepts, with
// the example configuration its comment gives.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../contrib/softrnic@.service")
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			exec = strings.Fields(strings.ReplaceAll(v, "%i", "softrnic0"))
		}
	}
	if len(exec) < 3 || !strings.HasSuffix(exec[0], "/softrnic") || exec[1] != "daemon" {
		t.Fatalf("ExecStart %q", exec)
	}
	conf := filepath.Join(t.TempDir(), "softrnic0.conf")
	if err := os.WriteFile(conf, []byte("rocev2=192.0.2.10\ngroup=rdma\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := exec[2:]
	for i, a := range args {
		if a == "/etc/softrnic/softrnic0.conf" {
			args[i] = conf
		}
	}
	o, err := ParseArgs(args, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("the unit's command line: %v", err)
	}
	if o.Name != "softrnic0" || o.RoCEv2 != "192.0.2.10" || o.Group != "rdma" || !o.Foreground {
		t.Fatalf("options from the unit: %+v", o)
	}
}
