package hostlink

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/softrnic/softrnic/link/afxdp"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

func TestArgAndFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		n    int
		want Options
		err  bool
	}{
		{[]string{"--xdp", "eth0", "-x"}, 2, Options{XDP: "eth0"}, false},
		{[]string{"-xdp=tap0"}, 1, Options{XDP: "tap0"}, false},
		{[]string{"--pcap", "/tmp/a.pcapng"}, 2, Options{PCAP: "/tmp/a.pcapng"}, false},
		{[]string{"--xdp-mode", "generic"}, 2, Options{XDPMode: afxdp.ModeGeneric}, false},
		{[]string{"--xdp-mode=native"}, 0, Options{}, true},
		{[]string{"--pcap"}, 0, Options{}, true},
		{[]string{"--udp-offload", "gso"}, 2, Options{UDPOffload: "gso"}, false},
		{[]string{"--udp-offload=gro,gso"}, 1, Options{UDPOffload: "gro,gso"}, false},
		{[]string{"--udp-offload", "tso"}, 0, Options{}, true},
		{[]string{"-s"}, 0, Options{}, false},
		{[]string{"xdp"}, 0, Options{}, false},
		{nil, 0, Options{}, false},
	} {
		var o Options
		n, err := o.Arg(tc.args)
		if n != tc.n || (err != nil) != tc.err || o != tc.want {
			t.Errorf("%q: %d %+v %v", tc.args, n, o, err)
		}
	}
	var o Options
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Flag(fs)
	if err := fs.Parse([]string{"-xdp", "veth0", "-xdp-mode", "driver", "-pcap", "f"}); err != nil || o != (Options{XDP: "veth0", XDPMode: afxdp.ModeDriver, PCAP: "f"}) {
		t.Fatalf("%+v %v", o, err)
	}
	if err := fs.Parse([]string{"-xdp-mode", "x"}); err == nil {
		t.Fatal("bad -xdp-mode accepted")
	}
}

// TestKernelCapture: without --xdp the Host hands out the kernel's sockets, recorded
// with --pcap: rnic/iwarp's listener and dialer and rnic/cm's transports.
func TestKernelCapture(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.pcapng")
	h, err := Open(Options{PCAP: file})
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := newEnd(t), newEnd(t)
	ln, err := h.IWARPListen(srv.dev, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, err := h.IWARPConfig(cli.dev, nil)
	if err != nil || cfg.Dial == nil {
		t.Fatalf("IWARPConfig: %+v %v", cfg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if r, err := ln.Accept(ctx); err == nil {
			_, _ = r.Accept(srv.qp, iwarp.ConnParam{})
		}
	}()
	if _, err := iwarp.Dial(ctx, cli.qp, ln.Addr().String(), cfg, iwarp.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	cli.write(t, srv)
	// rnic/cm: the Options carry the capture; the address is unchanged
	var co cm.Options
	if local, err := h.CM(cm.IWARP, "127.0.0.1", &co); err != nil || local != "127.0.0.1" || co.Capture != h.Capture() || co.TCP != nil {
		t.Fatalf("CM: %q %+v %v", local, co, err)
	}
	l, err := h.RoCELink(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	cli.qp.Disconnect()
	<-srv.qp.Done()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if s := h.Capture().Stats(); s.Written < 4 || s.Dropped != 0 {
		t.Fatalf("capture %+v", s)
	}
	if h.Summary() == "" {
		t.Fatal("no summary")
	}
}

// end is a device with a QP and a region.
type end struct {
	dev *rnic.Device
	qp  *rnic.QP
	cq  *rnic.CQ
	mr  *rnic.MR
	buf []byte
}

func newEnd(t *testing.T) *end {
	t.Helper()
	d, err := rnic.Open(rnic.Config{LocalAddr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	go func() {
		for range d.Events() {
		}
	}()
	e := &end{dev: d, buf: bytes.Repeat([]byte("softrnic"), 1024)}
	pd, _ := d.AllocPD()
	e.cq, _ = d.CreateCQ(16)
	if e.qp, err = d.CreateQP(pd, rnic.QPAttr{SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegMR(e.buf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return e
}

// write RDMA WRITEs e's region into to's and waits for its completion.
func (e *end) write(t *testing.T, to *end) {
	t.Helper()
	if err := e.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{e.mr.SGE(0, len(e.buf))},
		RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rnic.Completion
	if _, err := e.cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != rnic.StatusSuccess {
		t.Fatalf("write: %v %+v", err, wc[0])
	}
}

// TestUDPOffloadOverride: --udp-offload overrides the RoCEv2 UDP link's automatic GSO
// and GRO, for the daemon's link (RoCELink) and the tools' (CM's cm.Options.UDP).
func TestUDPOffloadOverride(t *testing.T) {
	for _, tc := range []struct {
		v        string
		gso, gro bool
	}{{"", true, true}, {"auto", true, true}, {"none", false, false}, {"gso", true, false}, {"gro", false, true}} {
		h, err := Open(Options{UDPOffload: tc.v})
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.RoCELink(netip.MustParseAddrPort("127.0.0.1:0"), nil)
		if err != nil {
			t.Fatal(err)
		}
		u := l.(*rocev2.UDPLink)
		if u.GSO() != tc.gso || u.GRO() != tc.gro {
			t.Errorf("--udp-offload %q: GSO %v GRO %v, want %v %v", tc.v, u.GSO(), u.GRO(), tc.gso, tc.gro)
		}
		l.Close()
		var co cm.Options
		if _, err := h.CM(cm.RoCEv2, "127.0.0.1", &co); err != nil {
			t.Fatal(err)
		}
		if want, _ := udpOptions(tc.v); (co.UDP == nil) != (want == nil) || want != nil && *co.UDP != *want {
			t.Errorf("--udp-offload %q: cm.Options.UDP %+v", tc.v, co.UDP)
		}
		h.Close()
	}
}
