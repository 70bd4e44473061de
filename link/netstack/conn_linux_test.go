//go:build linux

package netstack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"golang.org/x/sys/unix"
)

// dialPair connects the stack to a kernel listener and returns both ends.
func dialPair(t *testing.T, r *rig) (uc, kc net.Conn) {
	t.Helper()
	kl := r.kernelListen(t, false)
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := kl.Accept()
		acc <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uc, err := r.st.DialContext(ctx, "tcp", kl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if kc = <-acc; kc == nil {
		t.Fatal("kernel accept failed")
	}
	t.Cleanup(func() { uc.Close(); kc.Close() })
	return uc, kc
}

// TestConnSemantics: the stack's connection behaves as a kernel one where rnic/iwarp
// looks — vectored reads and writes, deadlines, Close waking a blocked Read, half
// close, reset on SetLinger(0), errno-carrying errors, the MSS — without allocating on
// reads and writes.
func TestConnSemantics(t *testing.T) {
	r := newRig(t, 0, false)
	uc, kc := dialPair(t, r)
	c := uc.(*conn)
	// 1500 - 20 - 20 - 40: gVisor leaves room for timestamps and 3 SACK blocks
	if got := c.MSS(); got != 1420 {
		t.Errorf("MSS %d, want 1420", got)
	}

	// WriteVectored: one write of many pieces arrives whole and in order.
	pieces := [][]byte{[]byte("hdr:"), pattern(5000, 3), {}, []byte(":crc")}
	want := bytes.Join(pieces, nil)
	var vw mpa.VectoredWriter = c
	if n, err := vw.WriteVectored(pieces); err != nil || n != int64(len(want)) {
		t.Fatalf("WriteVectored: %d, %v", n, err)
	}
	got := make([]byte, len(want))
	_ = kc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(kc, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("kernel read: %v, equal %v", err, bytes.Equal(got, want))
	}

	// ReadVectored: what is queued fills the buffers in order, in one call once all
	// of it is queued.
	if _, err := kc.Write(want); err != nil {
		t.Fatal(err)
	}
	a, b := make([]byte, 7), make([]byte, len(want)-7)
	for n := 0; n < len(want); {
		k, err := c.ReadVectored([][]byte{a[min(n, len(a)):], b[max(n-len(a), 0):]})
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if !bytes.Equal(append(a, b...), want) {
		t.Fatal("ReadVectored: bytes differ")
	}

	// No allocation per Read or Write once connected (AllocsPerRun counts the whole
	// process, gVisor's goroutines included, averaged down: gonet's Read and Write
	// allocate a reader, a writer and a wait channel per round trip).
	buf := make([]byte, 64)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := kc.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(kc, buf); err != nil {
			t.Fatal(err)
		}
	}); n > 0 && !raceEnabled {
		t.Errorf("%.1f allocations per round trip on the stack's side and the kernel's", n)
	}

	// A read deadline.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	var ne net.Error
	_ = c.SetReadDeadline(time.Time{})
	// Half close: the kernel reads EOF, and can still send.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.Read(buf); err != io.EOF {
		t.Fatalf("kernel read after CloseWrite: %v", err)
	}
	if _, err := c.Write(buf); !errors.Is(err, unix.EPIPE) || !errors.As(err, &ne) {
		t.Fatalf("write after CloseWrite: %v", err)
	}
	if _, err := kc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); n != 1 || err != nil {
		t.Fatalf("read after CloseWrite: %d, %v", n, err)
	}
	// Close wakes a blocked Read with net.ErrClosed.
	rerr := make(chan error, 1)
	go func() {
		_, err := c.Read(buf)
		rerr <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it block (the result is the same if not)
	c.Close()
	select {
	case err := <-rerr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read across Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake a blocked Read")
	}

	// SetLinger(0): Close resets; the kernel sees ECONNRESET.
	uc2, kc2 := dialPair(t, r)
	if err := uc2.(*conn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	uc2.Close()
	_ = kc2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := kc2.Read(buf); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("kernel read after an abortive close: %v", err)
	}
	// and the other way: a kernel reset reaches the stack's Read as ECONNRESET
	uc3, kc3 := dialPair(t, r)
	_ = kc3.(*net.TCPConn).SetLinger(0)
	kc3.Close()
	_ = uc3.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := uc3.Read(buf); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("read after the kernel's reset: %v", err)
	}
}
