//go:build linux

package afxdp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softrnic/softrnic/rnic"
)

func fill(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// post posts wr on h's QP and checks its completion.
func post(t testing.TB, h *host, wr *rnic.SendWR, op rnic.WCOpcode) rnic.Completion {
	t.Helper()
	wr.Flags |= rnic.Signaled
	if err := h.qp.PostSend(wr); err != nil {
		t.Fatalf("%s: post %v: %v", h.name, wr.Opcode, err)
	}
	c := wait(t, h.scq)
	if c.Status != rnic.StatusSuccess || c.Opcode != op || c.WRID != wr.WRID {
		t.Fatalf("%s: %v: %+v", h.name, wr.Opcode, c)
	}
	return c
}

// recv takes b's next receive completion.
func recv(t testing.TB, b *host, wrid uint64, n int) rnic.Completion {
	t.Helper()
	c := wait(t, b.rcq)
	if c.Status != rnic.StatusSuccess || c.WRID != wrid || c.ByteLen != uint32(n) {
		t.Fatalf("%s: receive %+v, want WRID %d, %d bytes", b.name, c, wrid, n)
	}
	return c
}

// everyOperation runs each operation from a to b with messages of n bytes (at least
// 64; 1 MiB at most) where the operation carries data: Send (three SGEs into two), Send with Solicited Event, Send
// with Invalidate, RDMA Write, RDMA Read, Write with Immediate, Immediate Data alone,
// atomic Fetch-and-Add and Compare-and-Swap (RFC 7306), and zero-length Send, Write and
// Read. Every byte is checked.
func everyOperation(t *testing.T, a, b *host, seed uint64, n int) {
	// Every region the remote side writes is one the test has not read before (the
	// race detector sees no order through the network): the layout depends on the
	// call (seed), 4 MiB apart. a: src at base, Read target at base+1M, atomic
	// results at 8M; b: receive buffer at base, Write target at base+1M, Write with
	// Immediate target at base+2M, small receives at base+3M, atomic target at 8M.
	base := int((seed-1)%2) * 4 * msgSize
	atom := 8*msgSize + 64*int((seed-1)%2)
	src, rdst := a.buf[base:base+n], a.buf[base+msgSize:base+msgSize+n]
	rbuf, wdst, wimm := b.buf[base:base+n], b.buf[base+msgSize:base+msgSize+n], b.buf[base+2*msgSize:base+2*msgSize+n]
	small := base + 3*msgSize
	fill(src, seed)
	at := func(h *host, off int) uint64 { return h.mr.Addr() + uint64(off) }

	// Send, three SGEs into a receive of two
	if err := b.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{b.mr.SGE(base, n/3), b.mr.SGE(base+n/3, n-n/3)}}); err != nil {
		t.Fatal(err)
	}
	post(t, a, &rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, SGL: []rnic.SGE{a.mr.SGE(base, 7), a.mr.SGE(base+7, n/2), a.mr.SGE(base+7+n/2, n-7-n/2)}}, rnic.WCSend)
	recv(t, b, 1, n)
	if !bytes.Equal(rbuf, src) {
		t.Fatal("Send: data differ")
	}
	// Send with Solicited Event
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{b.mr.SGE(small, 64)}})
	post(t, a, &rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Solicited, SGL: []rnic.SGE{a.mr.SGE(base, 64)}}, rnic.WCSend)
	if c := recv(t, b, 2, 64); c.Flags&rnic.WCSolicited == 0 {
		t.Fatalf("Send SE: %+v", c)
	}
	// Send with Invalidate of a region of b's
	inv, err := b.pd.RegMR(make([]byte, 64), allAccess)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 3, SGL: []rnic.SGE{b.mr.SGE(small+64, 64)}})
	post(t, a, &rnic.SendWR{WRID: 3, Opcode: rnic.OpSendInv, InvalidateSTag: inv.RKey(), SGL: []rnic.SGE{a.mr.SGE(base, 16)}}, rnic.WCSend)
	if c := recv(t, b, 3, 16); c.Flags&rnic.WCWithInv == 0 || c.InvalidatedSTag != inv.RKey() || inv.Valid() {
		t.Fatalf("Send with Invalidate: %+v, region valid %v", c, inv.Valid())
	}

	// RDMA Write, then a Send so b reads its memory after the placement
	post(t, a, &rnic.SendWR{WRID: 4, Opcode: rnic.OpWrite, SGL: []rnic.SGE{a.mr.SGE(base, n)},
		RemoteAddr: at(b, base+msgSize), RKey: b.mr.RKey()}, rnic.WCWrite)
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 4})
	post(t, a, &rnic.SendWR{WRID: 40, Opcode: rnic.OpSend}, rnic.WCSend)
	recv(t, b, 4, 0)
	if !bytes.Equal(wdst, src) {
		t.Fatal("RDMA Write: data differ")
	}
	// RDMA Read of what was written, into two SGEs
	c := post(t, a, &rnic.SendWR{WRID: 5, Opcode: rnic.OpRead, SGL: []rnic.SGE{a.mr.SGE(base+msgSize, n/3), a.mr.SGE(base+msgSize+n/3, n-n/3)},
		RemoteAddr: at(b, base+msgSize), RKey: b.mr.RKey()}, rnic.WCRead)
	if c.ByteLen != uint32(n) || !bytes.Equal(rdst, src) {
		t.Fatalf("RDMA Read: %d bytes, data equal %v", c.ByteLen, bytes.Equal(rdst, src))
	}
	// Write with Immediate (RFC 7306 §6) and Immediate Data alone
	fill(src, seed+1)
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 6})
	post(t, a, &rnic.SendWR{WRID: 6, Opcode: rnic.OpWriteImm, Imm: 0xc0ffee, SGL: []rnic.SGE{a.mr.SGE(base, n)},
		RemoteAddr: at(b, base+2*msgSize), RKey: b.mr.RKey()}, rnic.WCWrite)
	if c := wait(t, b.rcq); c.Status != rnic.StatusSuccess || c.Opcode != rnic.WCRecvRDMAWithImm || c.Imm != 0xc0ffee {
		t.Fatalf("Write with Immediate: %+v", c)
	}
	if !bytes.Equal(wimm, src) {
		t.Fatal("Write with Immediate: data differ")
	}
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 7})
	post(t, a, &rnic.SendWR{WRID: 7, Opcode: rnic.OpSendImm, Imm: 77}, rnic.WCSend)
	if c := recv(t, b, 7, 0); c.Imm != 77 || c.Flags&rnic.WCWithImm == 0 {
		t.Fatalf("Immediate Data: %+v", c)
	}
	// Atomics (RFC 7306 §5) on a target a sets with an RDMA Write
	target := b.buf[atom : atom+8]
	res := a.buf[atom : atom+8]
	binary.NativeEndian.PutUint64(res, 1000)
	post(t, a, &rnic.SendWR{WRID: 80, Opcode: rnic.OpWrite, SGL: []rnic.SGE{a.mr.SGE(atom, 8)},
		RemoteAddr: at(b, atom), RKey: b.mr.RKey()}, rnic.WCWrite)
	post(t, a, &rnic.SendWR{WRID: 8, Opcode: rnic.OpAtomicFetchAdd, Compare: 23, SGL: []rnic.SGE{a.mr.SGE(atom, 8)},
		RemoteAddr: at(b, atom), RKey: b.mr.RKey()}, rnic.WCFetchAdd)
	if binary.NativeEndian.Uint64(res) != 1000 {
		t.Fatalf("Fetch-and-Add returned %d", binary.NativeEndian.Uint64(res))
	}
	post(t, a, &rnic.SendWR{WRID: 9, Opcode: rnic.OpAtomicCmpSwap, Compare: 1023, Swap: 5, SGL: []rnic.SGE{a.mr.SGE(atom, 8)},
		RemoteAddr: at(b, atom), RKey: b.mr.RKey()}, rnic.WCCmpSwap)
	if binary.NativeEndian.Uint64(res) != 1023 {
		t.Fatalf("Compare-and-Swap returned %d", binary.NativeEndian.Uint64(res))
	}
	// zero-length Send, Write and Read; then b sees 5 in the atomic's target
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 10})
	post(t, a, &rnic.SendWR{WRID: 10, Opcode: rnic.OpSend}, rnic.WCSend)
	recv(t, b, 10, 0)
	post(t, a, &rnic.SendWR{WRID: 11, Opcode: rnic.OpWrite, RemoteAddr: at(b, small), RKey: b.mr.RKey()}, rnic.WCWrite)
	post(t, a, &rnic.SendWR{WRID: 12, Opcode: rnic.OpRead, RemoteAddr: at(b, small), RKey: b.mr.RKey()}, rnic.WCRead)
	_ = b.qp.PostRecv(&rnic.RecvWR{WRID: 13})
	post(t, a, &rnic.SendWR{WRID: 13, Opcode: rnic.OpSend}, rnic.WCSend)
	recv(t, b, 13, 0)
	if v := binary.NativeEndian.Uint64(target); v != 5 {
		t.Fatalf("atomic target %d, want 5", v)
	}
}

// TestIWARPOverAFXDP: softrnic's iWARP over AF_XDP (user-space TCP on the port) and
// softrnic on the kernel's TCP, each side dialing in turn, with and without MPA CRC,
// every operation both ways with 1 MiB messages, 1% of the frames dropped in each
// direction at the port: TCP recovers, every byte arrives, and both sides disconnect
// cleanly.
func TestIWARPOverAFXDP(t *testing.T) {
	r := newRig(t, 0.01, nil)
	for _, crc := range []bool{true, false} {
		for _, xdpDials := range []bool{true, false} {
			t.Run(fmt.Sprintf("crc=%v/afxdp-dials=%v", crc, xdpDials), func(t *testing.T) {
				x, k := r.newHost(t, hostOpts{xdp: true, crc: crc}), r.newHost(t, hostOpts{crc: crc})
				r.loss(true)
				defer r.loss(false)
				var xc, kc *rnic.QP
				if xdpDials {
					_, c := connect(t, k, x)
					xc, kc = c.QP(), k.qp
				} else {
					_, c := connect(t, x, k)
					xc, kc = x.qp, c.QP()
				}
				if xc != x.qp || kc != k.qp {
					t.Fatal("QPs")
				}
				everyOperation(t, x, k, 1, msgSize)
				everyOperation(t, k, x, 2, msgSize)
				r.loss(false)
				x.qp.Disconnect()
				for _, h := range []*host{x, k} {
					<-h.qp.Done()
					if err := h.qp.Err(); err != nil {
						t.Errorf("%s: connection ended with %v", h.name, err)
					}
				}
			})
		}
	}
	ps, ss := r.port.Stats(), r.st.Stats()
	t.Logf("port %+v", ps)
	t.Logf("stack %+v", ss)
	if ps.RxInjectedDrops == 0 || ps.TxInjectedDrops == 0 || ss.Retransmits == 0 {
		t.Fatalf("no loss injected or no retransmission: port %+v, stack %+v", ps, ss)
	}
}
