package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemo runs the demo in-process with a small region and checks its report.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Size: 1 << 20, CRC: true}, &out, nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"CRC true", "received SEND (16 bytes)", "1048576 bytes", "RDMA WRITE 1048576 bytes ×4",
		"placed directly by the RDMA WRITEs: verified", "RDMA READ 1048576 bytes ×4", "CRC errors 0", "demo: OK"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := ParseArgs([]string{"-size", "-1"}); err == nil {
		t.Fatal("negative size accepted")
	}
	if o, err := ParseArgs([]string{"-crc=false", "-size", "4096"}); err != nil || o.CRC || o.Size != 4096 {
		t.Fatal(o, err)
	}
}
