package main

// A workaround for a Starting-PSN mismatch between rnic/rocev2's connection manager and
// Linux's (drivers/infiniband/core/cm.c), found by the rxe rping interop test:
//
//   - Linux: the active side's receive PSN is the REQ's Starting PSN and its send PSN the
//     REP's; the passive side sends from the REQ's and receives from the REP's
//     (ib_send_cm_req/cm_rep_handler and cm_req_handler/ib_send_cm_rep).
//   - rnic/rocev2 (at the time of writing): each side sends from the PSN of the message it
//     sent itself (REQ for the active side, REP for the passive side).
//
// Against rxe every request then arrives out of sequence (a PSN-sequence NAK, retried until
// the peer gives up). rnic/rocev2 is another engineer's package, so rping carries psnLink, a
// rocev2.Link wrapper that snoops the REQ and REP and shifts the BTH PSN of every RC packet
// by the difference d of the two Starting PSNs (requests by +d, responses by -d, in both
// directions), recomputing the ICRC. Whether the shift is needed is decided once per process
// by an in-memory probe (rocev2ActiveSendsREQPSN), so the shim turns itself off when the
// connection manager follows Linux.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// Offsets in a UDP payload carrying a CM MAD: BTH (12) + DETH (8) + MAD header (24).
const (
	madOffset     = 12 + 8
	madAttrOffset = madOffset + 16 // attribute ID
	cmDataOffset  = madOffset + 24
	cmReqPSNOff   = cmDataOffset + 44 // REQ Starting PSN (IBTA Table 99; REP's is at 20)
	cmAttrREQ     = 0x0010
	cmAttrREP     = 0x0013
	mgmtClassCM   = 0x07
	bthLen        = 12
	opUDSendOnly  = 0x64
	psnMask       = 1<<24 - 1
)

// psnLink is a rocev2.Link that translates RC PSNs between rnic/rocev2's and Linux's
// Starting-PSN conventions (see the file comment), per connection: the REQ and REP of a
// connection are paired by the active side's comm ID, and an RC packet finds its connection
// by its destination QPN (the peer's QPN when sent, ours when received).
type psnLink struct {
	rocev2.Link
	fix bool // rocev2 sends from its own message's PSN: translate

	mu       sync.Mutex
	conns    map[uint32]*psnConn // by the active side's comm ID
	byQPN    map[uint64]uint32   // (outbound<<32 | destination QPN) → shift for requests
	firstReq chan uint32         // probe: PSN of the first RC request sent
	sent     uint32              // probe: Starting PSN of the last REQ/REP sent
	recvd    uint32              // probe: Starting PSN of the last REQ/REP received

	sendMu  sync.Mutex
	scratch [][]byte // translated copies of a batch
	out     [][]byte
}

// psnConn is what the link knows of one connection from its REQ and REP.
type psnConn struct {
	weActive           bool // this side sent the REQ
	activeQPN, passQPN uint32
	reqPSN, repPSN     uint32
	haveREQ, haveREP   bool
}

// delta returns the PSN shift for requests (responses get the opposite) of an RC packet to
// destination QPN qpn, 0 for an unknown connection.
func (l *psnLink) delta(qpn uint32, outbound bool) uint32 {
	if !l.fix {
		return 0
	}
	k := uint64(qpn)
	if outbound {
		k |= 1 << 32
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byQPN[k]
}

// snoop records a REQ or REP MAD in b (sent or received).
func (l *psnLink) snoop(b []byte, sent bool) {
	if len(b) < cmReqPSNOff+4 || b[0] != opUDSendOnly || binary.BigEndian.Uint32(b[4:])&psnMask != 1 ||
		b[madOffset+1] != mgmtClassCM {
		return
	}
	d := b[cmDataOffset:]
	attr := binary.BigEndian.Uint16(b[madAttrOffset:])
	if attr != cmAttrREQ && attr != cmAttrREP {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		l.conns, l.byQPN = make(map[uint32]*psnConn), make(map[uint64]uint32)
	}
	id := binary.BigEndian.Uint32(d[0:]) // REQ: local comm ID = the active side's
	if attr == cmAttrREP {
		id = binary.BigEndian.Uint32(d[4:]) // REP: remote comm ID
	}
	c := l.conns[id]
	if c == nil {
		c = &psnConn{}
		l.conns[id] = c
	}
	var psn uint32
	if attr == cmAttrREQ {
		psn = binary.BigEndian.Uint32(d[44:]) >> 8
		c.weActive, c.activeQPN, c.reqPSN, c.haveREQ = sent, binary.BigEndian.Uint32(d[32:])>>8, psn, true
	} else {
		psn = binary.BigEndian.Uint32(d[20:]) >> 8
		c.passQPN, c.repPSN, c.haveREP = binary.BigEndian.Uint32(d[12:])>>8, psn, true
	}
	if sent {
		l.sent = psn
	} else {
		l.recvd = psn
	}
	if c.haveREQ && c.haveREP {
		// The shift is (Starting PSN received) - (Starting PSN sent), both directions.
		ours, peer, dl := c.passQPN, c.activeQPN, (c.reqPSN-c.repPSN)&psnMask
		if c.weActive {
			ours, peer, dl = c.activeQPN, c.passQPN, (c.repPSN-c.reqPSN)&psnMask
		}
		l.byQPN[uint64(ours)] = dl
		l.byQPN[1<<32|uint64(peer)] = dl
	}
}

// isResponse reports whether an RC opcode is a READ response or an (atomic) ACK.
func isResponse(op byte) bool { return op >= 0x0d && op <= 0x12 }

// shift adds d (requests) or -d (responses) to the BTH PSN of an RC packet b and recomputes
// its ICRC for the given addresses (IPv4, IP ID 0, DF, as rnic/rocev2 sends).
func shift(b []byte, d uint32, src, dst netip.AddrPort) {
	if d == 0 || len(b) < bthLen+roce.ICRCLen || b[0]>>5 != 0 || !src.Addr().Is4() || !dst.Addr().Is4() {
		return
	}
	if isResponse(b[0]) {
		d = -d & psnMask
	}
	w := binary.BigEndian.Uint32(b[8:])
	psn := (w + d) & psnMask
	binary.BigEndian.PutUint32(b[8:], w&^psnMask|psn)
	ib := b[:len(b)-roce.ICRCLen]
	crc := roce.ICRCv4(src.Addr().As4(), dst.Addr().As4(), 0, true, src.Port(), dst.Port(), ib)
	binary.LittleEndian.PutUint32(b[len(ib):], crc)
}

// Send translates copies of the packets (the transport may keep its buffers for
// retransmission), so the originals are never shifted twice.
func (l *psnLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	need := false
	for _, b := range bufs {
		l.snoop(b, true)
		if len(b) < bthLen || b[0]>>5 != 0 {
			continue
		}
		if l.firstReq != nil && !isResponse(b[0]) {
			select {
			case l.firstReq <- binary.BigEndian.Uint32(b[8:]) & psnMask:
			default:
			}
		}
		if l.delta(binary.BigEndian.Uint32(b[4:])&psnMask, true) != 0 {
			need = true
		}
	}
	if !need {
		return l.Link.Send(bufs, dst)
	}
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.out = l.out[:0]
	for i, b := range bufs {
		if i == len(l.scratch) {
			l.scratch = append(l.scratch, make([]byte, 0, rocev2.MaxPacket))
		}
		c := append(l.scratch[i][:0], b...)
		l.scratch[i] = c
		if len(c) >= bthLen {
			shift(c, l.delta(binary.BigEndian.Uint32(c[4:])&psnMask, true), l.LocalAddr(), dst)
		}
		l.out = append(l.out, c)
	}
	return l.Link.Send(l.out, dst)
}

func (l *psnLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	n, err := l.Link.Recv(bufs, sizes, from)
	for i := 0; i < n; i++ {
		b := bufs[i][:sizes[i]]
		l.snoop(b, false)
		if len(b) >= bthLen {
			shift(b, l.delta(binary.BigEndian.Uint32(b[4:])&psnMask, false), from[i], l.LocalAddr())
		}
	}
	return n, err
}

var (
	probeOnce sync.Once
	probeFix  bool
	probeErr  error
)

// rocev2NeedsPSNFix probes (once per process) whether rnic/rocev2's active side sends from
// its REQ's Starting PSN, unlike Linux, which sends from the REP's.
func rocev2NeedsPSNFix() (bool, error) {
	probeOnce.Do(func() { probeFix, probeErr = rocev2ActiveSendsREQPSN() })
	return probeFix, probeErr
}

// rocev2ActiveSendsREQPSN connects two endpoints over an in-memory network and compares the
// PSN of the active side's first SEND with the Starting PSNs of the REQ and the REP.
func rocev2ActiveSendsREQPSN() (bool, error) {
	mn := rocev2.NewMemNet()
	aa, ab := netip.MustParseAddrPort("10.255.0.1:4791"), netip.MustParseAddrPort("10.255.0.2:4791")
	la, err := mn.NewLink(aa, rocev2.Faults{})
	if err != nil {
		return false, err
	}
	lb, err := mn.NewLink(ab, rocev2.Faults{})
	if err != nil {
		return false, err
	}
	pl := &psnLink{Link: la, firstReq: make(chan uint32, 1)}
	type side struct {
		dev *rnic.Device
		ep  *rocev2.Endpoint
		qp  *rnic.QP
	}
	mk := func(l rocev2.Link, name string) (side, error) {
		var s side
		d, err := rnic.Open(rnic.Config{Name: name})
		if err != nil {
			return s, err
		}
		s.dev = d
		s.ep = rocev2.NewEndpoint(d, l, nil)
		pd, err := d.AllocPD()
		if err != nil {
			return s, err
		}
		cq, err := d.CreateCQ(8)
		if err != nil {
			return s, err
		}
		s.qp, err = d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return s, err
	}
	a, err := mk(pl, "probe-a")
	if a.dev != nil {
		defer a.dev.Close()
	}
	if a.ep != nil {
		defer a.ep.Close()
	}
	if err != nil {
		return false, err
	}
	b, err := mk(lb, "probe-b")
	if b.dev != nil {
		defer b.dev.Close()
	}
	if b.ep != nil {
		defer b.ep.Close()
	}
	if err != nil {
		return false, err
	}
	ln, err := rocev2.Listen(b.ep, "10.255.0.2:1", nil)
	if err != nil {
		return false, err
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			_, _ = req.Accept(b.qp, rocev2.ConnParam{})
		}
	}()
	if _, err := rocev2.DialAddr(ctx, a.ep, a.qp, ab, 1, nil, rocev2.ConnParam{}); err != nil {
		return false, fmt.Errorf("PSN probe: %w", err)
	}
	if err := a.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend}); err != nil {
		return false, fmt.Errorf("PSN probe: %w", err)
	}
	select {
	case psn := <-pl.firstReq:
		pl.mu.Lock()
		defer pl.mu.Unlock()
		switch {
		case len(pl.conns) != 1:
			return false, fmt.Errorf("PSN probe: saw %d connections", len(pl.conns))
		case psn == pl.sent:
			return true, nil
		case psn == pl.recvd:
			return false, nil
		}
		return false, fmt.Errorf("PSN probe: first SEND PSN %#x is neither the REQ's %#x nor the REP's %#x", psn, pl.sent, pl.recvd)
	case <-ctx.Done():
		return false, fmt.Errorf("PSN probe: no SEND seen")
	}
}
