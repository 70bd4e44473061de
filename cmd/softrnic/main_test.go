package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestProfiled: with SOFTRNIC_CPUPROFILE set, the command runs, its exit code is kept and
// the file holds a CPU profile (runtime/pprof writes gzip-compressed protobuf); a file
// that cannot be made fails the command before it runs.
func TestProfiled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	t.Setenv(profileEnv, path)
	ran := false
	code := profiled(func(args []string) int {
		ran = len(args) == 1 && args[0] == "x"
		return 3
	}, []string{"x"})
	if code != 3 || !ran {
		t.Fatalf("exit code %d, ran %v; want 3, true", code, ran)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("profile is not gzip data (%d bytes): %v", len(b), err)
	}
	if pb, err := io.ReadAll(zr); err != nil || len(pb) == 0 {
		t.Fatalf("profile: %d bytes, %v", len(pb), err)
	}

	t.Setenv(profileEnv, filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	ran = false
	if code := profiled(func([]string) int { ran = true; return 0 }, nil); code != 1 || ran {
		t.Fatalf("unwritable profile: exit code %d, ran %v; want 1, false", code, ran)
	}
}
