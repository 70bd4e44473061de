package cm

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// countingTCP is a TCPStack over the kernel's TCP that counts its use and hands out
// connections that are not *net.TCPConn.
type countingTCP struct{ listens, dials atomic.Int32 }

type plainConn struct{ net.Conn }

type plainListener struct{ net.Listener }

func (l plainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return plainConn{c}, nil
}

func (s *countingTCP) Listen(network, address string) (net.Listener, error) {
	s.listens.Add(1)
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return plainListener{l}, nil
}

func (s *countingTCP) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	s.dials.Add(1)
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return plainConn{c}, nil
}

// transfer WRITEs 4 KiB from cli to srv's region and reads it back.
func transfer(t *testing.T, srv, cli *node) {
	t.Helper()
	sc, cc := connect(t, srv, cli, []byte("hi"), []byte("ho"))
	copy(cli.buf[:4096], bytes.Repeat([]byte("x"), 4096))
	rb := srv.mr.RemoteBuffer(0, 4096)
	for i, op := range []rnic.Opcode{rnic.OpWrite, rnic.OpRead} {
		off := 4096 * i
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: op, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cli.mr.SGE(off, 4096)}, RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
			t.Fatal(err)
		}
		if c := cli.wait(t); c.Status != rnic.StatusSuccess {
			t.Fatalf("%v: %+v", op, c)
		}
	}
	if !bytes.Equal(cli.buf[4096:8192], cli.buf[:4096]) {
		t.Fatal("data read back differ")
	}
	if err := cc.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	<-sc.Done()
}

// TestTCPStackOption: Options.TCP carries iWARP's listeners and dials.
func TestTCPStackOption(t *testing.T) {
	var s countingTCP
	o := &Options{TCP: &s}
	srv, cli := newNodeWith(t, IWARP, "127.0.0.1", o), newNodeWith(t, IWARP, "127.0.0.1", o)
	transfer(t, srv, cli)
	if s.listens.Load() != 1 || s.dials.Load() != 1 {
		t.Fatalf("stack used for %d listens, %d dials", s.listens.Load(), s.dials.Load())
	}
}

// TestCaptureOption: Options.Capture records both networks' traffic.
func TestCaptureOption(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			var out bytes.Buffer
			w, err := capture.New(&out, nil)
			if err != nil {
				t.Fatal(err)
			}
			var so, co Options
			so.Capture = w
			if network == RoCEv2 {
				mem := rocev2.NewMemNet()
				for _, x := range []struct {
					o  *Options
					ip string
				}{{&so, "127.0.0.1"}, {&co, "127.0.0.2"}} {
					if x.o.Link, err = mem.NewLink(netip.AddrPortFrom(netip.MustParseAddr(x.ip), 4791), rocev2.Faults{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			srv := newNodeWith(t, network, "127.0.0.1", &so)
			cli := newNodeWith(t, network, map[string]string{IWARP: "127.0.0.1", RoCEv2: "127.0.0.2"}[network], &co)
			transfer(t, srv, cli)
			srv.tr.Close()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// the MPA Request and Reply, the WRITE, the READ request and response at
			// least (RoCEv2: CM MADs, WRITE, ACK, READ request and response)
			if st := w.Stats(); st.Written < 5 || st.Dropped != 0 {
				t.Fatalf("capture %+v", st)
			}
		})
	}
}
