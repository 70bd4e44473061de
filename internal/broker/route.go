package broker

// The routing of the IB CM's MADs (IBTA Vol.1 ch. 12) among the processes on one RoCEv2
// address: the daemon owns QP1 there, so every MAD a peer sends reaches the daemon, which
// hands it to the process that owns what the MAD names, and every MAD a process sends
// goes out through the daemon, which learns from it what the process owns.
//
//	incoming MAD                              goes to
//	REQ, SIDR_REQ                             the process that claimed the service ID
//	REP, RTU, REJ, MRA, DREQ, DREP, LAP, APR  the owner of the Remote Comm ID (data bytes 4..7)
//	SIDR_REP                                  the process that sent the SIDR_REQ (Request ID)
//	anything else, or no owner found          the daemon's own endpoint (which drops or rejects)
//
// A process's REQ or REP must name one of its own QPs (Local QPN) and a Local Comm ID no
// other process uses; its other MADs must not name another's comm ID. Others are dropped
// and counted (Counters.MADRefused): a process cannot take over another's connections.

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/rnic/rocev2/steer"
	"github.com/softrnic/softrnic/roce"
)

// commEntry is one connection's CM state as the daemon sees it.
type commEntry struct {
	slot      steer.Slot
	remoteID  uint32
	peer      netip.AddrPort
	localQPN  uint32
	remoteQPN uint32
	ended     time.Time // REJ, DREQ or DREP seen: forgotten endLinger later
	at        time.Time // first seen
}

// Bounds of the routing tables (each beyond-bound event is counted).
const (
	// endLinger is how long a connection's comm ID stays routable after it ended (a
	// peer retransmitting its DREQ still reaches the process's Timewait).
	endLinger = 30 * time.Second
	// pendingLinger is how long an unanswered REQ or SIDR_REQ is remembered. A
	// connection answered with a REP is kept until it ends (endLinger) or its process
	// does: it may be established without the daemon seeing its RTU, which comes from
	// the peer and may be lost (the first data packet establishes the passive side).
	pendingLinger = 2 * time.Minute
	// MaxComm bounds the comm IDs remembered over all processes; beyond it a new
	// connection's MAD is refused (Counters.CommFull).
	MaxComm = 1 << 18
)

// reqInfo remembers an incoming REQ until the process answers it (its REP names it by
// the REQ's Local Comm ID): the peer's QPN, for the DREQ the daemon sends if the
// process dies.
type reqInfo struct {
	remoteQPN uint32
	at        time.Time
}

// sidrEntry remembers who sent a SIDR_REQ.
type sidrEntry struct {
	slot steer.Slot
	at   time.Time
}

// mad is a parsed CM MAD inside a RoCEv2 UD packet.
type mad struct {
	attr roce.AttrID
	data []byte // the message data after the MAD header
}

// parseMAD returns the CM MAD of a RoCEv2 payload to QP1, or ok false.
func parseMAD(pkt []byte) (m mad, ok bool) {
	p, err := roce.ParsePacket(pkt)
	if err != nil || p.Opcode().Service() != roce.ServiceUD || p.BTH.DestQP() != 1 {
		return m, false
	}
	h, data, err := roce.ParseMAD(p.Payload)
	if err != nil || !h.IsCM() || len(data) < 8 {
		return m, false
	}
	return mad{attr: h.AttrID, data: data}, true
}

func (m mad) localID() uint32  { return binary.BigEndian.Uint32(m.data[0:4]) }
func (m mad) remoteID() uint32 { return binary.BigEndian.Uint32(m.data[4:8]) }

// isQP1 reports whether a RoCEv2 payload is a UD packet to QP1 (a cheap test on the BTH;
// parseMAD checks the rest).
func isQP1(pkt []byte) bool {
	return len(pkt) >= roce.BTHLen && pkt[0]&0xE0 == 0x60 && // UD opcodes 0x60..0x7F
		binary.BigEndian.Uint32(pkt[4:8])&0xFFFFFF == 1
}

// routeIn decides the owner of an incoming MAD (DaemonSlot: the daemon's endpoint) and
// updates the tables. b.mu is held.
func (b *Broker) routeIn(m mad, from netip.AddrPort, now time.Time) steer.Slot {
	if b.dreqAnswered(m) {
		return steer.DaemonSlot // the daemon's endpoint drops it: nobody waits for it any more
	}
	switch m.attr {
	case roce.AttrREQ:
		r, err := roce.ParseREQ(m.data)
		if err != nil {
			return steer.DaemonSlot
		}
		slot := b.services[r.ServiceID]
		if slot != steer.DaemonSlot {
			if len(b.reqs) >= MaxComm {
				b.purge(now)
			}
			if len(b.reqs) < MaxComm {
				b.reqs[r.LocalCommID] = reqInfo{remoteQPN: r.LocalQPN, at: now}
			}
		}
		return slot
	case roce.AttrSIDRREQ:
		r, err := roce.ParseSIDRREQ(m.data)
		if err != nil {
			return steer.DaemonSlot
		}
		return b.services[r.ServiceID]
	case roce.AttrSIDRREP:
		e, ok := b.sidr[m.localID()] // Request ID
		if !ok {
			return steer.DaemonSlot
		}
		delete(b.sidr, m.localID())
		return e.slot
	case roce.AttrClassPortInfo:
		return steer.DaemonSlot
	}
	e := b.comm[m.remoteID()]
	if e == nil {
		return steer.DaemonSlot
	}
	switch m.attr {
	case roce.AttrREP:
		if r, err := roce.ParseREP(m.data); err == nil {
			e.remoteID, e.remoteQPN = r.LocalCommID, r.LocalQPN
		}
	case roce.AttrREJ, roce.AttrDREQ, roce.AttrDREP:
		if e.ended.IsZero() {
			e.ended = now
		}
	}
	return e.slot
}

// learnOut checks a MAD a process (or the daemon, slot DaemonSlot) sends to dst and
// records what it names; false refuses it. b.mu is held.
func (b *Broker) learnOut(slot steer.Slot, m mad, dst netip.AddrPort, now time.Time) bool {
	own := func(qpn uint32) bool { return slot == steer.DaemonSlot || b.qpns[qpn] == slot }
	claim := func(id, localQPN uint32) *commEntry {
		e := b.comm[id]
		if e != nil && e.slot != slot {
			return nil // another's comm ID
		}
		if e == nil {
			p := b.procs[slot]
			if len(b.comm) >= MaxComm || p != nil && p.ncomm >= MaxCommPerProc {
				b.purge(now)
			}
			if len(b.comm) >= MaxComm || p != nil && p.ncomm >= MaxCommPerProc {
				b.cnt.CommFull.Add(1)
				return nil
			}
			e = &commEntry{slot: slot, at: now}
			b.comm[id] = e
			if p != nil {
				p.ncomm++
			}
		}
		e.peer, e.localQPN = dst, localQPN
		return e
	}
	switch m.attr {
	case roce.AttrREQ:
		r, err := roce.ParseREQ(m.data)
		if err != nil || !own(r.LocalQPN) || r.LocalCommID == 0 {
			return false
		}
		return claim(r.LocalCommID, r.LocalQPN) != nil
	case roce.AttrREP:
		r, err := roce.ParseREP(m.data)
		if err != nil || !own(r.LocalQPN) || r.LocalCommID == 0 {
			return false
		}
		e := claim(r.LocalCommID, r.LocalQPN)
		if e == nil {
			return false
		}
		e.remoteID = r.RemoteCommID
		if q, ok := b.reqs[r.RemoteCommID]; ok {
			e.remoteQPN = q.remoteQPN
			delete(b.reqs, r.RemoteCommID)
		}
		return true
	case roce.AttrSIDRREQ:
		if len(b.sidr) >= MaxComm {
			b.purge(now)
		}
		if len(b.sidr) >= MaxComm {
			b.cnt.CommFull.Add(1)
			return false
		}
		b.sidr[m.localID()] = sidrEntry{slot: slot, at: now}
		return true
	case roce.AttrSIDRREP, roce.AttrClassPortInfo:
		return true
	}
	e := b.comm[m.localID()]
	if e != nil && e.slot != slot {
		return false
	}
	if e != nil {
		switch m.attr {
		case roce.AttrREJ, roce.AttrDREQ, roce.AttrDREP:
			if e.ended.IsZero() {
				e.ended = now
			}
		}
	}
	return true
}

// purge forgets ended connections after endLinger and unanswered requests and
// connections never established after pendingLinger. b.mu is held.
func (b *Broker) purge(now time.Time) {
	for id, e := range b.comm {
		if !e.ended.IsZero() && now.Sub(e.ended) > endLinger || e.remoteID == 0 && now.Sub(e.at) > pendingLinger {
			b.forget(id, e)
		}
	}
	for id, r := range b.reqs {
		if now.Sub(r.at) > pendingLinger {
			delete(b.reqs, id)
		}
	}
	for id, s := range b.sidr {
		if now.Sub(s.at) > pendingLinger {
			delete(b.sidr, id)
		}
	}
}

// forget removes comm entry id. b.mu is held.
func (b *Broker) forget(id uint32, e *commEntry) {
	delete(b.comm, id)
	if p := b.procs[e.slot]; p != nil {
		p.ncomm--
	}
}

// dreqPacket builds the DREQ the daemon sends for a dead process's connection e (local
// comm ID id): a RoCEv2 UD SEND to the peer's QP1, from the device's address.
func dreqPacket(id uint32, e *commEntry, src netip.AddrPort, psn roce.PSN) []byte {
	d := roce.DREQ{LocalCommID: id, RemoteCommID: e.remoteID, RemoteQPN: e.remoteQPN}
	madb := roce.AppendCMMAD(nil, uint64(id)<<32|uint64(psn), &d)
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, PSN: psn, QKey: roce.GSIQKey, SrcQP: 1}
	b := h.Append(nil, len(madb))
	b = append(b, madb...)
	b = roce.AppendPad(b, len(madb))
	var crc uint32
	dst := e.peer
	if src.Addr().Is4() && dst.Addr().Is4() {
		crc = roce.ICRCStartV4(src.Addr().As4(), dst.Addr().As4(), 0, true, src.Port(), dst.Port(), len(b))
	} else {
		crc = roce.ICRCStartV6(src.Addr().As16(), dst.Addr().As16(), src.Port(), dst.Port(), len(b))
	}
	return roce.AppendICRC(b, roce.ICRCAddTransport(crc, b))
}
