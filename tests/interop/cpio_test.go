package interop

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// newcEntry is one entry of a newc archive, as readNewc decodes it.
type newcEntry struct {
	name string
	mode uint32
	data []byte
}

// readNewc decodes a newc archive up to its trailer, checking the magic and the 4-byte
// alignment of every header and body, and returns the entries and the archive's length.
func readNewc(t *testing.T, b []byte) ([]newcEntry, int) {
	t.Helper()
	var out []newcEntry
	off := 0
	field := func(i int) int {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header at %d, field %d: %v", off, i, err)
		}
		return int(v)
	}
	for {
		if off%4 != 0 || off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at offset %d", off)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		if b[off+110+namesize-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		off += 110 + namesize
		off += (4 - off%4) % 4
		if name == "TRAILER!!!" {
			return out, off
		}
		out = append(out, newcEntry{name, uint32(mode), b[off : off+size]})
		off += size
		off += (4 - off%4) % 4
	}
}

func TestNewcArchive(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("hello, guest\n"), 0o755); err != nil { // 13 bytes: padded
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("0123"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeNewc(&buf, map[string]string{"/usr/bin/softrnic": a, "/opt/x/y/data": b, "/top": b}); err != nil {
		t.Fatal(err)
	}
	got, n := readNewc(t, buf.Bytes())
	if n != buf.Len() {
		t.Errorf("archive is %d bytes, trailer ends at %d", buf.Len(), n)
	}
	want := []newcEntry{
		{"opt", 0o040755, nil}, {"opt/x", 0o040755, nil}, {"opt/x/y", 0o040755, nil}, {"opt/x/y/data", 0o100644, []byte("0123")},
		{"top", 0o100644, []byte("0123")},
		{"usr", 0o040755, nil}, {"usr/bin", 0o040755, nil}, {"usr/bin/softrnic", 0o100755, []byte("hello, guest\n")},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].name != want[i].name || got[i].mode != want[i].mode || !bytes.Equal(got[i].data, want[i].data) {
			t.Errorf("entry %d: %q %o %q, want %q %o %q", i, got[i].name, got[i].mode, got[i].data, want[i].name, want[i].mode, want[i].data)
		}
	}
	for _, bad := range []string{"rel/path", "/a/../b", "/"} {
		if err := writeNewc(&bytes.Buffer{}, map[string]string{bad: a}); err == nil {
			t.Errorf("guest path %q accepted", bad)
		}
	}

	// GNU cpio (which build-guest.sh uses for the image) must read it too.
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Logf("cpio not installed: GNU cpio cross-check not run (tests/interop/ci.sh installs it)")
		return
	}
	x := filepath.Join(dir, "x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-id", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = x, bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v\n%s", err, out)
	}
	if d, err := os.ReadFile(filepath.Join(x, "usr/bin/softrnic")); err != nil || string(d) != "hello, guest\n" {
		t.Errorf("cpio extracted %q, %v", d, err)
	}
	if st, err := os.Stat(filepath.Join(x, "usr/bin/softrnic")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("cpio extracted mode %v, %v", st.Mode(), err)
	}
}

// TestInitrdWithFiles: the copy is the original initrd (here a gzip stream of odd length),
// zeros to a 4-byte boundary, and the newc archive, which is what the kernel's
// unpack_to_rootfs walks: decompress, skip zeros, take an aligned "070701" header.
func TestInitrdWithFiles(t *testing.T) {
	dir := t.TempDir()
	for _, extra := range []int{0, 1, 2, 3} {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write([]byte("the image's own archive"))
		zw.Close()
		gz.Write(make([]byte, extra)) // vary the length mod 4 (zeros the kernel skips anyway)
		src, dst, f := filepath.Join(dir, "src"), filepath.Join(dir, "dst"), filepath.Join(dir, "f")
		os.WriteFile(src, gz.Bytes(), 0o644)
		os.WriteFile(f, []byte("x"), 0o600)
		if err := initrdWithFiles(src, dst, map[string]string{"/usr/bin/f": f}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(dst)
		if !bytes.Equal(b[:gz.Len()], gz.Bytes()) {
			t.Fatal("the copy does not start with the original initrd")
		}
		start := (gz.Len() + 3) &^ 3
		if !bytes.Equal(b[gz.Len():start], make([]byte, start-gz.Len())) {
			t.Fatalf("padding %x is not zeros", b[gz.Len():start])
		}
		got, n := readNewc(t, b[start:])
		if start+n != len(b) || len(got) != 3 || got[2].name != "usr/bin/f" || string(got[2].data) != "x" || got[2].mode != 0o100600 {
			t.Fatalf("appended archive: %+v (ends at %d of %d)", got, start+n, len(b))
		}
	}
}
