package rocev2

import (
	"bytes"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// splitLink is a GSILink over one link, as a process attached to the daemon sees the
// daemon's routing in miniature: a router goroutine reads the underlying link and
// queues UD packets to QP1 for the GSI half, everything else for the data half; both
// halves send on the underlying link.
type splitLink struct {
	under       Link
	data, gsi   *halfLink
	gsiPkts     atomic.Int64 // packets routed to the GSI half
	dataQP1Pkts atomic.Int64 // QP1 packets that reached the data half (must stay 0)
	sentOnGSI   atomic.Int64 // MADs sent through the GSI half
	sentDataQP1 atomic.Int64 // QP1 packets sent through the data half (must stay 0)
	// hold keeps the data half's packets queued (Pending) until gate closes, which the
	// router does 2 ms after it passed a DREQ to the GSI half (TestDREQAfterPendingACK)
	hold      atomic.Bool
	gate      chan struct{}
	gateOnce  sync.Once
	held      atomic.Int32 // data packets not yet handed to the endpoint (Pending)
	mu        sync.Mutex
	claimed   map[uint64]bool // services claimed (ClaimService) and not released
	taken     uint64          // a service "another process" holds: ClaimService refuses it
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type halfLink struct {
	s     *splitLink
	isGSI bool
	q     chan []byte
	from  chan netip.AddrPort
	done  chan struct{}
	once  sync.Once
}

func isQP1(b []byte) bool {
	p, err := roce.ParsePacket(b)
	return err == nil && p.Opcode().Service() == roce.ServiceUD && p.BTH.DestQP() == 1
}

func newSplitLink(under Link) *splitLink {
	s := &splitLink{under: under, claimed: make(map[uint64]bool), gate: make(chan struct{})}
	mk := func(g bool) *halfLink {
		return &halfLink{s: s, isGSI: g, q: make(chan []byte, 256), from: make(chan netip.AddrPort, 256), done: make(chan struct{})}
	}
	s.data, s.gsi = mk(false), mk(true)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		bufs := [][]byte{make([]byte, MaxPacket)}
		sizes, from := make([]int, 1), make([]netip.AddrPort, 1)
		for {
			if _, err := under.Recv(bufs, sizes, from); err != nil {
				return
			}
			b := bytes.Clone(bufs[0][:sizes[0]])
			h := s.data
			if isQP1(b) {
				h = s.gsi
				s.gsiPkts.Add(1)
				if s.hold.Load() && isDREQ(b) {
					time.AfterFunc(2*time.Millisecond, func() { s.gateOnce.Do(func() { close(s.gate) }) })
				}
			}
			if h == s.data {
				s.held.Add(1) // pending until the endpoint takes it (Recv)
			}
			select {
			case h.q <- b:
				h.from <- from[0]
			default:
				if h == s.data {
					s.held.Add(-1)
				}
			}
		}
	}()
	return s
}

func (s *splitLink) ClaimService(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == s.taken || s.claimed[id] {
		return syscall.EADDRINUSE
	}
	s.claimed[id] = true
	return nil
}
func (s *splitLink) ReleaseService(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claimed, id)
}
func (s *splitLink) claims() map[uint64]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.claimed)
}
func (s *splitLink) GSI() Link                                    { return s.gsi }
func (s *splitLink) Send(bufs [][]byte, dst netip.AddrPort) error { return s.data.Send(bufs, dst) }
func (s *splitLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	return s.data.Recv(bufs, sizes, from)
}
func (s *splitLink) LocalAddr() netip.AddrPort { return s.under.LocalAddr() }
func (s *splitLink) BatchSize() int            { return 1 }
func (s *splitLink) Close() error {
	s.data.Close()
	return nil
}

func (h *halfLink) Send(bufs [][]byte, dst netip.AddrPort) error {
	for _, b := range bufs {
		switch {
		case h.isGSI:
			h.s.sentOnGSI.Add(1)
		case isQP1(b):
			h.s.sentDataQP1.Add(1)
		}
	}
	return h.s.under.Send(bufs, dst)
}

func (h *halfLink) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) (int, error) {
	select {
	case b := <-h.q:
		f := <-h.from
		if !h.isGSI {
			defer h.s.held.Add(-1) // handed to the endpoint
			if h.s.hold.Load() {
				select {
				case <-h.s.gate:
				case <-h.done:
					return 0, ErrLinkClosed
				}
			}
		}
		if !h.isGSI && isQP1(b) {
			h.s.dataQP1Pkts.Add(1)
		}
		sizes[0] = copy(bufs[0][:cap(bufs[0])], b)
		from[0] = f
		return 1, nil
	case <-h.done:
		return 0, ErrLinkClosed
	}
}
func (h *halfLink) LocalAddr() netip.AddrPort { return h.s.under.LocalAddr() }
func (s *splitLink) Pending() bool            { return s.held.Load() > 0 }

func isDREQ(b []byte) bool {
	p, err := roce.ParsePacket(b)
	if err != nil {
		return false
	}
	h, _, err := roce.ParseMAD(p.Payload)
	return err == nil && h.AttrID == roce.AttrDREQ
}
func (h *halfLink) BatchSize() int { return 1 }
func (h *halfLink) Close() error {
	h.once.Do(func() { close(h.done) })
	if h.isGSI { // the endpoint closes both halves; the second one closes the link under them
		h.s.closeOnce.Do(func() { h.s.under.Close(); h.s.wg.Wait() })
	}
	return nil
}

// TestGSILink: an endpoint on a GSILink sends and receives the CM's MADs on the GSI
// link and everything else on its own: a connection through the CM (both as the
// listener and as the dialer) carries data, and no QP1 packet crosses the data half.
func TestGSILink(t *testing.T) {
	var split *splitLink
	o := &pairOpts{srvWrap: func(l Link) Link { split = newSplitLink(l); return split }}
	cli, srv, res, err := cmPair(t, o, acceptWith("welcome"))
	if err != nil || res.err != nil {
		t.Fatalf("connect through the GSI link: dial %v, accept %v", err, res.err)
	}
	// a SEND each way over the data half
	smr, sbuf := cli.reg(t, 4096, allAccess)
	rmr, rbuf := srv.reg(t, 4096, allAccess)
	fill(sbuf, 3)
	if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := cli.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, srv.rcq, 1); wc[0].Status != rnic.StatusSuccess || !bytes.Equal(rbuf, sbuf) {
		t.Fatalf("receive through the data half: %+v", wc[0])
	}
	wait(t, cli.scq, 1)
	if split.gsiPkts.Load() == 0 || split.sentOnGSI.Load() == 0 {
		t.Fatalf("MADs: %d received and %d sent on the GSI link, want both > 0", split.gsiPkts.Load(), split.sentOnGSI.Load())
	}
	if n, m := split.dataQP1Pkts.Load(), split.sentDataQP1.Load(); n != 0 || m != 0 {
		t.Fatalf("QP1 packets on the data half: %d received, %d sent", n, m)
	}
	// a packet to QP1 arriving on the data half is still the CM's (a GSILink need not
	// filter), and one to another QP on the GSI half is dropped and counted
	before := srv.ep.RxDropped.Load()
	h := roce.Header{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: srv.qp.Num(), PSN: 1}
	b := finish(h.Append(nil, 0), 0, cliAddr, srvAddr)
	split.gsi.q <- b
	split.gsi.from <- cliAddr
	deadline := time.Now().Add(5 * time.Second)
	for srv.ep.RxDropped.Load() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if srv.ep.RxDropped.Load() != before+1 {
		t.Fatalf("an RC packet on the GSI link: RxDropped %d → %d, want +1", before, srv.ep.RxDropped.Load())
	}
	_ = cli
}

// TestGSILinkClaims: listeners on a GSILink claim their service IDs (RC and UD port
// spaces) and release them on Close; a service the GSI link refuses fails Listen with
// EADDRINUSE, and port 0 moves on to a port it grants.
func TestGSILinkClaims(t *testing.T) {
	var split *splitLink
	_, srv := newPair(t, &pairOpts{noConnect: true, srvWrap: func(l Link) Link { split = newSplitLink(l); return split }})
	l, err := Listen(srv.ep, ":7174", nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ListenUD(srv.ep, ":7175", nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, ud := roce.ServiceID(roce.PortSpaceTCP, 7174), roce.ServiceID(roce.PortSpaceUDP, 7175)
	if c := split.claims(); !c[rc] || !c[ud] || len(c) != 2 {
		t.Fatalf("claims after Listen, ListenUD: %v", c)
	}
	split.mu.Lock()
	split.taken = roce.ServiceID(roce.PortSpaceTCP, 7176)
	split.mu.Unlock()
	if _, err := Listen(srv.ep, ":7176", nil); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen on a service the daemon refuses: %v", err)
	}
	l0, err := Listen(srv.ep, ":0", nil)
	if err != nil || !split.claims()[roce.ServiceID(roce.PortSpaceTCP, l0.Port())] {
		t.Fatalf("Listen on port 0: %v, port %d not claimed", err, l0.Port())
	}
	l.Close()
	u.Close()
	l0.Close()
	if c := split.claims(); len(c) != 0 {
		t.Fatalf("claims after Close: %v", c)
	}
}

// TestDREQAfterPendingACK: on a GSILink the peer's DREQ (GSI half) can overtake the
// peer's last ACK (data half, not yet read). The peer receives our SEND, acknowledges it
// and disconnects; our data half holds the ACK back until 2 ms after the DREQ arrived:
// the endpoint lets the data path read it before the DREQ ends the connection, so our
// SEND completes as sent, not flushed.
func TestDREQAfterPendingACK(t *testing.T) {
	var split *splitLink
	o := &pairOpts{srvWrap: func(l Link) Link { split = newSplitLink(l); return split }}
	cli, srv, res, err := cmPair(t, o, acceptWith("welcome"))
	if err != nil || res.err != nil {
		t.Fatalf("connect: %v %v", err, res.err)
	}
	smr, _ := srv.reg(t, 64, allAccess)
	rmr, _ := cli.reg(t, 64, allAccess)
	if err := cli.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	split.hold.Store(true)
	if err := srv.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, cli.rcq, 1); wc[0].Status != rnic.StatusSuccess {
		t.Fatalf("peer's receive: %+v", wc[0])
	}
	cli.conn.Disconnect(true) // its ACK left before the receive completed; now the DREQ
	if wc := wait(t, srv.scq, 1); wc[0].Status != rnic.StatusSuccess {
		t.Fatalf("our SEND, acknowledged before the peer's DREQ: %v (want success)", wc[0].Status)
	}
}
