package broker

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic/rocev2/steer"
	"github.com/softrnic/softrnic/roce"
)

// newTestBroker is a Broker's routing state without sockets: processes 1 and 2 attached,
// process 1 holding QP 100, process 2 QP 200.
func newTestBroker() *Broker {
	b := &Broker{procs: map[steer.Slot]*proc{1: {slot: 1}, 2: {slot: 2}}, qpns: map[uint32]steer.Slot{100: 1, 200: 2},
		services: map[uint64]steer.Slot{}, comm: map[uint32]*commEntry{}, reqs: map[uint32]reqInfo{}, sidr: map[uint32]sidrEntry{},
		dying: map[uint32]*dying{}}
	b.procs[1].nqp, b.procs[2].nqp = 1, 1
	return b
}

// madOf wraps a CM message in a RoCEv2 UD SEND to QP1 and parses it back as the broker does.
func madOf(t *testing.T, m roce.CMMessage) mad {
	t.Helper()
	body := roce.AppendCMMAD(nil, 1, m)
	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1, QKey: roce.GSIQKey, SrcQP: 1}
	pkt := append(h.Append(nil, len(body)), body...)
	pkt = roce.AppendICRC(roce.AppendPad(pkt, len(body)), 0)
	if !isQP1(pkt) {
		t.Fatal("not a QP1 packet")
	}
	md, ok := parseMAD(pkt)
	if !ok {
		t.Fatalf("%T: not parsed as a CM MAD", m)
	}
	return md
}

var peer = netip.MustParseAddrPort("192.0.2.7:4791")

// TestRouting: what each process may send and where incoming MADs go.
func TestRouting(t *testing.T) {
	b := newTestBroker()
	now := time.Now()
	out := func(slot steer.Slot, m roce.CMMessage) bool { return b.learnOut(slot, madOf(t, m), peer, now) }
	in := func(m roce.CMMessage) steer.Slot { return b.routeIn(madOf(t, m), peer, now) }

	// a REQ must name the sender's own QP and a comm ID no one else uses
	if !out(1, &roce.REQ{LocalCommID: 0xA, LocalQPN: 100, ServiceID: roce.ServiceID(roce.PortSpaceTCP, 7174)}) {
		t.Fatal("process 1's REQ from its own QP refused")
	}
	if out(2, &roce.REQ{LocalCommID: 0xB, LocalQPN: 100}) {
		t.Fatal("process 2 sent a REQ from process 1's QP")
	}
	if out(2, &roce.REQ{LocalCommID: 0xA, LocalQPN: 200}) {
		t.Fatal("process 2 took process 1's comm ID")
	}
	for _, m := range []roce.CMMessage{&roce.DREQ{LocalCommID: 0xA}, &roce.RTU{LocalCommID: 0xA}, &roce.REJ{LocalCommID: 0xA}} {
		if out(2, m) {
			t.Fatalf("process 2 sent %T naming process 1's connection", m)
		}
	}
	// the peer's REP names process 1's comm ID: routed there, and the peer's QPN and comm
	// ID are remembered (for the DREQ the daemon sends if process 1 dies)
	if s := in(&roce.REP{LocalCommID: 0x77, RemoteCommID: 0xA, LocalQPN: 555}); s != 1 {
		t.Fatalf("REP for process 1 routed to slot %d", s)
	}
	if e := b.comm[0xA]; e.remoteID != 0x77 || e.remoteQPN != 555 {
		t.Fatalf("after the REP: %+v", e)
	}
	if !out(1, &roce.RTU{LocalCommID: 0xA, RemoteCommID: 0x77}) {
		t.Fatal("process 1's RTU")
	}
	// unknown comm IDs and other attributes go to the daemon's own endpoint
	if s := in(&roce.DREQ{LocalCommID: 0x77, RemoteCommID: 0xDEAD}); s != steer.DaemonSlot {
		t.Fatalf("DREQ for an unknown connection routed to slot %d", s)
	}
	// REQs go to the process that claimed the service, others to the daemon (which rejects)
	svc := roce.ServiceID(roce.PortSpaceTCP, 9000)
	if err := b.claim(2, svc); err != nil {
		t.Fatal(err)
	}
	if err := b.claim(1, svc); err == nil {
		t.Fatal("process 1 claimed process 2's service")
	}
	if s := in(&roce.REQ{LocalCommID: 0x99, LocalQPN: 777, ServiceID: svc}); s != 2 {
		t.Fatalf("REQ for process 2's service routed to slot %d", s)
	}
	if s := in(&roce.REQ{LocalCommID: 0x98, ServiceID: roce.ServiceID(roce.PortSpaceTCP, 9001)}); s != steer.DaemonSlot {
		t.Fatalf("REQ for an unclaimed service routed to slot %d", s)
	}
	// process 2 accepts: its REP names the REQ's comm ID; the peer's QPN comes from the REQ
	if !out(2, &roce.REP{LocalCommID: 0xC, RemoteCommID: 0x99, LocalQPN: 200}) {
		t.Fatal("process 2's REP refused")
	}
	if e := b.comm[0xC]; e.slot != 2 || e.remoteID != 0x99 || e.remoteQPN != 777 {
		t.Fatalf("after process 2's REP: %+v", e)
	}
	if s := in(&roce.RTU{LocalCommID: 0x99, RemoteCommID: 0xC}); s != 2 {
		t.Fatalf("RTU for process 2 routed to slot %d", s)
	}
	// SIDR: the reply goes to the process that asked, once
	if !out(1, &roce.SIDRREQ{RequestID: 7, ServiceID: roce.ServiceID(roce.PortSpaceUDP, 5)}) {
		t.Fatal("SIDR_REQ refused")
	}
	if s := in(&roce.SIDRREP{RequestID: 7}); s != 1 {
		t.Fatalf("SIDR_REP routed to slot %d", s)
	}
	if s := in(&roce.SIDRREP{RequestID: 7}); s != steer.DaemonSlot {
		t.Fatalf("a second SIDR_REP routed to slot %d", s)
	}
	// the DREQ the daemon sends for process 1's connection if it dies
	pkt := dreqPacket(0xA, b.comm[0xA], netip.MustParseAddrPort("192.0.2.1:4791"), 5)
	md, ok := parseMAD(pkt)
	if !ok || md.attr != roce.AttrDREQ {
		t.Fatal("DREQ packet does not parse")
	}
	d, err := roce.ParseDREQ(md.data)
	if err != nil || d.LocalCommID != 0xA || d.RemoteCommID != 0x77 || d.RemoteQPN != 555 {
		t.Fatalf("DREQ %+v %v", d, err)
	}
}

// TestRoutingBounds: a process cannot fill the tables for everyone: its listeners and
// its connections in the routing table are bounded and the refusals counted; ended
// connections are forgotten after endLinger.
func TestRoutingBounds(t *testing.T) {
	b := newTestBroker()
	for i := range MaxServicesPerProc {
		if err := b.claim(1, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.claim(1, 1<<40); err == nil || b.cnt.ClaimRefused.Load() != 1 {
		t.Fatalf("claim beyond the bound: %v, refused %d", err, b.cnt.ClaimRefused.Load())
	}
	b.release(1, 0)
	if err := b.claim(1, 1<<40); err != nil {
		t.Fatalf("claim after a release: %v", err)
	}
	now := time.Now()
	m := madOf(t, &roce.REQ{LocalCommID: 1, LocalQPN: 100})
	for i := range MaxCommPerProc {
		m.data[3], m.data[2], m.data[1] = byte(i), byte(i>>8), byte(i>>16) // Local Comm ID = i+1.. (big-endian)
		m.data[0] = 1
		if !b.learnOut(1, m, peer, now) {
			t.Fatalf("REQ %d refused", i)
		}
	}
	m.data[0] = 2
	if b.learnOut(1, m, peer, now) || b.cnt.CommFull.Load() != 1 {
		t.Fatalf("REQ beyond the bound taken (comm full %d)", b.cnt.CommFull.Load())
	}
	if !b.learnOut(2, madOf(t, &roce.REQ{LocalCommID: 5, LocalQPN: 200}), peer, now) {
		t.Fatal("process 2 refused because process 1 filled its share")
	}
	// a connection the peer answered with a REP may be established whether or not its RTU
	// was seen (the first data packet establishes the passive side): it is kept; requests
	// never answered are forgotten after pendingLinger
	if s := b.routeIn(madOf(t, &roce.REP{LocalCommID: 0x55, RemoteCommID: 5, LocalQPN: 9}), peer, now); s != 2 {
		t.Fatalf("REP for process 2 routed to slot %d", s)
	}
	b.purge(now.Add(pendingLinger + time.Second))
	if len(b.comm) != 1 || b.comm[5] == nil || b.procs[1].ncomm != 0 {
		t.Fatalf("after the linger: %d entries (want only process 2's answered one), process 1 holds %d", len(b.comm), b.procs[1].ncomm)
	}
}

// TestDetachDREQs: when a process ends, the daemon sends a DREQ for each of its
// connections that got as far as the REP, RTU seen or not (the peer may be established
// and carrying data while the RTU is still on its way), and for none that ended or got
// no REP; all of the process's comm IDs are forgotten.
func TestDetachDREQs(t *testing.T) {
	b := newTestBroker()
	now := time.Now()
	out := func(slot steer.Slot, m roce.CMMessage) {
		t.Helper()
		if !b.learnOut(slot, madOf(t, m), peer, now) {
			t.Fatalf("%T refused", m)
		}
	}
	in := func(m roce.CMMessage) { b.routeIn(madOf(t, m), peer, now) }
	// 0xA: REQ and REP, no RTU yet; 0xB: established; 0xC: REQ only; 0xD: rejected
	out(1, &roce.REQ{LocalCommID: 0xA, LocalQPN: 100})
	in(&roce.REP{LocalCommID: 0x7A, RemoteCommID: 0xA, LocalQPN: 501})
	out(1, &roce.REQ{LocalCommID: 0xB, LocalQPN: 100})
	in(&roce.REP{LocalCommID: 0x7B, RemoteCommID: 0xB, LocalQPN: 502})
	out(1, &roce.RTU{LocalCommID: 0xB, RemoteCommID: 0x7B})
	out(1, &roce.REQ{LocalCommID: 0xC, LocalQPN: 100})
	out(1, &roce.REQ{LocalCommID: 0xD, LocalQPN: 100})
	in(&roce.REJ{LocalCommID: 0x7D, RemoteCommID: 0xD})
	out(2, &roce.REQ{LocalCommID: 0xE, LocalQPN: 200}) // another process's: kept
	in(&roce.REP{LocalCommID: 0x7E, RemoteCommID: 0xE, LocalQPN: 503})

	dreqs, dsts := b.dropComm(1, netip.MustParseAddrPort("192.0.2.1:4791"), now)
	got := map[uint32]uint32{} // remote comm ID -> remote QPN
	for i, pkt := range dreqs {
		md, ok := parseMAD(pkt)
		if !ok || md.attr != roce.AttrDREQ {
			t.Fatal("DREQ packet does not parse")
		}
		d, err := roce.ParseDREQ(md.data)
		if err != nil || dsts[i] != peer {
			t.Fatalf("DREQ %+v %v to %v", d, err, dsts[i])
		}
		got[d.RemoteCommID] = d.RemoteQPN
	}
	if len(got) != 2 || got[0x7A] != 501 || got[0x7B] != 502 {
		t.Fatalf("DREQs for %v, want comm IDs 0x7a (QPN 501) and 0x7b (QPN 502)", got)
	}
	for id := range b.comm {
		if b.comm[id].slot == 1 {
			t.Fatalf("comm ID %#x of the ended process kept", id)
		}
	}
	if b.comm[0xE] == nil {
		t.Fatal("the other process's connection was dropped")
	}
}

// TestDREQResends: the daemon's DREQ for an ended process's connection is sent again
// every CM response timeout until the peer's DREP (or DREQ) comes, dreqTries times in
// all, then given up and counted; the same bytes each time.
func TestDREQResends(t *testing.T) {
	b := newTestBroker()
	t0 := time.Now()
	connect := func(local, remote uint32) {
		t.Helper()
		if !b.learnOut(1, madOf(t, &roce.REQ{LocalCommID: local, LocalQPN: 100}), peer, t0) {
			t.Fatal("REQ refused")
		}
		b.routeIn(madOf(t, &roce.REP{LocalCommID: remote, RemoteCommID: local, LocalQPN: 500}), peer, t0)
	}
	connect(0xA, 0x7A) // its peer never answers
	connect(0xB, 0x7B) // its peer answers the second DREQ
	dreqs, _ := b.dropComm(1, netip.MustParseAddrPort("192.0.2.1:4791"), t0)
	if len(dreqs) != 2 || len(b.dying) != 2 {
		t.Fatalf("%d DREQs, %d kept", len(dreqs), len(b.dying))
	}
	if p, _ := b.dueDREQs(t0.Add(dreqResend - time.Millisecond)); len(p) != 0 {
		t.Fatalf("%d DREQs sent again before the response timeout", len(p))
	}
	sent := map[string]int{}
	for k := 1; k <= dreqTries; k++ {
		now := t0.Add(time.Duration(k) * dreqResend)
		if k == 2 {
			if s := b.routeIn(madOf(t, &roce.DREP{LocalCommID: 0x7B, RemoteCommID: 0xB}), peer, now); s != steer.DaemonSlot {
				t.Fatalf("DREP for the ended connection routed to slot %d", s)
			}
		}
		pkts, dsts := b.dueDREQs(now)
		for i, p := range pkts {
			if dsts[i] != peer {
				t.Fatalf("DREQ to %v", dsts[i])
			}
			sent[string(p)]++
		}
	}
	var counts []int
	for _, n := range sent {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	if !slices.Equal(counts, []int{1, dreqTries - 1}) {
		t.Fatalf("resends per DREQ %v, want 1 (answered after the second) and %d (never answered)", counts, dreqTries-1)
	}
	if len(b.dying) != 0 || b.cnt.DREQsUnanswered.Load() != 1 {
		t.Fatalf("after every try: %d kept, %d given up", len(b.dying), b.cnt.DREQsUnanswered.Load())
	}
}
