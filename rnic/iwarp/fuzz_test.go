package iwarp

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// FuzzReceive feeds arbitrary FPDU streams to a connected responder QP (after a valid
// MPA exchange and RTR): it must never panic, and must end in RTS or Error, never hang.
func FuzzReceive(f *testing.F) {
	tagged := make([]byte, ddp.TaggedLen)
	ddp.Tagged(tagged).Init(true, rdmap.Control(rdmap.OpWrite), 0x101, 0)
	untagged := make([]byte, ddp.UntaggedLen+rdmap.ReadRequestLen)
	ddp.Untagged(untagged).Init(true, rdmap.Control(rdmap.OpReadRequest), 0, 1, 1, 0)
	f.Add(mpa.AppendFPDU(nil, false, tagged, []byte("abc")))
	f.Add(mpa.AppendFPDU(nil, false, untagged))
	f.Add(mpa.AppendFPDU(nil, false, []byte{0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2}))
	f.Add([]byte{0, 1, 0xff, 0, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0x41, 0x47})
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := newSide(t, &pairOpts{})
		defer srv.dev.Close()
		mr, _ := srv.pd.RegMRAt(make([]byte, 4096), 0, allAccess)
		_ = mr
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{mr.SGE(0, 100)}})
		p := rawConnect(t, mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, srv, &Config{MPA: mpa.Config{Rev: 2, RTR: mpa.RTRWrite}})
		h := make([]byte, ddp.TaggedLen)
		ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 1, 0)
		_ = p.wr.WriteFPDU(h, nil)
		_ = p.nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = p.nc.Write(data)
		if tc, ok := p.nc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		select {
		case <-srv.qp.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("responder did not finish after the stream ended")
		}
	})
}

// FuzzListener feeds arbitrary bytes to a listener as the MPA Request: it must never
// panic; a well-formed request surfaces and can be rejected.
func FuzzListener(f *testing.F) {
	req, _ := mpa.Request(mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, []byte("hi"))
	f.Add(req.Append(nil))
	f.Add([]byte("MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10"))
	f.Add([]byte("MPA ID Rep Frame\x00\x01\x00\x00"))
	f.Add([]byte("MPA ID Req Frame\x00\x01\xff\xff"))
	d, _ := rnic.Open(rnic.Config{})
	defer d.Close()
	cfg := DefaultConfig()
	cfg.Timeout = time.Second
	ln, err := Listen(d, "127.0.0.1:0", cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Skip(err)
		}
		defer nc.Close()
		_, _ = nc.Write(data)
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if r, err := ln.Accept(ctx); err == nil {
			_ = r.Reject([]byte("no"))
		}
	})
}
