package rocev2

// Service ID resolution (SIDR, IBTA Vol.1 §12.11): how RDMA-CM "connects" UD QPs in its
// RDMA_PS_UDP port space (rdma_connect and rdma_accept on a UD id; udaddy). The active
// side sends a SIDR_REQ to QP1 naming the service ID 0x0000000001110000 | port, with the
// 36-byte cma_hdr (and user data) as private data; the passive side answers with a
// SIDR_REP that echoes the Request ID and carries a status, the QPN and Q_Key to send
// datagrams to, and private data. Nothing stays connected: the requester then sends UD
// datagrams to that QPN and Q_Key.
//
//	ListenUD → UDListener.Accept → UDRequest.Accept (SIDR_REP, status 0) / Reject (status 2)
//	ResolveUD: SIDR_REQ, resent every response timeout, MaxRetries times → UDPeer
//
// Bounds: a listener keeps at most CMConfig.Backlog unanswered requests (a request over
// it is answered with status NO_QP and counted in Endpoint.CMRejectedLimit) and drops one
// unanswered after AcceptTimeout (counted in AcceptTimeouts); a duplicate SIDR_REQ of an
// answered request gets the same SIDR_REP again for two response timeouts (at most
// maxTimewait answers are remembered); a SIDR_REP matching no resolution in progress is
// counted in CMDropped.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softrnic/softrnic/roce"
)

// UDPQKey is RDMA-CM's default Q_Key of RDMA_PS_UDP QPs (RDMA_UDP_QKEY), the Q_Key
// udaddy's QPs use and put in their SIDR_REPs.
const UDPQKey = 0x01234567

// ErrSIDRStatus is wrapped by the error of a resolution the peer answered with a
// non-zero SIDR_REP status (*SIDRError).
var ErrSIDRStatus = errors.New("rocev2: service ID resolution refused")

// SIDRError is a SIDR_REP with a non-zero status (IBTA Vol.1 Table 120: 1 unsupported
// service, 2 rejected, 3 no QP, 4 redirect, 5 unsupported version).
type SIDRError struct {
	Status      uint8
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("rocev2: service ID resolution refused: SIDR_REP status %d", e.Status)
}

// Unwrap returns ErrSIDRStatus.
func (e *SIDRError) Unwrap() error { return ErrSIDRStatus }

// sidrAgent is the endpoint's SIDR state, kept by its cmAgent.
type sidrAgent struct {
	mu        sync.Mutex
	listeners map[uint16]*UDListener
	resolving map[uint32]*sidrResolve // by Request ID
	answered  map[cmKey]*sidrAnswer   // recent answers by the requester's IP and Request ID
	order     []*sidrAnswer           // answered, oldest first (the bound)
	pending   int                     // requests not yet answered, over all listeners
}

type sidrResolve struct {
	peer  netip.AddrPort
	reply chan roce.SIDRREP
}

type sidrAnswer struct {
	key   cmKey
	mad   []byte
	timer *time.Timer
}

func (a *cmAgent) sidrState() *sidrAgent {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sidr == nil {
		a.sidr = &sidrAgent{listeners: make(map[uint16]*UDListener), resolving: make(map[uint32]*sidrResolve),
			answered: make(map[cmKey]*sidrAnswer)}
	}
	return a.sidr
}

// sidrInput handles a SIDR_REQ or SIDR_REP MAD from peer (the cmAgent's dispatch).
func (a *cmAgent) sidrInput(h roce.MADHeader, data []byte, peer netip.AddrPort) {
	s := a.sidrState()
	switch h.AttrID {
	case roce.AttrSIDRREQ:
		m, err := roce.ParseSIDRREQ(data)
		if err != nil {
			a.e.CMDropped.Add(1)
			return
		}
		a.onSIDRREQ(s, h, &m, peer)
	case roce.AttrSIDRREP:
		m, err := roce.ParseSIDRREP(data)
		if err != nil {
			a.e.CMDropped.Add(1)
			return
		}
		s.mu.Lock()
		r := s.resolving[m.RequestID]
		s.mu.Unlock()
		if r == nil || r.peer.Addr() != peer.Addr() {
			a.e.CMDropped.Add(1)
			return
		}
		select {
		case r.reply <- m:
		default: // a duplicate
		}
	}
}

func (a *cmAgent) onSIDRREQ(s *sidrAgent, h roce.MADHeader, m *roce.SIDRREQ, peer netip.AddrPort) {
	key := cmKey{peer.Addr(), m.RequestID}
	reply := func(status uint8) {
		rep := roce.SIDRREP{RequestID: m.RequestID, Status: status, ServiceID: m.ServiceID}
		a.send(peer, roce.AppendCMMAD(nil, h.TransactionID, &rep))
	}
	s.mu.Lock()
	if ans := s.answered[key]; ans != nil {
		mad := ans.mad
		s.mu.Unlock()
		if mad != nil { // answered: the requester lost our SIDR_REP
			a.send(peer, mad)
		}
		return // else pending: the application decides
	}
	ps, port, ok := roce.ServiceIDPort(m.ServiceID)
	l := s.listeners[port]
	if !ok || ps != roce.PortSpaceUDP || l == nil || l.closed {
		s.mu.Unlock()
		reply(roce.SIDRUnsupported)
		return
	}
	cma, err := roce.ParseCMAHeader(m.PrivateData[:])
	if err != nil || cma.Version != roce.CMAVersion {
		s.mu.Unlock()
		reply(roce.SIDRReject)
		return
	}
	if !under(s.pending, a.e.cfg.MaxPendingRequests) || !under(l.pending, l.cfg.Backlog) {
		s.mu.Unlock()
		a.e.CMRejectedLimit.Add(1)
		reply(roce.SIDRNoQP)
		return
	}
	r := &UDRequest{l: l, req: *m, cma: cma, peer: peer, tid: h.TransactionID, key: key}
	s.answered[key] = &sidrAnswer{key: key} // pending: duplicates are dropped
	s.pending++
	l.pending++
	l.q = append(l.q, r)
	if d := l.cfg.AcceptTimeout; d > 0 {
		r.timer = time.AfterFunc(d, func() {
			if r.finish(nil) {
				a.e.AcceptTimeouts.Add(1)
			}
		})
	}
	s.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// UDListener receives SIDR requests for one port of RDMA-CM's UDP port space (service
// ID 0x0000000001110000 | port).
type UDListener struct {
	a     *cmAgent
	s     *sidrAgent
	port  uint16
	cfg   CMConfig
	ready chan struct{}
	quit  chan struct{}
	once  sync.Once

	// guarded by s.mu
	q       []*UDRequest
	pending int
	closed  bool
}

// ListenUD listens for SIDR requests on ep at addr "[ip]:port" (the IP part is ignored,
// as for Listen; port 0 picks a free one) with cfg's limits (nil: the defaults). A port
// that already has a UD listener is refused.
func ListenUD(ep *Endpoint, addr string, cfg *CMConfig) (*UDListener, error) {
	hp, up, hasUDP := strings.Cut(addr, "@")
	_, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadAddr, addr, err)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBadAddr, addr, err)
	}
	if hasUDP && up != strconv.Itoa(int(ep.LocalAddr().Port())) {
		return nil, fmt.Errorf("%w %q: the endpoint's UDP port is %d", ErrBadAddr, addr, ep.LocalAddr().Port())
	}
	if ep.closed.Load() {
		return nil, ErrEndpointClosed
	}
	ag := ep.cm()
	s := ag.sidrState()
	l := &UDListener{a: ag, s: s, port: uint16(port), cfg: cfg.norm(), ready: make(chan struct{}, 1), quit: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	free := func(p uint16) bool { return s.listeners[p] == nil }
	var err2 error
	if l.port, err2 = ep.claimPort(roce.PortSpaceUDP, l.port, free); err2 != nil {
		return nil, fmt.Errorf("rocev2: UD listen on port %d: %w", port, err2)
	}
	s.listeners[l.port] = l
	return l, nil
}

// Addr returns the listener's address: the endpoint's IP and UDP port with the port.
func (l *UDListener) Addr() Addr {
	la := l.a.e.LocalAddr()
	return Addr{IP: la.Addr(), Port: l.port, UDPPort: la.Port()}
}

// Close stops listening; requests not yet returned by Accept are answered with status
// REJECT.
func (l *UDListener) Close() error {
	l.once.Do(func() {
		close(l.quit)
		s := l.s
		s.mu.Lock()
		if s.listeners[l.port] == l {
			delete(s.listeners, l.port)
			l.a.e.releasePort(roce.PortSpaceUDP, l.port)
		}
		l.closed = true
		q := l.q
		l.q = nil
		s.mu.Unlock()
		for _, r := range q {
			_ = r.Reject(nil)
		}
	})
	return nil
}

// Accept waits for the next SIDR request.
func (l *UDListener) Accept(ctx context.Context) (*UDRequest, error) {
	for {
		l.s.mu.Lock()
		for len(l.q) > 0 {
			r := l.q[0]
			l.q[0] = nil
			l.q = l.q[1:]
			if !r.used {
				l.s.mu.Unlock()
				return r, nil
			}
		}
		l.s.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.quit:
			return nil, ErrCMClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// UDRequest is a received SIDR_REQ.
type UDRequest struct {
	l     *UDListener
	req   roce.SIDRREQ
	cma   roce.CMAHeader
	peer  netip.AddrPort
	tid   uint64
	key   cmKey
	timer *time.Timer
	used  bool // guarded by l.s.mu
}

// PrivateData returns the requester's private data after the cma_hdr.
func (r *UDRequest) PrivateData() []byte { return r.req.PrivateData[roce.CMAHeaderLen:] }

// RemoteAddr returns the requester's address: the IP and UDP port of its RoCE link and
// its RDMA-CM port from the cma_hdr.
func (r *UDRequest) RemoteAddr() Addr {
	return Addr{IP: r.peer.Addr(), Port: r.cma.Port, UDPPort: r.peer.Port()}
}

// LinkAddr returns where the requester's datagrams come from and replies go: its RoCE
// link address.
func (r *UDRequest) LinkAddr() netip.AddrPort { return r.peer }

// Accept answers with a SIDR_REP of status SUCCESS naming qpn and qkey (rdma_accept with
// conn_param.qp_num; RDMA-CM's Q_Key is UDPQKey) and pd (at most 136 bytes).
func (r *UDRequest) Accept(qpn, qkey uint32, pd []byte) error {
	if len(pd) > len(roce.SIDRREP{}.PrivateData) {
		return ErrPrivateDataLong
	}
	rep := roce.SIDRREP{RequestID: r.req.RequestID, Status: roce.SIDRSuccess, QPN: qpn & roce.QPNMask,
		ServiceID: r.req.ServiceID, QKey: qkey}
	copy(rep.PrivateData[:], pd)
	return r.answer(&rep)
}

// Reject answers with a SIDR_REP of status REJECT carrying pd (rdma_reject).
func (r *UDRequest) Reject(pd []byte) error {
	if len(pd) > len(roce.SIDRREP{}.PrivateData) {
		pd = nil
	}
	rep := roce.SIDRREP{RequestID: r.req.RequestID, Status: roce.SIDRReject, ServiceID: r.req.ServiceID}
	copy(rep.PrivateData[:], pd)
	return r.answer(&rep)
}

func (r *UDRequest) answer(rep *roce.SIDRREP) error {
	mad := roce.AppendCMMAD(nil, r.tid, rep)
	if !r.finish(mad) {
		return errCMUsed
	}
	r.l.a.send(r.peer, mad)
	return nil
}

// finish ends the request: answered with mad (kept for duplicates for two response
// timeouts), or with mad nil expired (forgotten). It reports whether it was open.
func (r *UDRequest) finish(mad []byte) bool {
	s, l := r.l.s, r.l
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.used {
		return false
	}
	r.used = true
	if r.timer != nil {
		r.timer.Stop()
	}
	s.pending--
	l.pending--
	ans := s.answered[r.key]
	if ans == nil {
		return true
	}
	if mad == nil {
		delete(s.answered, r.key)
		return true
	}
	ans.mad = mad
	ans.timer = time.AfterFunc(2*l.cfg.timeout(), func() { s.forget(ans) })
	s.order = append(s.order, ans)
	if len(s.order) > maxTimewait {
		s.forgetLocked(s.order[0])
	}
	return true
}

func (s *sidrAgent) forget(ans *sidrAnswer) {
	s.mu.Lock()
	s.forgetLocked(ans)
	s.mu.Unlock()
}

func (s *sidrAgent) forgetLocked(ans *sidrAnswer) {
	if s.answered[ans.key] == ans {
		delete(s.answered, ans.key)
	}
	for i, o := range s.order {
		if o == ans {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	if ans.timer != nil {
		ans.timer.Stop()
	}
}

// UDPeer is a resolved UD service: where its datagrams go (the RoCE link address), the
// QPN and Q_Key to send them to, and the SIDR_REP's private data.
type UDPeer struct {
	Addr        netip.AddrPort
	QPN, QKey   uint32
	PrivateData []byte
}

// ResolveUD resolves the UD service at addr ("ip:port", or "ip:port@udpport" for a peer
// whose RoCE link is not on UDP 4791) through ep with cfg's timers (nil: the defaults):
// SIDR_REQ with the cma_hdr and pd (at most 180 bytes), resent every response timeout
// until a SIDR_REP comes or MaxRetries resends passed (ErrCMTimeout). A SIDR_REP with a
// non-zero status is a *SIDRError.
func ResolveUD(ctx context.Context, ep *Endpoint, addr string, cfg *CMConfig, pd []byte) (UDPeer, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return UDPeer{}, err
	}
	if len(pd) > len(roce.SIDRREQ{}.PrivateData)-roce.CMAHeaderLen {
		return UDPeer{}, ErrPrivateDataLong
	}
	if ep.closed.Load() {
		return UDPeer{}, ErrEndpointClosed
	}
	cc := cfg.norm()
	ag := ep.cm()
	s := ag.sidrState()
	dst := ep.dialLinkAddr(a)
	r := &sidrResolve{peer: dst, reply: make(chan roce.SIDRREP, 1)}
	s.mu.Lock()
	var id uint32
	for id == 0 || s.resolving[id] != nil {
		id = rand.Uint32()
	}
	s.resolving[id] = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.resolving, id)
		s.mu.Unlock()
	}()
	local := ep.LocalAddr()
	req := roce.SIDRREQ{RequestID: id, PKey: roce.DefaultPKey, ServiceID: roce.ServiceID(roce.PortSpaceUDP, a.Port)}
	cma := roce.NewCMAHeader(local.Addr(), dst.Addr(), uint16(1024+rand.IntN(60000)))
	copy(req.PrivateData[:], append(cma.Append(nil), pd...))
	mad := roce.AppendCMMAD(nil, uint64(rand.Uint32())<<32|uint64(id), &req)
	t := time.NewTimer(cc.timeout())
	defer t.Stop()
	for retries := 0; ; {
		ag.send(dst, mad)
		select {
		case rep := <-r.reply:
			if rep.Status != roce.SIDRSuccess {
				return UDPeer{}, fmt.Errorf("rocev2: resolve %v: %w", a, &SIDRError{Status: rep.Status, PrivateData: append([]byte(nil), rep.PrivateData[:]...)})
			}
			return UDPeer{Addr: dst, QPN: rep.QPN & roce.QPNMask, QKey: rep.QKey, PrivateData: append([]byte(nil), rep.PrivateData[:]...)}, nil
		case <-t.C:
			if retries >= cc.MaxRetries {
				return UDPeer{}, fmt.Errorf("rocev2: resolve %v: %w", a, ErrCMTimeout)
			}
			retries++
			t.Reset(cc.timeout())
		case <-ctx.Done():
			return UDPeer{}, fmt.Errorf("rocev2: resolve %v: %w", a, ctx.Err())
		}
	}
}
