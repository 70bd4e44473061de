//go:build linux

package hostlink

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/netnstest"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// TestXDP: with --xdp both networks of a program run on one AF_XDP port (the Host
// opens it at the netdev's address when a transport names none) against kernel-socket
// peers in another namespace, and --pcap records the port's frames.
func TestXDP(t *testing.T) {
	netnstest.RequirePriv(t)
	e := netnstest.New(t, 1500, 1)
	file := filepath.Join(t.TempDir(), "x.pcapng")
	var h *Host
	netnstest.In(t, e.NS[0], func() {
		var err error
		if h, err = Open(Options{XDP: e.Dev[0], PCAP: file}); err != nil {
			t.Fatal(err)
		}
		// opened here, in the netdev's namespace: the first transport opens the port
		var co cm.Options
		local, err := h.CM(cm.IWARP, "", &co)
		if err != nil || local != e.Addr[0].String() || co.TCP == nil || co.Capture != nil {
			t.Fatalf("CM iwarp: %q %+v %v", local, co, err)
		}
	})
	for _, network := range []string{cm.IWARP, cm.RoCEv2} {
		var co cm.Options
		local, err := h.CM(network, e.Addr[0].String(), &co)
		if err != nil {
			t.Fatal(err)
		}
		x := openCM(t, network, local, &co)
		var k *cmEnd
		var ln *cm.Listener
		netnstest.In(t, e.NS[1], func() {
			k = openCM(t, network, e.Addr[1].String(), nil)
			if ln, err = k.tr.Listen(":0"); err != nil {
				t.Fatal(err)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		go func() {
			if r, err := ln.Accept(ctx); err == nil {
				_, _ = r.Accept(k.qp, cm.Param{})
			}
		}()
		c, err := x.tr.Dial(ctx, x.qp, net.JoinHostPort(e.Addr[1].String(), strconv.Itoa(ln.Port())), cm.Param{})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		x.write(t, k.end)
		_ = c.Disconnect(context.Background())
		ln.Close()
		x.tr.Close()
		k.tr.Close()
	}
	if _, err := h.CM(cm.IWARP, "10.9.9.9", &cm.Options{}); err == nil {
		t.Fatal("a second address on the port was accepted")
	}
	sum := h.Summary()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if s := h.Capture().Stats(); s.Written < 10 || s.Dropped != 0 {
		t.Fatalf("capture %+v", s)
	}
	if !bytes.Contains([]byte(sum), []byte("AF_XDP on "+e.Dev[0])) {
		t.Fatalf("summary %q", sum)
	}
}

type cmEnd struct {
	*end
	tr *cm.Transport
}

// openCM opens a device and a cm transport at local.
func openCM(t *testing.T, network, local string, o *cm.Options) *cmEnd {
	t.Helper()
	ip := local
	if h, _, err := net.SplitHostPort(local); err == nil {
		ip = h
	}
	d, err := rnic.Open(rnic.Config{LocalAddr: ip})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	go func() {
		for range d.Events() {
		}
	}()
	e := &end{dev: d, buf: bytes.Repeat([]byte("afxdp!"), 2000)}
	pd, _ := d.AllocPD()
	e.cq, _ = d.CreateCQ(16)
	if e.qp, err = d.CreateQP(pd, rnic.QPAttr{SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegMR(e.buf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	tr, err := cm.Open(d, network, local, o)
	if err != nil {
		t.Fatal(err)
	}
	return &cmEnd{end: e, tr: tr}
}
