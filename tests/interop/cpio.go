package interop

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// Extra files for the guest (Options.Files). Linux unpacks an initramfs made of several
// cpio archives one after the other, each compressed or not (init/initramfs.c,
// unpack_to_rootfs): after the build's gzip-compressed archive it skips zero bytes and takes
// an uncompressed newc archive that starts on a 4-byte boundary. Boot therefore copies the
// initrd into the run directory, pads it with zeros to a multiple of 4 and appends a newc
// archive written here; entries unpack over the first archive's (an existing directory is
// kept, an existing file replaced).

// writeNewc writes a newc ("070701") cpio archive holding the host files of files (guest
// path → host path), with their parent directories (mode 0755) and the host files' modes
// (permission bits), owned by root, then the trailer.
func writeNewc(w io.Writer, files map[string]string) error {
	bw := bufio.NewWriter(w)
	ino := 1
	header := func(name string, mode uint32, size int64) error {
		// 6 bytes of magic, 13 fields of 8 hex digits: ino, mode, uid, gid, nlink, mtime,
		// filesize, devmajor, devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
		nlink := 1
		if mode&0o170000 == 0o040000 {
			nlink = 2
		}
		if _, err := fmt.Fprintf(bw, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\x00",
			ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0, name); err != nil {
			return err
		}
		ino++
		return pad(bw, 110+len(name)+1)
	}
	guests := make([]string, 0, len(files))
	for g := range files {
		if !path.IsAbs(g) || path.Clean(g) != g || g == "/" {
			return fmt.Errorf("guest path %q: want a clean absolute file path", g)
		}
		guests = append(guests, g)
	}
	slices.Sort(guests)
	dirs := map[string]bool{}
	for _, g := range guests {
		// Parents first, outermost first: the kernel creates each entry in order and does not
		// make missing parents.
		var parents []string
		for d := path.Dir(g); d != "/"; d = path.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := header(strings.TrimPrefix(d, "/"), 0o040755, 0); err != nil {
				return err
			}
		}
		f, err := os.Open(files[g])
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return fmt.Errorf("%s: not a regular file (%v)", files[g], err)
		}
		if err := header(strings.TrimPrefix(g, "/"), 0o100000|uint32(st.Mode().Perm()), st.Size()); err != nil {
			f.Close()
			return err
		}
		n, err := io.Copy(bw, f)
		f.Close()
		if err != nil {
			return err
		}
		if n != st.Size() {
			return fmt.Errorf("%s changed size while archiving (%d, then %d bytes)", files[g], st.Size(), n)
		}
		if err := pad(bw, int(n)); err != nil {
			return err
		}
	}
	if err := header("TRAILER!!!", 0, 0); err != nil {
		return err
	}
	return bw.Flush()
}

// pad writes the zeros that bring n written bytes to a multiple of 4.
func pad(w io.Writer, n int) error {
	_, err := w.Write(make([]byte, (4-n%4)%4))
	return err
}

// initrdWithFiles writes to dst a copy of the initrd src, zero-padded to a multiple of 4
// bytes, followed by a newc archive of files.
func initrdWithFiles(src, dst string, files map[string]string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = pad(out, int(n%4))
	}
	if err == nil {
		err = writeNewc(out, files)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
