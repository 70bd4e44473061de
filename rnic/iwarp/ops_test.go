package iwarp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

const testMULPDU = 1024

func smallCfg() *Config {
	c := DefaultConfig()
	c.MULPDU = testMULPDU
	c.Extensions = true
	return c
}

func sizesFor(hdr int) []int {
	per := testMULPDU - hdr
	return []int{0, 1, per - 1, per, per + 1, 3*per + 5, 1 << 20}
}

// sgl splits n bytes at off of mr into k SGEs of uneven sizes.
func sgl(mr *rnic.MR, off, n, k int) []rnic.SGE {
	if k == 1 || n < k {
		return []rnic.SGE{mr.SGE(off, n)}
	}
	var s []rnic.SGE
	rem := n
	for i := 0; i < k; i++ {
		l := rem / (k - i)
		if i == 0 {
			l = rem / (2 * k)
		}
		if i == k-1 {
			l = rem
		}
		s = append(s, mr.SGE(off, l))
		off += l
		rem -= l
	}
	return s
}

func TestOperations(t *testing.T) {
	noLeak(t)
	o := &pairOpts{cli: smallCfg(), srv: smallCfg(), cap: rnic.QPCap{MaxSendSGE: 4, MaxRecvSGE: 4}}
	cli, srv := newPair(t, o)
	const max = 1<<20 + 64
	cmr, cbuf := cli.reg(t, max, allAccess)
	smr, sbuf := srv.reg(t, max, allAccess)
	for _, sges := range []int{1, 3} {
		for _, op := range []string{"send", "write", "read"} {
			hdr := ddp.TaggedLen
			if op == "send" {
				hdr = ddp.UntaggedLen
			}
			for i, n := range sizesFor(hdr) {
				t.Run(fmt.Sprintf("%s/%dsge/%d", op, sges, n), func(t *testing.T) {
					fill(cbuf[:n], uint64(n+i))
					fill(sbuf[:n], uint64(n+i+99))
					clear(sbuf[n : n+16])
					clear(cbuf[n : n+16])
					settle(t, cli, srv)
					switch op {
					case "send":
						if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 5, SGL: sgl(smr, 0, n+16, sges)}); err != nil {
							t.Fatal(err)
						}
						if err := cli.qp.PostSend(&rnic.SendWR{WRID: 6, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: sgl(cmr, 0, n, sges)}); err != nil {
							t.Fatal(err)
						}
						expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
						c := wait(t, srv.rcq)
						expect(t, c, rnic.WCRecv, rnic.StatusSuccess)
						if c.ByteLen != uint32(n) || c.WRID != 5 {
							t.Fatalf("recv %+v", c)
						}
						if !bytes.Equal(sbuf[:n], cbuf[:n]) {
							t.Fatal("data mismatch")
						}
					case "write":
						if err := cli.qp.PostSend(&rnic.SendWR{WRID: 6, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: sgl(cmr, 0, n, sges),
							RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
							t.Fatal(err)
						}
						expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
						settle(t, cli, srv)
						if !bytes.Equal(sbuf[:n], cbuf[:n]) {
							t.Fatal("data mismatch")
						}
					case "read":
						if err := cli.qp.PostSend(&rnic.SendWR{WRID: 8, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: sgl(cmr, 0, n, sges),
							RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
							t.Fatal(err)
						}
						c := wait(t, cli.scq)
						expect(t, c, rnic.WCRead, rnic.StatusSuccess)
						if c.ByteLen != uint32(n) || !bytes.Equal(sbuf[:n], cbuf[:n]) {
							t.Fatal("data mismatch")
						}
					}
					if sbuf[n] != 0 || cbuf[n] != 0 {
						t.Fatal("wrote past the end")
					}
				})
			}
		}
	}
	st := cli.qp.Counters().Snapshot()
	if st.TxSegments == 0 || st.RxBytes == 0 || cli.dev.Counters().Snapshot().TxBytes != st.TxBytes {
		t.Fatalf("counters %+v", st)
	}
}

func TestSendVariants(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, &pairOpts{cli: smallCfg(), srv: smallCfg()})
	cmr, _ := cli.reg(t, 64, allAccess)
	smr, _ := srv.reg(t, 64, allAccess)
	target, _ := srv.reg(t, 64, allAccess)

	// Solicited event: an armed-for-solicited CQ fires only on SE.
	srv.rcq.Arm(true)
	for i := 0; i < 2; i++ {
		if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{smr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, SGL: []rnic.SGE{cmr.SGE(0, 8)}})
	c := wait(t, srv.rcq)
	if c.Flags&rnic.WCSolicited != 0 {
		t.Fatal("unexpected SE")
	}
	select {
	case <-srv.rcq.C():
		t.Fatal("solicited-armed CQ fired for a plain Send")
	default:
	}
	srv.rcq.Arm(true)
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Solicited, SGL: []rnic.SGE{cmr.SGE(0, 8)}})
	<-srv.rcq.C()
	c = wait(t, srv.rcq)
	if c.Flags&rnic.WCSolicited == 0 {
		t.Fatalf("no SE flag: %+v", c)
	}
	// No completion for unsignaled sends: the cli send CQ must be empty.
	if n := cli.scq.Len(); n != 0 {
		t.Fatalf("%d completions for unsignaled sends", n)
	}

	// Send with Invalidate (and SE) invalidates the server's region.
	for _, se := range []bool{false, true} {
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 9, SGL: []rnic.SGE{smr.SGE(0, 64)}})
		fl := rnic.Signaled
		if se {
			fl |= rnic.Solicited
		}
		tg := target
		if se {
			tg, _ = srv.reg(t, 64, allAccess)
		}
		_ = cli.qp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpSendInv, Flags: fl, InvalidateSTag: tg.RKey(), SGL: []rnic.SGE{cmr.SGE(0, 4)}})
		expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
		c = wait(t, srv.rcq)
		if c.Flags&rnic.WCWithInv == 0 || c.InvalidatedSTag != tg.RKey() || tg.Valid() || (c.Flags&rnic.WCSolicited != 0) != se {
			t.Fatalf("send-inv: %+v valid=%v", c, tg.Valid())
		}
	}

	// Inline data: the buffer may be reused as soon as PostSend returns.
	imr, ib := cli.reg(t, 32, allAccess)
	copy(ib, "inline payload")
	inl, _ := srv.reg(t, 64, allAccess)
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 13, SGL: []rnic.SGE{inl.SGE(0, 64)}})
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 14, Opcode: rnic.OpSend, Flags: rnic.Inline | rnic.Signaled, SGL: []rnic.SGE{imr.SGE(0, 14)}}); err != nil {
		t.Fatal(err)
	}
	copy(ib, "XXXXXXXXXXXXXX")
	expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
	if c := wait(t, srv.rcq); c.ByteLen != 14 || string(sbuf0(srv, inl)[:14]) != "inline payload" {
		t.Fatalf("inline: %+v", c)
	}
	if err := cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Inline, SGL: []rnic.SGE{imr.SGE(0, 32), imr.SGE(0, 32), imr.SGE(0, 32)}}); !errors.Is(err, rnic.ErrInlineTooLong) {
		t.Fatalf("96 bytes inline with MaxInline 64: %v", err)
	}

	// Immediate data (RFC 7306): Write with immediate and immediate alone.
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 10})
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 11})
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 4, Opcode: rnic.OpWriteImm, Flags: rnic.Signaled, Imm: 0xdeadbeef,
		SGL: []rnic.SGE{cmr.SGE(0, 16)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
	c = wait(t, srv.rcq)
	if c.Opcode != rnic.WCRecvRDMAWithImm || c.Imm != 0xdeadbeef || c.Flags&rnic.WCWithImm == 0 {
		t.Fatalf("write-imm: %+v", c)
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 5, Opcode: rnic.OpSendImm, Flags: rnic.Signaled, Imm: 42})
	expect(t, wait(t, cli.scq), rnic.WCSend, rnic.StatusSuccess)
	c = wait(t, srv.rcq)
	if c.Opcode != rnic.WCRecv || c.Imm != 42 || c.WRID != 11 {
		t.Fatalf("imm: %+v", c)
	}

	// Atomics (RFC 7306).
	amr, abuf := srv.reg(t, 16, allAccess)
	binary.NativeEndian.PutUint64(abuf, 100)
	res, rbuf := cli.reg(t, 8, allAccess)
	settle(t, cli, srv)
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 6, Opcode: rnic.OpAtomicFetchAdd, Flags: rnic.Signaled, Compare: 5,
		SGL: []rnic.SGE{res.SGE(0, 8)}, RemoteAddr: amr.Addr(), RKey: amr.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCFetchAdd, rnic.StatusSuccess)
	settle(t, cli, srv)
	if binary.NativeEndian.Uint64(rbuf) != 100 || binary.NativeEndian.Uint64(abuf) != 105 {
		t.Fatal("fetch-add")
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 7, Opcode: rnic.OpAtomicCmpSwap, Flags: rnic.Signaled, Compare: 105, Swap: 7,
		SGL: []rnic.SGE{res.SGE(0, 8)}, RemoteAddr: amr.Addr(), RKey: amr.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCCmpSwap, rnic.StatusSuccess)
	settle(t, cli, srv)
	if binary.NativeEndian.Uint64(rbuf) != 105 || binary.NativeEndian.Uint64(abuf) != 7 {
		t.Fatal("cmp-swap")
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 8, Opcode: rnic.OpAtomicCmpSwap, Flags: rnic.Signaled, Compare: 1, Swap: 9,
		SGL: []rnic.SGE{res.SGE(0, 8)}, RemoteAddr: amr.Addr(), RKey: amr.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCCmpSwap, rnic.StatusSuccess)
	settle(t, cli, srv)
	if binary.NativeEndian.Uint64(rbuf) != 7 || binary.NativeEndian.Uint64(abuf) != 7 {
		t.Fatal("cmp-swap mismatch must not swap")
	}

	// Fences and ORD: many reads then a read-fenced send; all complete in order.
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 12, SGL: []rnic.SGE{smr.SGE(0, 64)}})
	for i := 0; i < 40; i++ {
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(100 + i), Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{cmr.SGE(0, 32)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 200, Opcode: rnic.OpSend, Flags: rnic.Signaled | rnic.Fence | rnic.LocalFence, SGL: []rnic.SGE{cmr.SGE(0, 4)}})
	for i := 0; i < 40; i++ {
		c := wait(t, cli.scq)
		if c.WRID != uint64(100+i) || c.Status != rnic.StatusSuccess {
			t.Fatalf("read %d: %+v", i, c)
		}
	}
	if c := wait(t, cli.scq); c.WRID != 200 {
		t.Fatalf("fenced send: %+v", c)
	}
	wait(t, srv.rcq)
}

func TestMemoryWindowsAndFastReg(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, &pairOpts{cli: smallCfg(), srv: smallCfg()})
	cmr, cbuf := cli.reg(t, 256, allAccess)
	fill(cbuf, 3)
	base, bbuf := srv.reg(t, 4096, allAccess)

	// Type 2 window bound by WR on the server QP, then written by the client.
	mw, err := srv.pd.AllocMW(2)
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpBindMW, Flags: rnic.Signaled,
		Bind: rnic.BindInfo{MW: mw, MR: base, Addr: base.Addr() + 1024, Length: 512, Access: rnic.AccessRemoteWrite | rnic.AccessRemoteRead, Key: 9}})
	expect(t, wait(t, srv.scq), rnic.WCBindMW, rnic.StatusSuccess)
	if mw.RKey()&0xff != 9 || !mw.Valid() {
		t.Fatal("bind")
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 256)},
		RemoteAddr: base.Addr() + 1024 + 100, RKey: mw.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCWrite, rnic.StatusSuccess)
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 3, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 8)},
		RemoteAddr: base.Addr() + 1024, RKey: mw.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
	settle(t, cli, srv)
	if !bytes.Equal(bbuf[1124+8:1124+256], cbuf[8:256]) {
		t.Fatal("window write")
	}
	// Remote invalidate (Send with Invalidate) of the type 2 window, then rebind it.
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 40})
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 41, Opcode: rnic.OpSendInv, InvalidateSTag: mw.RKey()})
	if c := wait(t, srv.rcq); c.Flags&rnic.WCWithInv == 0 || c.InvalidatedSTag != mw.RKey() || mw.Valid() {
		t.Fatalf("remote invalidate of a type 2 window: %+v", c)
	}
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 42, Opcode: rnic.OpBindMW, Flags: rnic.Signaled,
		Bind: rnic.BindInfo{MW: mw, MR: base, Addr: base.Addr() + 1024, Length: 512, Access: rnic.AccessRemoteWrite | rnic.AccessRemoteRead, Key: 10}})
	expect(t, wait(t, srv.scq), rnic.WCBindMW, rnic.StatusSuccess)

	// Local invalidate of the window.
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 4, Opcode: rnic.OpLocalInv, Flags: rnic.Signaled, InvalidateSTag: mw.RKey()})
	expect(t, wait(t, srv.scq), rnic.WCLocalInv, rnic.StatusSuccess)
	if mw.Valid() {
		t.Fatal("window still valid")
	}

	// Fast register a region, use it remotely, invalidate it.
	fr, err := srv.pd.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 1000)
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 5, Opcode: rnic.OpRegMR, Flags: rnic.Signaled,
		Reg: rnic.RegInfo{MR: fr, Buf: mem, IOVA: 0x10000, Access: rnic.AccessLocalWrite | rnic.AccessRemoteWrite | rnic.AccessRemoteRead, Key: 0x42}})
	expect(t, wait(t, srv.scq), rnic.WCRegMR, rnic.StatusSuccess)
	if fr.RKey()&0xff != 0x42 || fr.Addr() != 0x10000 {
		t.Fatal("fast reg")
	}
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 6, Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 100)}, RemoteAddr: 0x10000 + 900, RKey: fr.RKey()})
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 7, Opcode: rnic.OpRead, Flags: rnic.Signaled, RemoteAddr: 0x10000, RKey: fr.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
	settle(t, cli, srv)
	if !bytes.Equal(mem[900:], cbuf[:100]) {
		t.Fatal("fast-reg write")
	}
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 8, Opcode: rnic.OpLocalInv, Flags: rnic.Signaled | rnic.LocalFence, InvalidateSTag: fr.RKey()})
	expect(t, wait(t, srv.scq), rnic.WCLocalInv, rnic.StatusSuccess)
	if fr.Valid() {
		t.Fatal("fast-reg region still valid")
	}

	// Type 1 window bound via WR; a Send with Invalidate of it fails remotely.
	mw1, _ := srv.pd.AllocMW(1)
	_ = srv.qp.PostSend(&rnic.SendWR{WRID: 9, Opcode: rnic.OpBindMW, Flags: rnic.Signaled,
		Bind: rnic.BindInfo{MW: mw1, MR: base, Addr: base.Addr(), Length: 64, Access: rnic.AccessRemoteRead}})
	expect(t, wait(t, srv.scq), rnic.WCBindMW, rnic.StatusSuccess)
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 10, Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{cmr.SGE(0, 64)}, RemoteAddr: base.Addr(), RKey: mw1.RKey()})
	expect(t, wait(t, cli.scq), rnic.WCRead, rnic.StatusSuccess)
	// Writing through a read-only window is refused.
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 11, Opcode: rnic.OpWrite, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: base.Addr(), RKey: mw1.RKey()})
	e := waitEvent(t, cli.dev, rnic.EventQPAccessErr)
	var te *TermError
	if !errors.As(e.Err, &te) || te.TerminateError != rdmap.FromDDP(ddp.ErrInvalidSTag) {
		t.Fatalf("write via read-only window: %v", e)
	}
}

// sbuf0 returns the memory of mr (read after a receive completion, which orders it).
func sbuf0(_ *side, mr *rnic.MR) []byte { return mr.Buf() }
