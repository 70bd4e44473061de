//go:build linux

package steer

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softrnic/softrnic/rnic/rocev2"
)

func TestSendRecvFiles(t *testing.T) {
	for _, typ := range []struct {
		name string
		typ  int
	}{{"stream", unix.SOCK_STREAM}, {"seqpacket", unix.SOCK_SEQPACKET}} {
		t.Run(typ.name, func(t *testing.T) {
			a, b := unixPair(t, typ.typ)
			defer a.Close()
			defer b.Close()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := SendFiles(a, []byte("two"), r, w); err != nil {
				t.Fatal(err)
			}
			r.Close()
			w.Close()
			msg := make([]byte, 3)
			n, files, err := RecvFiles(b, msg)
			if err != nil || n != 3 || string(msg) != "two" || len(files) != 2 {
				t.Fatalf("RecvFiles: %d %q %d files %v", n, msg[:n], len(files), err)
			}
			defer files[0].Close()
			// the received descriptors are the pipe, and close-on-exec
			for _, f := range files {
				fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
				if err != nil || fl&unix.FD_CLOEXEC == 0 {
					t.Errorf("received descriptor flags %#x, %v: want FD_CLOEXEC", fl, err)
				}
			}
			if _, err := files[1].Write([]byte("through")); err != nil {
				t.Fatal(err)
			}
			files[1].Close()
			got, err := io.ReadAll(files[0])
			if err != nil || string(got) != "through" {
				t.Fatalf("read %q, %v", got, err)
			}
		})
	}
}

func TestSendFilesRefuses(t *testing.T) {
	a, b := unixPair(t, unix.SOCK_SEQPACKET)
	defer a.Close()
	defer b.Close()
	if err := SendFiles(a, nil, os.Stdin); err == nil {
		t.Error("SendFiles with an empty message succeeded")
	}
	if err := SendFiles(a, []byte("x")); err == nil {
		t.Error("SendFiles without descriptors succeeded")
	}
	many := make([]*os.File, MaxFiles+1)
	for i := range many {
		many[i] = os.Stdin
	}
	if err := SendFiles(a, []byte("x"), many...); err == nil {
		t.Error("SendFiles with too many descriptors succeeded")
	}
}

func TestRecvFilesTruncated(t *testing.T) {
	t.Run("message", func(t *testing.T) {
		a, b := unixPair(t, unix.SOCK_SEQPACKET)
		defer a.Close()
		defer b.Close()
		if err := SendFiles(a, []byte("a long message"), os.Stdin); err != nil {
			t.Fatal(err)
		}
		if _, files, err := RecvFiles(b, make([]byte, 4)); !errors.Is(err, ErrTruncated) || files != nil {
			t.Fatalf("RecvFiles of a long message: %d files, %v", len(files), err)
		}
	})
	t.Run("descriptors", func(t *testing.T) {
		a, b := unixPair(t, unix.SOCK_SEQPACKET)
		defer a.Close()
		defer b.Close()
		fds := make([]int, MaxFiles+1)
		for i := range fds {
			fds[i] = int(os.Stdin.Fd())
		}
		if _, _, err := a.WriteMsgUnix([]byte("x"), unix.UnixRights(fds...), nil); err != nil {
			t.Fatal(err)
		}
		if _, files, err := RecvFiles(b, make([]byte, 4)); !errors.Is(err, ErrTruncated) || files != nil {
			t.Fatalf("RecvFiles of %d descriptors: %d files, %v", len(fds), len(files), err)
		}
	})
}

func TestJoinRefuses(t *testing.T) {
	if _, err := Join(nil, nil); err == nil {
		t.Error("Join of no descriptors succeeded")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := Join([]*os.File{r}, nil); err == nil {
		t.Error("Join of a pipe succeeded")
	}
	a, b := unixPair(t, unix.SOCK_SEQPACKET)
	defer a.Close()
	defer b.Close()
	af, _ := a.File()
	defer af.Close()
	if _, err := Join([]*os.File{af}, nil); err == nil {
		t.Error("Join of a unix socket as a UDP socket succeeded")
	}
	if _, err := Join([]*os.File{af, r}, nil); err == nil {
		t.Error("Join of a relay without a UDP socket succeeded")
	}
}

func TestNewUDPLinkFile(t *testing.T) {
	unbound, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	uf := os.NewFile(uintptr(unbound), "unbound")
	defer uf.Close()
	if _, err := rocev2.NewUDPLinkFile(uf, nil); !errors.Is(err, rocev2.ErrNotUDPSocket) {
		t.Errorf("unbound socket: %v", err)
	}
	wild, err := bindUDP(netip.MustParseAddrPort("0.0.0.0:0"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	if _, err := rocev2.NewUDPLinkFile(wild, nil); !errors.Is(err, rocev2.ErrUnspecifiedAddr) {
		t.Errorf("wildcard socket: %v", err)
	}
	good, err := bindUDP(netip.MustParseAddrPort("127.0.0.1:0"), false)
	if err != nil {
		t.Fatal(err)
	}
	l, err := rocev2.NewUDPLinkFile(good, &rocev2.UDPOptions{Batch: 8})
	good.Close() // the link has its own descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.BatchSize() != 8 || !l.LocalAddr().Addr().IsLoopback() || l.LocalAddr().Port() == 0 {
		t.Fatalf("link batch %d addr %v", l.BatchSize(), l.LocalAddr())
	}
	// it moves datagrams after the file is closed
	if err := l.Send([][]byte{packet(5, 1)}, l.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	ch := make(chan arrival, 1)
	go collect(l, "self", ch)
	expect(t, ch, "self", 1, l.LocalAddr())
}
