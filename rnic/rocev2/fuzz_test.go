package rocev2

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// FuzzInput feeds arbitrary packets (re-addressed to the server QP, with a
// valid ICRC) to a connected responder/completer: nothing may panic.
func FuzzInput(f *testing.F) {
	for _, h := range []roce.Header{
		{Opcode: roce.RCSendOnly, AckReq: true}, {Opcode: roce.RCWriteFirst, DMALen: 5000},
		{Opcode: roce.RCReadRequest, DMALen: 100}, {Opcode: roce.RCFetchAdd}, {Opcode: roce.RCAck},
		{Opcode: roce.RCReadResponseMiddle}, {Opcode: roce.RCAtomicAck}, {Opcode: roce.UDSendOnly, DestQP: 1},
	} {
		b := h.Append(nil, 8)
		b = append(b, 1, 2, 3, 4, 5, 6, 7, 8)
		f.Add(append(b, 0, 0, 0, 0))
	}
	// CM MADs to QP1 (the server listens on 7174, so REQs reach the passive side).
	for _, m := range []roce.CMMessage{rogueREQ(cliAddr.Addr(), srvAddr.Addr(), 7174, 77, 5),
		&roce.DREQ{LocalCommID: 1, RemoteCommID: 2}, &roce.REJ{RemoteCommID: 3, Reason: roce.RejStaleConn},
		&roce.MRA{LocalCommID: 4, ServiceTimeout: 31}, &roce.RTU{}, &roce.REP{}, &roce.DREP{}} {
		mad := roce.AppendCMMAD(nil, 9, m)
		h := roce.Header{Opcode: roce.UDSendOnly, DestQP: 1, QKey: roce.GSIQKey, SrcQP: 1}
		b := append(h.Append(nil, len(mad)), mad...)
		f.Add(append(b, 0, 0, 0, 0))
	}
	cli, srv := newPair(f, nil)
	l, err := Listen(srv.ep, ":7174", &CMConfig{AcceptTimeout: 50 * time.Millisecond, ResponseTimeout: 8})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	rmr, _ := srv.reg(f, 1<<16, allAccess)
	for i := range 8 {
		_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(0, 1<<16)}})
	}
	smr, _ := cli.reg(f, 1<<16, allAccess)
	_ = cli.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpRead, SGL: []rnic.SGE{smr.SGE(0, 1<<16)}, RemoteAddr: rmr.Addr(), RKey: rmr.RKey()})
	r := &rxCtx{ctl: make([]ctlPkt, 16), bufs: make([][]byte, 0, 16)}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < roce.BTHLen+roce.ICRCLen || len(b) > MaxPacket {
			return
		}
		b = append([]byte(nil), b...)
		bth := roce.BTH(b)
		if bth.DestQP() != 1 || bth.Opcode().Service() != roce.ServiceUD {
			bth.SetDestQP(srv.qp.Num())
		}
		bth.SetPKey(0xFFFF)
		n := len(b) - roce.ICRCLen
		crc := roce.ICRCAddTransport(icrcStart(cliAddr, srvAddr, n), b[:n])
		b = roce.AppendICRC(b[:n], crc)
		srv.ep.input(r, b, cliAddr, srvAddr)
		endFuzzBatch(r)
		// the same packet as a response to the client
		bth.SetDestQP(cli.qp.Num())
		crc = roce.ICRCAddTransport(icrcStart(srvAddr, cliAddr, n), b[:n])
		b = roce.AppendICRC(b[:n], crc)
		cli.ep.input(r, b, netip.AddrPort(srvAddr), cliAddr)
		endFuzzBatch(r)
	})
}

// endFuzzBatch ends a receive batch as Endpoint.endBatch does, except that the batch's
// control packets are dropped rather than sent: each touched connection's ACK is
// queued, and the goroutine of one with queued responses woken.
func endFuzzBatch(r *rxCtx) {
	for _, c := range r.touched {
		c.mu.Lock()
		c.flushAck(r)
		c.inBatch = false
		send := c.rdSend
		c.rdSend = false
		c.mu.Unlock()
		if send {
			c.wake()
		}
	}
	r.touched = r.touched[:0]
	r.nctl = 0
}
