package broker

// The DREQs the daemon sends for the connections of a process that ended: the process's
// CM can no longer disconnect them, so the daemon does, as a CM does, resending each DREQ
// after the CM response timeout until the peer's DREP (or its own DREQ) comes, at most
// dreqTries times (IBTA Vol. 1 ch. 12; rocev2's CM uses the same defaults).

import (
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
	"github.com/softrnic/softrnic/roce"
)

const (
	// dreqResend is the CM response timeout of rocev2's CM: 4.096 µs × 2^20, ≈ 4.3 s.
	dreqResend = 4096 * time.Nanosecond << rocev2.DefaultResponseTimeout
	// dreqTries is how often a DREQ is sent in all: once and DefaultMaxCMRetries again.
	dreqTries = 1 + rocev2.DefaultMaxCMRetries
)

// dying is a DREQ the daemon sent for an ended process's connection, kept until its DREP.
type dying struct {
	pkt  []byte
	dst  netip.AddrPort
	sent int
	next time.Time // when it is sent again
}

// dropComm forgets process slot's connections and returns the DREQs the daemon sends from
// src for those that got as far as the REP and have not ended, with their destinations;
// each is kept in b.dying (bounded by MaxComm, beyond it counted in CommFull and sent
// once) to be sent again until its DREP. The RTU is not waited for: the REP's receiver is
// established once it sends the RTU, and the passive side once the RTU or the first data
// packet arrives (IBTA Vol. 1 ch. 12; Linux's IB_EVENT_COMM_EST), so a connection can
// carry data while its RTU is still on its way through the daemon, or lost. b.mu is held.
func (b *Broker) dropComm(slot steer.Slot, src netip.AddrPort, now time.Time) (dreqs [][]byte, dsts []netip.AddrPort) {
	for id, e := range b.comm {
		if e.slot != slot {
			continue
		}
		if e.remoteID != 0 && e.remoteQPN != 0 && e.ended.IsZero() {
			pkt := dreqPacket(id, e, src, b.psn)
			dreqs = append(dreqs, pkt)
			dsts = append(dsts, e.peer)
			b.psn = b.psn.Add(1)
			if len(b.dying) < MaxComm {
				b.dying[id] = &dying{pkt: pkt, dst: e.peer, sent: 1, next: now.Add(dreqResend)}
			} else {
				b.cnt.CommFull.Add(1)
			}
		}
		delete(b.comm, id)
	}
	return dreqs, dsts
}

// dueDREQs returns the DREQs to send again at now, and forgets those sent dreqTries times
// (DREQsUnanswered). b.mu is held.
func (b *Broker) dueDREQs(now time.Time) (pkts [][]byte, dsts []netip.AddrPort) {
	for id, d := range b.dying {
		if now.Before(d.next) {
			continue
		}
		if d.sent >= dreqTries {
			delete(b.dying, id)
			b.cnt.DREQsUnanswered.Add(1)
			continue
		}
		d.sent++
		d.next = now.Add(dreqResend)
		pkts = append(pkts, d.pkt)
		dsts = append(dsts, d.dst)
	}
	return pkts, dsts
}

// armDREQs sets the resend timer for the earliest pending DREQ, or stops it when none
// is left. b.mu is held.
func (b *Broker) armDREQs(now time.Time) {
	var first time.Time
	for _, d := range b.dying {
		if first.IsZero() || d.next.Before(first) {
			first = d.next
		}
	}
	switch {
	case first.IsZero() || b.closed:
		if b.dreqT != nil {
			b.dreqT.Stop()
		}
	case b.dreqT == nil:
		b.dreqT = time.AfterFunc(first.Sub(now), b.resendDREQs)
	default:
		b.dreqT.Reset(first.Sub(now))
	}
}

// resendDREQs is the resend timer's function.
func (b *Broker) resendDREQs() {
	now := time.Now()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	pkts, dsts := b.dueDREQs(now)
	b.armDREQs(now)
	b.mu.Unlock()
	for i, p := range pkts {
		if err := b.raw.Send([][]byte{p}, dsts[i]); err == nil {
			b.cnt.DREQRetries.Add(1)
		}
	}
}

// dreqAnswered handles a MAD that names a dying connection's comm ID (its Remote Comm ID):
// the peer's DREP, or its own DREQ (it disconnects too), ends the resends. It reports
// whether the MAD was one. b.mu is held.
func (b *Broker) dreqAnswered(m mad) bool {
	if m.attr != roce.AttrDREP && m.attr != roce.AttrDREQ {
		return false
	}
	if _, ok := b.dying[m.remoteID()]; !ok {
		return false
	}
	delete(b.dying, m.remoteID())
	return true
}
