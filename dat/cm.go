package dat

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// Connection qualifiers map to TCP ports over iWARP the way OFA DAPL's cma
// provider maps a service ID (spec §6.4.2): a qualifier up to 0xFFFF is the
// port itself; a larger one folds into the top range,
// (q mod 32001) + (65535 - 32001). Qualifier 0 is not a valid port.
func portOf(q ConnQual) (int, bool) {
	const mod = 32001
	if q > 0xFFFF {
		return int(q%mod) + (0xFFFF - mod), true
	}
	return int(q), q > 0
}

// PSP is a Public Service Point (spec §6.4.4.1): a persistent listener that
// turns every connection request into a CR on its EVD.
type PSP struct {
	object
	qual  ConnQual
	evd   *EVD
	flags PSPFlags
	ln    *cm.Listener
}

// HandleType implements Handle.
func (p *PSP) HandleType() HandleType { return HandleTypePSP }
func (p *PSP) base() *object {
	if p == nil {
		return nil
	}
	return &p.object
}

// PSPParam is DAT_PSP_PARAM.
type PSPParam struct {
	IA       *IA
	ConnQual ConnQual
	EVD      *EVD
	Flags    PSPFlags
}

// PSP parameter mask bits.
const (
	PSPFieldIAHandle  = 0x01
	PSPFieldConnQual  = 0x02
	PSPFieldEVDHandle = 0x04
	PSPFieldPSPFlags  = 0x08
	PSPFieldAll       = 0x0F
)

func (ia *IA) needTransport() error {
	if ia.tr == nil {
		return ErrModelNotSupported
	}
	return nil
}

func (ia *IA) checkCREVD(evd *EVD) error {
	if !alive(evd) || evd.ia != ia || evd.flags&EVDCR == 0 {
		return ErrInvalidHandleEVDCR
	}
	return nil
}

func (ia *IA) listenAddr(port int) string {
	return net.JoinHostPort(ia.local.String(), strconv.Itoa(port))
}

// CreatePSP is dat_psp_create (spec §6.4.4.1.1). A qualifier already
// listened on is DAT_CONN_QUAL_IN_USE.
func (ia *IA) CreatePSP(qual ConnQual, evd *EVD, flags PSPFlags) (*PSP, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if err := ia.checkCREVD(evd); err != nil {
		return nil, err
	}
	port, ok := portOf(qual)
	if !ok {
		return nil, invalidArg(2)
	}
	if flags != PSPConsumer && flags != PSPProvider {
		return nil, invalidArg(4)
	}
	return ia.createPSP(qual, port, evd, flags)
}

// CreatePSPAny is dat_psp_create_any (spec §6.4.4.1.2): the provider picks
// a free qualifier and returns it.
func (ia *IA) CreatePSPAny(evd *EVD, flags PSPFlags) (*PSP, ConnQual, error) {
	if !alive(ia) {
		return nil, 0, ErrInvalidHandleIA
	}
	if err := ia.checkCREVD(evd); err != nil {
		return nil, 0, err
	}
	if flags != PSPConsumer && flags != PSPProvider {
		return nil, 0, invalidArg(4)
	}
	p, err := ia.createPSP(0, 0, evd, flags)
	if err != nil {
		if errors.Is(err, ErrConnQualInUse) {
			err = ErrConnQualUnavailable
		}
		return nil, 0, err
	}
	return p, p.qual, nil
}

func (ia *IA) createPSP(qual ConnQual, port int, evd *EVD, flags PSPFlags) (*PSP, error) {
	if err := ia.needTransport(); err != nil {
		return nil, err
	}
	ln, err := ia.tr.Listen(ia.listenAddr(port))
	if err != nil {
		return nil, ErrConnQualInUse
	}
	if qual == 0 {
		qual = ConnQual(ln.Port())
	}
	p := &PSP{qual: qual, evd: evd, flags: flags, ln: ln}
	p.ia = ia
	if err := ia.register(p); err != nil {
		_ = ln.Close()
		return nil, err
	}
	evd.addStream(0)
	ia.mu.Lock()
	ia.psps[p.qual] = p
	ia.mu.Unlock()
	ia.serve(ln, p)
	return p, nil
}

// serve runs the accept loop of a service point until its listener closes.
func (ia *IA) serve(ln *cm.Listener, sp Handle) {
	ia.wg.Add(1)
	go func() {
		defer ia.wg.Done()
		for {
			r, err := ln.Accept(ia.ctx)
			if err != nil {
				return
			}
			ia.arrival(sp, r)
		}
	}()
}

// Free is dat_psp_free (spec §6.4.4.1.3). Pending CRs stay valid.
func (p *PSP) Free() error {
	if !alive(p) {
		return ErrInvalidHandlePSP
	}
	p.ia.unregister(p)
	p.destroy()
	return nil
}

func (p *PSP) destroy() {
	if p.dead.Swap(true) {
		return
	}
	_ = p.ln.Close()
	p.ia.mu.Lock()
	if p.ia.psps[p.qual] == p {
		delete(p.ia.psps, p.qual)
	}
	p.ia.mu.Unlock()
	p.evd.removeStream(0)
}

// Query is dat_psp_query (spec §6.4.4.1.4).
func (p *PSP) Query(mask uint32) (PSPParam, error) {
	if !alive(p) {
		return PSPParam{}, ErrInvalidHandlePSP
	}
	if mask&^PSPFieldAll != 0 {
		return PSPParam{}, invalidArg(2)
	}
	return PSPParam{IA: p.ia, ConnQual: p.qual, EVD: p.evd, Flags: p.flags}, nil
}

// RSP is a Reserved Service Point (spec §6.4.4.3): a one-shot listener
// bound to one EP; it is consumed by the first connection request.
type RSP struct {
	object
	qual ConnQual
	evd  *EVD
	ep   *EP
	ln   *cm.Listener
	once sync.Once
}

// HandleType implements Handle.
func (r *RSP) HandleType() HandleType { return HandleTypeRSP }
func (r *RSP) base() *object {
	if r == nil {
		return nil
	}
	return &r.object
}

// RSPParam is DAT_RSP_PARAM.
type RSPParam struct {
	IA       *IA
	ConnQual ConnQual
	EVD      *EVD
	EP       *EP
}

// RSP parameter mask bits.
const (
	RSPFieldIAHandle  = 0x01
	RSPFieldConnQual  = 0x02
	RSPFieldEVDHandle = 0x04
	RSPFieldEPHandle  = 0x08
	RSPFieldAll       = 0x0F
)

// CreateRSP is dat_rsp_create (spec §6.4.4.3.1): ep (Unconnected) becomes
// Reserved until a request arrives.
func (ia *IA) CreateRSP(qual ConnQual, ep *EP, evd *EVD) (*RSP, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if !alive(ep) || ep.ia != ia {
		return nil, ErrInvalidHandleEP
	}
	if err := ia.checkCREVD(evd); err != nil {
		return nil, err
	}
	port, ok := portOf(qual)
	if !ok {
		return nil, invalidArg(2)
	}
	if err := ia.needTransport(); err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.state != EPStateUnconnected && ep.state != EPStateUnconfiguredUnconnected {
		return nil, invalidState(ep.state.invalidStateSub())
	}
	ln, err := ia.tr.Listen(ia.listenAddr(port))
	if err != nil {
		return nil, ErrConnQualInUse
	}
	r := &RSP{qual: qual, evd: evd, ep: ep, ln: ln}
	r.ia = ia
	if err := ia.register(r); err != nil {
		_ = ln.Close()
		return nil, err
	}
	evd.addStream(0)
	ep.rsp = r
	if ep.state == EPStateUnconnected {
		ep.state = EPStateReserved
	} else {
		ep.state = EPStateUnconfiguredReserved
	}
	ia.serve(ln, r)
	return r, nil
}

// Free is dat_rsp_free (spec §6.4.4.3.2): the EP returns to Unconnected.
func (r *RSP) Free() error {
	if !alive(r) {
		return ErrInvalidHandleRSP
	}
	r.ia.unregister(r)
	r.ep.mu.Lock()
	if r.ep.rsp == r {
		r.ep.rsp = nil
		if r.ep.state == EPStateReserved || r.ep.state == EPStateUnconfiguredReserved {
			r.ep.state = configuredState(EPStateUnconnected, r.ep.state == EPStateReserved)
		}
	}
	r.ep.mu.Unlock()
	r.destroy()
	return nil
}

func (r *RSP) destroy() {
	if r.dead.Swap(true) {
		return
	}
	_ = r.ln.Close()
	r.evd.removeStream(0)
}

// Query is dat_rsp_query (spec §6.4.4.3.3).
func (r *RSP) Query(mask uint32) (RSPParam, error) {
	if !alive(r) {
		return RSPParam{}, ErrInvalidHandleRSP
	}
	if mask&^RSPFieldAll != 0 {
		return RSPParam{}, invalidArg(2)
	}
	return RSPParam{IA: r.ia, ConnQual: r.qual, EVD: r.evd, EP: r.ep}, nil
}

// CSP is a Common Service Point (spec §6.4.4.2): a PSP bound to an IP
// address and port rather than a connection qualifier.
type CSP struct {
	object
	comm string
	addr *net.TCPAddr
	evd  *EVD
	ln   *cm.Listener
}

// HandleType implements Handle.
func (c *CSP) HandleType() HandleType { return HandleTypeCSP }
func (c *CSP) base() *object {
	if c == nil {
		return nil
	}
	return &c.object
}

// CSPParam is DAT_CSP_PARAM.
type CSPParam struct {
	IA      *IA
	Comm    string
	Address *net.TCPAddr
	EVD     *EVD
}

// CSP parameter mask bits.
const (
	CSPFieldIAHandle  = 0x01
	CSPFieldComm      = 0x02
	CSPFieldIAAddress = 0x04
	CSPFieldEVDHandle = 0x08
	CSPFieldAll       = 0x0F
)

// CreateCSP is dat_csp_create (spec §6.4.4.2.1). comm is the socket
// communicator as a Go network name ("tcp", "tcp4", "tcp6"); addr nil or
// port 0 lets the provider choose. A port in use is DAT_PORT_IN_USE.
func (ia *IA) CreateCSP(comm string, addr *net.TCPAddr, evd *EVD) (*CSP, error) {
	if !alive(ia) {
		return nil, ErrInvalidHandleIA
	}
	if err := ia.checkCREVD(evd); err != nil {
		return nil, err
	}
	switch comm {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, ErrCommNotSupported
	}
	if err := ia.needTransport(); err != nil {
		return nil, err
	}
	a := &net.TCPAddr{IP: ia.local}
	if addr != nil {
		if addr.IP != nil && !addr.IP.IsUnspecified() && !addr.IP.Equal(ia.local) {
			return nil, invalidArg(3)
		}
		if addr.Port < 0 || addr.Port > 0xFFFF {
			return nil, invalidArg(3)
		}
		a.Port = addr.Port
	}
	ln, err := ia.tr.Listen(a.String())
	if err != nil {
		return nil, ErrPortInUse
	}
	c := &CSP{comm: comm, addr: &net.TCPAddr{IP: a.IP, Port: ln.Port()}, evd: evd, ln: ln}
	c.ia = ia
	if err := ia.register(c); err != nil {
		_ = ln.Close()
		return nil, err
	}
	evd.addStream(0)
	ia.serve(ln, c)
	return c, nil
}

// CreateCSPAny is dat_csp_create_any: a CSP on a port the provider picks,
// returned with its address.
func (ia *IA) CreateCSPAny(comm string, evd *EVD) (*CSP, *net.TCPAddr, error) {
	c, err := ia.CreateCSP(comm, nil, evd)
	if err != nil {
		return nil, nil, err
	}
	return c, c.addr, nil
}

// Free is dat_csp_free (spec §6.4.4.2.2).
func (c *CSP) Free() error {
	if !alive(c) {
		return ErrInvalidHandleCSP
	}
	c.ia.unregister(c)
	c.destroy()
	return nil
}

func (c *CSP) destroy() {
	if c.dead.Swap(true) {
		return
	}
	_ = c.ln.Close()
	c.evd.removeStream(0)
}

// Query is dat_csp_query (spec §6.4.4.2.3).
func (c *CSP) Query(mask uint32) (CSPParam, error) {
	if !alive(c) {
		return CSPParam{}, ErrInvalidHandleCSP
	}
	if mask&^CSPFieldAll != 0 {
		return CSPParam{}, invalidArg(2)
	}
	return CSPParam{IA: c.ia, Comm: c.comm, Address: c.addr, EVD: c.evd}, nil
}

// CR is a pending Connection Request (spec §6.4.5).
type CR struct {
	object
	req     *cm.ConnRequest
	sp      Handle
	localEP *EP
	pdata   []byte
	qual    ConnQual
	raddr   net.Addr
	rport   ConnQual
	mu      sync.Mutex
	done    bool
}

// HandleType implements Handle.
func (c *CR) HandleType() HandleType { return HandleTypeCR }
func (c *CR) base() *object {
	if c == nil {
		return nil
	}
	return &c.object
}

// CRParam is DAT_CR_PARAM.
type CRParam struct {
	RemoteAddr     net.Addr
	RemotePortQual ConnQual
	PrivateData    []byte
	LocalEP        *EP
}

// CR parameter mask bits.
const (
	CRFieldRemoteIAAddress = 0x01
	CRFieldRemotePortQual  = 0x02
	CRFieldPrivateDataSize = 0x04
	CRFieldPrivateData     = 0x08
	CRFieldLocalEPHandle   = 0x10
	CRFieldAll             = 0x1F
)

// arrival handles a connection request received by a service point.
func (ia *IA) arrival(sp Handle, r *cm.ConnRequest) {
	cr := &CR{req: r, sp: sp, pdata: append([]byte(nil), r.PrivateData()...), raddr: r.RemoteAddr()}
	cr.ia = ia
	if ta, ok := r.RemoteAddr().(*net.TCPAddr); ok {
		cr.rport = ConnQual(ta.Port)
	}
	var evd *EVD
	switch s := sp.(type) {
	case *PSP:
		evd, cr.qual = s.evd, s.qual
		if s.flags == PSPProvider {
			ep, err := ia.createEP(nil, nil, nil, nil, nil, nil)
			if err != nil {
				_ = r.Reject(nil)
				return
			}
			ep.mu.Lock()
			ep.state = EPStateUnconfiguredTentative
			ep.provider = true
			ep.cr = cr
			ep.mu.Unlock()
			cr.localEP = ep
		}
	case *CSP:
		evd = s.evd
		cr.qual = ConnQual(s.addr.Port)
	case *RSP:
		evd, cr.qual = s.evd, s.qual
		consumed := false
		s.once.Do(func() { consumed = true })
		if !consumed || !alive(s) {
			_ = r.Reject(nil)
			return
		}
		ep := s.ep
		ep.mu.Lock()
		ep.rsp = nil
		ep.cr = cr
		ep.state = configuredState(EPStatePassiveConnectionPending, ep.state == EPStateReserved)
		ep.mu.Unlock()
		cr.localEP = ep
		sp = nil // the RSP is consumed (spec: sp_handle is DAT_HANDLE_NULL)
		ia.unregister(s)
		s.dead.Store(true)
		ia.wg.Add(1)
		go func() {
			defer ia.wg.Done()
			_ = s.ln.Close()
			s.evd.removeStream(0)
		}()
	}
	if err := ia.register(cr); err != nil {
		_ = r.Reject(nil)
		return
	}
	var la net.Addr = r.LocalAddr()
	ev := Event{Number: ConnectionRequestEvent, CR: CRArrival{SP: sp, LocalAddr: la, ConnQual: cr.qual, CR: cr}}
	if err := evd.post(ev, true); err != nil {
		// spec §6.3.1: a request that would overflow the EVD is rejected
		cr.Reject(nil)
	}
}

// Query is dat_cr_query (spec §6.4.5.1).
func (c *CR) Query(mask uint32) (CRParam, error) {
	if !alive(c) {
		return CRParam{}, ErrInvalidHandleCR
	}
	if mask&^CRFieldAll != 0 {
		return CRParam{}, invalidArg(2)
	}
	return CRParam{RemoteAddr: c.raddr, RemotePortQual: c.rport, PrivateData: c.pdata, LocalEP: c.localEP}, nil
}

// PrivateData returns the private data of the request.
func (c *CR) PrivateData() []byte { return c.pdata }

func (c *CR) take() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.done = true
	return true
}

// Accept is dat_cr_accept (spec §6.4.5.2). ep may be nil when the CR has a
// local EP (RSP or provider-created EP). The connection completes with a
// DAT_CONNECTION_EVENT_ESTABLISHED on the EP's connect EVD, or with
// DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR if the transport fails.
func (c *CR) Accept(ep *EP, privateData []byte) error {
	if !alive(c) {
		return ErrInvalidHandleCR
	}
	if ep == nil {
		ep = c.localEP
	}
	if !alive(ep) || ep.ia != c.ia {
		return ErrInvalidHandleEP
	}
	if c.localEP != nil && ep != c.localEP {
		return invalidArg(2)
	}
	if len(privateData) > c.ia.tr.MaxPrivateData(cm.MsgAccept) {
		return invalidArg(4)
	}
	ep.mu.Lock()
	switch ep.state {
	case EPStateUnconnected:
		if c.localEP != nil {
			ep.mu.Unlock()
			return ErrInvalidStateEPUnconnected
		}
	case EPStatePassiveConnectionPending, EPStateTentativeConnectionPending:
	default:
		st := ep.state
		ep.mu.Unlock()
		return invalidState(st.invalidStateSub())
	}
	if ep.qp == nil {
		ep.mu.Unlock()
		return ErrInvalidStateEPNotReady
	}
	if !c.take() {
		ep.mu.Unlock()
		return ErrInvalidHandleCR
	}
	ep.state = EPStateCompletionPending
	ep.hold.Store(true)
	ep.cr = nil
	qp := ep.qp
	ep.mu.Unlock()
	conn, err := c.req.Accept(qp, cm.Param{PrivateData: privateData, IRD: ep.attr.MaxRDMAReadIn, ORD: ep.attr.MaxRDMAReadOut})
	c.ia.unregister(c)
	c.dead.Store(true)
	ep.mu.Lock()
	if err != nil {
		ep.state = EPStateDisconnected
		ep.postConn(ConnectionEventAcceptCompletionError, nil)
		ep.releaseHold()
		ep.mu.Unlock()
		return nil
	}
	ep.conn = conn
	ep.localAddr, ep.remoteAddr = conn.LocalAddr(), conn.RemoteAddr()
	ep.localPort, ep.remotePort = c.qual, c.rport
	if ep.state == EPStateCompletionPending {
		ep.state = EPStateConnected
		ep.postConn(ConnectionEventEstablished, nil)
	}
	ep.releaseHold()
	ep.mu.Unlock()
	return nil
}

// Reject is dat_cr_reject (spec §6.4.5.3): the peer sees a peer reject
// carrying privateData. A provider-created EP is destroyed; an RSP's EP
// returns to Unconnected.
func (c *CR) Reject(privateData []byte) error {
	if !alive(c) {
		return ErrInvalidHandleCR
	}
	if len(privateData) > c.ia.tr.MaxPrivateData(cm.MsgReject) {
		return invalidArg(3)
	}
	if !c.take() {
		return ErrInvalidHandleCR
	}
	c.reject(privateData)
	return nil
}

func (c *CR) reject(pd []byte) {
	c.done = true
	_ = c.req.Reject(pd)
	c.ia.unregister(c)
	c.dead.Store(true)
	if ep := c.localEP; ep != nil && alive(ep) {
		ep.mu.Lock()
		prov := ep.provider
		if !prov {
			ep.cr = nil
			ep.state = configuredState(EPStateUnconnected, ep.qp != nil)
		}
		ep.mu.Unlock()
		if prov {
			ep.ia.unregister(ep)
			ep.destroy()
		}
	}
}

// Handoff is dat_cr_handoff (spec §6.4.5.4): the request moves to the PSP
// of this IA listening on qual, whose EVD gets a new CR arrival event.
func (c *CR) Handoff(qual ConnQual) error {
	if !alive(c) {
		return ErrInvalidHandleCR
	}
	c.ia.mu.Lock()
	p := c.ia.psps[qual]
	c.ia.mu.Unlock()
	if p == nil || !alive(p) || qual == c.qual {
		return invalidArg(2)
	}
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return ErrInvalidHandleCR
	}
	c.sp, c.qual = p, qual
	c.mu.Unlock()
	return p.evd.post(Event{Number: ConnectionRequestEvent, CR: CRArrival{SP: p, LocalAddr: c.req.LocalAddr(), ConnQual: qual, CR: c}}, true)
}

func (c *CR) destroy() {
	if c.dead.Swap(true) {
		return
	}
	c.mu.Lock()
	done := c.done
	c.done = true
	c.mu.Unlock()
	if !done {
		_ = c.req.Reject(nil)
	}
}

// ---- active side ----

// postConn posts a connection event for the EP (caller holds ep.mu).
func (ep *EP) postConn(n EventNumber, pdata []byte) {
	if ep.connEVD != nil {
		_ = ep.connEVD.post(Event{Number: n, Conn: ConnectionData{EP: ep, PrivateData: pdata}}, true)
	}
}

// Connect is dat_ep_connect (spec §6.6.14): an active connection to the
// service point at remote (an IP address; a port in it is ignored) and
// connection qualifier qual. The result arrives on the EP's connect EVD:
// ESTABLISHED (with the peer's private data), PEER_REJECTED,
// NON_PEER_REJECTED, UNREACHABLE or TIMED_OUT.
func (ep *EP) Connect(remote net.Addr, qual ConnQual, timeout Timeout, privateData []byte, qos QoS, flags ConnectFlags) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	ip, err := remoteIP(remote)
	if err != nil {
		return err
	}
	port, ok := portOf(qual)
	if !ok {
		return invalidArg(3)
	}
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	if ua, ok := remote.(*net.UDPAddr); ok && ua.Port != 0 {
		addr += "@" + strconv.Itoa(ua.Port) // RoCEv2: the remote IA's UDP port
	}
	return ep.connect(addr, &net.TCPAddr{IP: ip, Port: port}, qual, timeout, privateData, qos, flags)
}

// CommonConnect is dat_ep_common_connect (spec §6.6.15): connect to a CSP
// at remote (IP address and port).
func (ep *EP) CommonConnect(remote *net.TCPAddr, timeout Timeout, privateData []byte) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if remote == nil {
		return ErrInvalidAddressMalformed
	}
	ip, err := remoteIP(&net.IPAddr{IP: remote.IP})
	if err != nil {
		return err
	}
	if remote.Port <= 0 || remote.Port > 0xFFFF {
		return invalidArg(2)
	}
	a := &net.TCPAddr{IP: ip, Port: remote.Port}
	return ep.connect(a.String(), a, ConnQual(remote.Port), timeout, privateData, QoSBestEffort, ConnectDefault)
}

// DupConnect is dat_ep_dup_connect (spec §6.6.16): connect to the same
// remote as the connected dup EP.
func (ep *EP) DupConnect(dup *EP, timeout Timeout, privateData []byte, qos QoS) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if !alive(dup) || dup.ia != ep.ia {
		return invalidHandle(SubInvalidHandle2)
	}
	dup.mu.Lock()
	st, ra, rp := dup.state, dup.remoteAddr, dup.remotePort
	dup.mu.Unlock()
	if st != EPStateConnected {
		return invalidState(st.invalidStateSub())
	}
	ta, ok := ra.(*net.TCPAddr)
	if !ok {
		return ErrInvalidState
	}
	return ep.connect(ta.String(), ta, rp, timeout, privateData, qos, ConnectDefault)
}

func remoteIP(a net.Addr) (net.IP, error) {
	var ip net.IP
	switch v := a.(type) {
	case *net.IPAddr:
		if v != nil {
			ip = v.IP
		}
	case *net.TCPAddr:
		if v != nil {
			ip = v.IP
		}
	case *net.UDPAddr:
		if v != nil {
			ip = v.IP
		}
	}
	if ip == nil || ip.IsUnspecified() {
		return nil, ErrInvalidAddressMalformed
	}
	if ip.IsMulticast() || ip.Equal(net.IPv4bcast) {
		return nil, ErrInvalidAddressUnsupported
	}
	return ip, nil
}

func (ep *EP) connect(addr string, ra *net.TCPAddr, qual ConnQual, timeout Timeout, pd []byte, qos QoS, flags ConnectFlags) error {
	if timeout <= 0 {
		return invalidArg(4)
	}
	ia := ep.ia
	if err := ia.needTransport(); err != nil {
		return err
	}
	addr = ia.peerAddr(addr)
	if len(pd) > ia.tr.MaxPrivateData(cm.MsgConnect) {
		return invalidArg(6)
	}
	if flags&^(ConnectMultipathRequested|ConnectMultipathRequired) != 0 {
		return invalidArg(8)
	}
	if qos&^QoSBestEffort != 0 || flags&ConnectMultipathRequired != 0 {
		return ErrModelNotSupported // spec §6.6.14: unsupported qos or multipath
	}
	ep.mu.Lock()
	if ep.state != EPStateUnconnected {
		st := ep.state
		ep.mu.Unlock()
		return invalidState(st.invalidStateSub())
	}
	ctx, cancel := context.WithCancel(ia.ctx)
	if timeout != TimeoutInfinite {
		ctx, cancel = context.WithTimeout(ia.ctx, timeout)
	}
	ep.state = EPStateActiveConnectionPending
	ep.hold.Store(true)
	ep.cancel = cancel
	ep.remoteAddr, ep.remotePort = ra, qual
	qp := ep.qp
	p := cm.Param{PrivateData: append([]byte(nil), pd...), IRD: ep.attr.MaxRDMAReadIn, ORD: ep.attr.MaxRDMAReadOut}
	ep.mu.Unlock()
	ia.wg.Add(1)
	go func() {
		defer ia.wg.Done()
		defer cancel()
		conn, err := ia.tr.Dial(ctx, qp, addr, p)
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		ep.mu.Lock()
		defer ep.mu.Unlock()
		ep.cancel = nil
		if ep.state != EPStateActiveConnectionPending || ep.dead.Load() || ep.qp != qp {
			if conn != nil {
				conn.Abort()
			}
			if ep.qp == qp {
				ep.releaseHold()
			}
			return
		}
		if err != nil {
			ep.state = EPStateDisconnected
			n, rpd := connEvent(err)
			if timedOut {
				n, rpd = ConnectionEventTimedOut, nil
			}
			ep.postConn(n, rpd)
			ep.releaseHold()
			ia.goDestroy(qp) // flush pre-posted receives to the recv EVD
			return
		}
		peer := append([]byte(nil), conn.PrivateData()...)
		ep.conn = conn
		ep.peerPData = peer
		ep.localAddr = conn.LocalAddr()
		if ta, ok := conn.LocalAddr().(*net.TCPAddr); ok {
			ep.localPort = ConnQual(ta.Port)
		}
		ep.state = EPStateConnected
		ep.postConn(ConnectionEventEstablished, peer)
		ep.releaseHold()
	}()
	return nil
}

// Disconnect is dat_ep_disconnect (spec §6.6.17). Graceful waits for the
// outstanding requests (DisconnectPending); abrupt flushes them. During
// connection establishment either flag aborts it. Completion is a
// DAT_CONNECTION_EVENT_DISCONNECTED on the connect EVD. Disconnecting a
// Disconnected EP is a no-op.
func (ep *EP) Disconnect(flags CloseFlags) error {
	if !alive(ep) {
		return ErrInvalidHandleEP
	}
	if flags != CloseAbrupt && flags != CloseGraceful {
		return invalidArg(2)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch ep.state {
	case EPStateDisconnected:
		return nil
	case EPStateActiveConnectionPending, EPStateCompletionPending:
		if ep.cancel != nil {
			ep.cancel()
		}
		if ep.conn != nil {
			ep.conn.Abort()
		}
		ep.state = EPStateDisconnected
		ep.postConn(ConnectionEventDisconnected, nil)
		ep.releaseHold()
		ep.ia.goDestroy(ep.qp)
		return nil
	case EPStateDisconnectPending:
		if flags == CloseGraceful {
			return nil
		}
		if ep.conn != nil {
			ep.conn.Abort()
		}
		return nil
	case EPStateConnected:
		ep.state = EPStateDisconnectPending
		qp, conn := ep.qp, ep.conn
		if flags == CloseGraceful {
			qp.Disconnect()
		} else if conn != nil {
			conn.Abort()
		}
		ia := ep.ia
		ia.wg.Add(1)
		go func() {
			defer ia.wg.Done()
			select {
			case <-qp.Done():
			case <-ia.closedCh:
				return
			}
			ep.connLost(qp, ConnectionEventDisconnected)
		}()
		return nil
	}
	return invalidState(ep.state.invalidStateSub())
}

// connLost moves a connected EP to Disconnected with event n (the
// transport reported the end of the connection); idempotent.
func (ep *EP) connLost(qp *rnic.QP, n EventNumber) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.qp != qp {
		return
	}
	switch ep.state {
	case EPStateConnected, EPStateCompletionPending:
	case EPStateDisconnectPending:
		n = ConnectionEventDisconnected
	default:
		return
	}
	ep.state = EPStateDisconnected
	ep.postConn(n, nil)
}

// broken aborts the connection after a local fatal condition (an
// overflowed EVD) and reports DAT_CONNECTION_EVENT_BROKEN.
func (ep *EP) broken() {
	// called from completion paths that may run under ep.mu (a flush inside
	// Reset or Modify): do the work on a tracked goroutine
	ia := ep.ia
	ia.wg.Add(1)
	go func() {
		defer ia.wg.Done()
		ep.breakConn()
	}()
}

func (ep *EP) breakConn() {
	ep.mu.Lock()
	conn, qp, st := ep.conn, ep.qp, ep.state
	ep.mu.Unlock()
	if st != EPStateConnected && st != EPStateDisconnectPending {
		return
	}
	if conn != nil {
		conn.Abort()
	}
	ep.connLost(qp, ConnectionEventBroken)
}

// handleDeviceEvent maps engine asynchronous events to DAT events.
func (ia *IA) handleDeviceEvent(ev rnic.AsyncEvent) {
	switch ev.Type {
	case rnic.EventDisconnected, rnic.EventQPFatal, rnic.EventQPAccessErr, rnic.EventQPReqErr:
		if ev.QP == nil {
			return
		}
		ep := ia.epByQPN(ev.QP.Num())
		if ep == nil {
			return
		}
		n := ConnectionEventBroken
		if ev.Type == rnic.EventDisconnected || cm.IsPeerClose(ev.Err) {
			n = ConnectionEventDisconnected
		}
		// The event is posted once the QP's work has been flushed and its completions
		// delivered (QP.Done), so on every EVD the DTO completions of the connection,
		// successful and flushed, precede its end (spec §6.6.17). A fatal error is
		// announced by the engine before the transport has stopped.
		qp := ev.QP
		ia.wg.Add(1)
		go func() {
			defer ia.wg.Done()
			select {
			case <-qp.Done():
			case <-ia.closedCh:
				return
			}
			ep.connLost(qp, n)
		}()
	case rnic.EventSRQLimitReached:
		ia.mu.Lock()
		s := ia.srqs[ev.SRQ]
		ia.mu.Unlock()
		if s != nil {
			ia.asyncEvent(SRQLowWatermarkEvent, s, SRQLowWatermarkReason)
		}
	}
}

// goDestroy destroys a QP (flushing its work) on a goroutine the IA waits
// for at close.
func (ia *IA) goDestroy(qp *rnic.QP) {
	ia.wg.Add(1)
	go func() {
		defer ia.wg.Done()
		_ = qp.Destroy()
	}()
}

// peerAddr completes a remote address for the IA's network. A RoCEv2 peer IA whose UDP
// port is not given ("ip:port@udp") is taken to be on this IA's own UDP port: IAs on the
// standard port talk to peers on 4791, and IAs of a test or of processes sharing a host
// without a daemon on another port find each other (see rnic/rocev2.Addr).
func (ia *IA) peerAddr(addr string) string {
	if ia.tr.Network() != cm.RoCEv2 || strings.Contains(addr, "@") || ia.udpPort == 0 {
		return addr
	}
	return addr + "@" + strconv.Itoa(ia.udpPort)
}
