package rocev2

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// AH is an address handle for UD sends: the peer's link address, QP number
// and Q_Key (ibv_ah + ud.remote_qpn/remote_qkey).
type AH struct {
	Addr netip.AddrPort
	QPN  uint32
	QKey uint32
}

// GRHLen is the size of the GRH area at the start of every UD receive
// buffer (IBTA §11.4.1.2; for RoCEv2 IPv4 the IP header sits in its last 20
// bytes, as rxe writes it).
const GRHLen = 40

// UDQP is an unreliable-datagram QP (IBTA Vol.1 §9.8.4): SEND and
// SEND with immediate, one packet per message (≤ path MTU), DETH with the
// Q_Key and source QP, no ACKs. It binds an rnic.QP; post sends with
// UDQP.PostSend (which carries the address handle), receives with
// QP.PostRecv as usual. Received messages land after a 40-byte GRH.
type UDQP struct {
	e    *Endpoint
	qp   *rnic.TransportQP
	qkey uint32
	mtu  int

	mu   sync.Mutex // order of PostSend and the AH FIFO
	ahs  []AH
	ahH  int
	ahN  int
	kick chan struct{}
	done chan struct{}
	stop atomic.Bool
	psn  roce.PSN

	// QKeyViolations counts datagrams dropped for a wrong Q_Key.
	QKeyViolations atomic.Uint64
	// Dropped counts datagrams dropped for want of a receive.
	Dropped atomic.Uint64

	txb  [][]byte
	hdr  roce.Header
	last struct { // source of the latest completed receive
		sync.Mutex
		from netip.AddrPort
		qpn  uint32
	}
}

// ErrQPNumReserved is returned for a QP numbered 0 or 1 (the SMI and the GSI
// QP, which carries the CM; rnic never allocates them).
var ErrQPNumReserved = errors.New("rocev2: QP numbers 0 and 1 are the SMI and GSI QPs")

// CreateUD binds qp (Idle) as a UD QP with Q_Key qkey and moves it to RTS.
func (e *Endpoint) CreateUD(qp *rnic.QP, qkey uint32) (*UDQP, error) {
	if qp.Num() < rnic.FirstQPN {
		return nil, ErrQPNumReserved
	}
	u := &UDQP{e: e, qkey: qkey, mtu: e.params.MTU.Bytes(), ahs: make([]AH, qp.Attr().Cap.MaxSendWR),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	u.txb = make([][]byte, 1)
	u.txb[0] = make([]byte, 0, MaxPacket)
	tq, err := rnic.AttachTransport(qp, u)
	if err != nil {
		return nil, err
	}
	u.qp = tq
	e.mu.Lock()
	if err := e.Err(); err != nil {
		e.mu.Unlock()
		u.Disconnect(false)
		go u.run()
		<-u.done
		return nil, fmt.Errorf("rocev2: endpoint stopped: %w", err)
	}
	e.ud[qp.Num()] = u
	e.mu.Unlock()
	e.connsChanged()
	go u.run()
	if err := tq.Established(); err != nil {
		u.Disconnect(false)
		<-u.done
		return nil, err
	}
	return u, nil
}

// QP returns the bound queue pair.
func (u *UDQP) QP() *rnic.QP { return u.qp.QP() }

// PostSend posts a SEND (OpSend or OpSendImm) to the peer named by ah.
func (u *UDQP) PostSend(ah AH, wr *rnic.SendWR) error {
	if wr.Opcode != rnic.OpSend && wr.Opcode != rnic.OpSendImm {
		return rnic.ErrNotSupported
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ahN == len(u.ahs) {
		return rnic.ErrQueueFull
	}
	i := (u.ahH + u.ahN) % len(u.ahs)
	u.ahs[i] = ah
	u.ahN++
	if err := u.qp.QP().PostSend(wr); err != nil {
		u.ahN--
		return err
	}
	return nil
}

// LastSource returns the source address and QP number of the most recently
// completed receive (rnic.Completion has no src_qp field).
func (u *UDQP) LastSource() (netip.AddrPort, uint32) {
	u.last.Lock()
	defer u.last.Unlock()
	return u.last.from, u.last.qpn
}

// SendQueued implements rnic.QPTransport.
func (u *UDQP) SendQueued() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// Disconnect implements rnic.QPTransport (UD has nothing to drain).
func (u *UDQP) Disconnect(graceful bool) {
	u.stop.Store(true)
	u.SendQueued()
}

func (u *UDQP) run() {
	for {
		if u.stop.Load() {
			u.e.mu.Lock()
			delete(u.e.ud, u.qp.QP().Num())
			u.e.mu.Unlock()
			u.e.connsChanged()
			u.qp.TransportDone(nil)
			close(u.done)
			return
		}
		w := u.qp.NextSend()
		if w == nil {
			<-u.kick
			continue
		}
		u.mu.Lock()
		ah := u.ahs[u.ahH]
		u.ahH = (u.ahH + 1) % len(u.ahs)
		u.ahN--
		u.mu.Unlock()
		if w.Len > uint64(u.mtu) {
			u.qp.CompleteSend(w, rnic.StatusLocLenErr)
			continue
		}
		h := &u.hdr
		h.Opcode = roce.UDSendOnly
		if w.Opcode == rnic.OpSendImm {
			h.Opcode = roce.UDSendOnlyImm
			h.Imm = w.Imm
		}
		h.PKey, h.DestQP, h.PSN = u.e.params.PKey, ah.QPN, u.psn
		h.SE = w.Flags&rnic.Solicited != 0
		// IBTA §10.2.4: a Q_Key with the high bit set means "use the QP's own".
		h.QKey, h.SrcQP = ah.QKey, u.qp.QP().Num()
		if ah.QKey&roce.QKeyControlled != 0 {
			h.QKey = u.qkey
		}
		u.psn = u.psn.Add(1)
		n := int(w.Len)
		b := h.Append(u.txb[0][:0], n)
		b = gather(b, w.Segs, 0, n)
		b = finish(b, n, u.e.link.LocalAddr(), ah.Addr)
		u.txb[0] = b
		u.e.send(u.txb, ah.Addr)
		u.qp.CountTx(n, 1)
		u.qp.CompleteSend(w, rnic.StatusSuccess)
	}
}

// inputUD delivers a UD packet: QP1 to the CM, others to their UDQP after
// the Q_Key check (IBTA §10.2.4, rxe check_keys). ipID is the sender's IPv4
// ID as solved from the ICRC; it goes into the GRH's IPv4 header.
func (e *Endpoint) inputUD(p roce.Packet, from netip.AddrPort, qpn uint32, ipID uint16) {
	e.mu.RLock()
	gsi := e.gsi
	u := e.ud[qpn]
	e.mu.RUnlock()
	if qpn == 1 {
		if gsi != nil {
			gsi(&p, from)
		}
		return
	}
	if u == nil || p.DETH == nil {
		e.RxDropped.Add(1)
		return
	}
	if p.DETH.QKey() != u.qkey {
		u.QKeyViolations.Add(1)
		return
	}
	w, st := u.qp.TakeRecv()
	if w == nil {
		u.Dropped.Add(1)
		return
	}
	if st != rnic.StatusSuccess {
		u.qp.CompleteRecv(w, rnic.RecvResult{Status: st, Opcode: rnic.WCRecv})
		return
	}
	n := len(p.Payload)
	if w.Len < uint64(GRHLen+n) {
		u.qp.CompleteRecv(w, rnic.RecvResult{Status: rnic.StatusLocLenErr, Opcode: rnic.WCRecv})
		return
	}
	var grh [GRHLen + 8]byte
	local := e.link.LocalAddr()
	ib := len(p.Raw) - roce.ICRCLen
	if from.Addr().Is4() && local.Addr().Is4() {
		roce.AppendIPv4UDP(grh[:20], from.Addr().As4(), local.Addr().As4(), 0, 64, ipID, from.Port(), local.Port(), ib)
	} else {
		roce.AppendIPv6UDP(grh[:0], from.Addr().As16(), local.Addr().As16(), 0, 64, 0, from.Port(), local.Port(), ib)
	}
	w.Segs.WriteAt(grh[:GRHLen], 0)
	w.Segs.WriteAt(p.Payload, GRHLen)
	res := rnic.RecvResult{Opcode: rnic.WCRecv, ByteLen: uint32(GRHLen + n)}
	if p.ImmDt != nil {
		res.Flags |= rnic.WCWithImm
		res.Imm = p.ImmDt.Imm()
	}
	if p.BTH.SE() {
		res.Flags |= rnic.WCSolicited
	}
	u.last.Lock()
	u.last.from, u.last.qpn = from, p.DETH.SrcQP()
	u.last.Unlock()
	u.qp.CountRx(n, 1)
	u.qp.CompleteRecv(w, res)
}

// Network names the transport: "rocev2" (rnic.QP.Transport reports it).
func (u *UDQP) Network() string { return "rocev2" }
