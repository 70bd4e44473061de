package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/softrnic/softrnic/capture"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
)

// The networks a Transport speaks.
const (
	IWARP  = "iwarp"  // RDMAP/DDP/MPA over TCP (RFC 5040, 5041, 5044, 6581)
	RoCEv2 = "rocev2" // InfiniBand RC/UC/UD over UDP port 4791 (IBTA Vol.1, Annex A17)
)

// Options configure a Transport. The zero value (or nil) is the default configuration of
// every field; fields for the other network are ignored.
type Options struct {
	// IWARP configures MPA and the iWARP connections (nil: iwarp.DefaultConfig(): MPA
	// rev 2 with CRC, peer-to-peer with RTRs, siw's private-data cap).
	IWARP *iwarp.Config
	// RoCE configures the RoCEv2 endpoint (nil: rocev2's defaults: MTU 1024, ACK timeout
	// 14, 7 retries, 7 RNR retries).
	RoCE *rocev2.Config
	// CM configures the IB CM timers (nil: RDMA-CM's: response timeout 20, 15 retries).
	CM *rocev2.CMConfig
	// UDP configures the RoCEv2 UDP socket (nil: rocev2.ListenUDP's automatic choice —
	// UDP GSO on IPv6 links, no GRO).
	UDP *rocev2.UDPOptions
	// Link, when set, carries RoCEv2 instead of a UDP socket of its own (an AF_XDP link,
	// an in-memory test link, a steered socket); the Transport closes it on Close.
	Link rocev2.Link
	// TCP, when set, carries iWARP instead of the kernel's TCP: listeners and dialed
	// connections come from it, and the transport's address must be one it serves.
	// link/netstack's *Stack is one: a user-space TCP on an AF_XDP port, which the RoCEv2
	// AF_XDP link of rnic/rocev2/xdp can share (one XDP program, one UMEM; see Open).
	// The Transport does not close it.
	TCP TCPStack
	// Capture, when set, records what the transport sends and receives (package
	// capture): each iWARP connection as its reconstructed MPA stream, each RoCEv2
	// datagram of the link. Recording drops rather than slows the datapath; the caller
	// closes the Writer after the Transport. (Frames of an AF_XDP port are recorded as
	// they are by giving the Writer to the port as its afxdp.Options.Tap instead.)
	Capture *capture.Writer
}

// TCPStack is a TCP implementation other than the kernel's: Listen has net.Listen's
// signature and DialContext net.Dialer's (IP literals, no name resolution needed).
type TCPStack interface {
	Listen(network, address string) (net.Listener, error)
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Transport is an rnic.Device attached to one network at one local address: the object
// connections are listened for and dialed through. Close it when done; it does not own
// the device.
type Transport struct {
	network string
	dev     *rnic.Device
	local   netip.Addr

	iw      *iwarp.Config    // iwarp
	tcp     TCPStack         // iwarp: nil for the kernel's
	capture *capture.Writer  // iwarp: wraps the listeners and dialed connections
	ep      *rocev2.Endpoint // rocev2
	cc      *rocev2.CMConfig // rocev2

	mu        sync.Mutex
	closed    bool
	listeners map[*Listener]struct{}
}

// Open attaches dev to network ("iwarp" or "rocev2") at local address addr:
//
//   - iwarp: addr is the local IP that listeners bind and connections leave from;
//     "" means the device's configured address (rnic.Config.LocalAddr or Interface),
//     else 127.0.0.1.
//   - rocev2: addr is "ip" or "ip:udpport" of the RoCE link (UDP 4791 by default, what
//     kernel peers use); "" as for iwarp. The ICRC covers the IP, so it must be specific.
//
// o may be nil.
func Open(dev *rnic.Device, network, addr string, o *Options) (*Transport, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	t := &Transport{network: network, dev: dev, listeners: make(map[*Listener]struct{})}
	switch network {
	case IWARP:
		ip, err := localIP(dev, addr)
		if err != nil {
			return nil, &OpError{Op: "open", Net: network, Addr: addr, Err: err}
		}
		t.local = ip
		t.iw = opt.IWARP
		if t.iw == nil {
			t.iw = iwarp.DefaultConfig()
		}
		t.tcp, t.capture = opt.TCP, opt.Capture
		if t.tcp != nil || t.capture != nil {
			c := *t.iw
			c.Dial = t.dialTCP
			t.iw = &c
		}
		return t, nil
	case RoCEv2:
		link := opt.Link
		if link == nil {
			ap, err := roceLinkAddr(dev, addr)
			if err != nil {
				return nil, &OpError{Op: "open", Net: network, Addr: addr, Err: err}
			}
			l, err := rocev2.ListenUDP(ap, opt.UDP)
			if err != nil {
				return nil, &OpError{Op: "open", Net: network, Addr: ap.String(), Err: err}
			}
			link = l
		}
		t.local = link.LocalAddr().Addr()
		if opt.Capture != nil {
			link = capture.WrapLink(link, opt.Capture)
		}
		t.ep = rocev2.NewEndpoint(dev, link, opt.RoCE)
		t.cc = opt.CM
		return t, nil
	}
	return nil, &OpError{Op: "open", Net: network, Addr: addr, Err: ErrUnknownNetwork}
}

// localIP resolves a local IP: addr if given, else the device's configured address, else
// 127.0.0.1.
func localIP(dev *rnic.Device, addr string) (netip.Addr, error) {
	if addr == "" {
		addr = dev.Config().LocalIP()
	}
	if addr == "" {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", ErrBadAddress, err)
	}
	return ip.Unmap(), nil
}

func roceLinkAddr(dev *rnic.Device, addr string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	ip, err := localIP(dev, addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ip, rocev2UDPPort), nil
}

const rocev2UDPPort = 4791

// Network returns "iwarp" or "rocev2".
func (t *Transport) Network() string { return t.network }

// Device returns the device the transport carries.
func (t *Transport) Device() *rnic.Device { return t.dev }

// LocalIP returns the local IP address of the transport.
func (t *Transport) LocalIP() netip.Addr { return t.local }

// Endpoint returns the RoCEv2 endpoint (for UD QPs and connections set up without the
// CM), or nil for iWARP.
func (t *Transport) Endpoint() *rocev2.Endpoint { return t.ep }

// Message names a connection-management message that carries private data.
type Message int

// Messages with private data.
const (
	MsgConnect Message = iota // MPA Request / IB CM REQ
	MsgAccept                 // MPA Reply / REP
	MsgReject                 // MPA Reply with R / REJ
)

// MaxPrivateData returns the largest private data the network carries in m: for iWARP
// the MPA cap minus RFC 6581's 4-byte IRD/ORD word (252 with siw's 256-byte cap); for
// RoCEv2 the IB CM message's field (REQ 92 minus RDMA-CM's 36-byte cma_hdr = 56, REP
// 196, REJ 148).
func (t *Transport) MaxPrivateData(m Message) int {
	if t.network == IWARP {
		max := t.iw.MPA.MaxPrivateData
		if max <= 0 {
			max = 256
		}
		return max - 4
	}
	switch m {
	case MsgConnect:
		return maxREQPrivateData
	case MsgAccept:
		return maxREPPrivateData
	}
	return maxREJPrivateData
}

// Param are the per-connection parameters of Dial and ConnRequest.Accept (struct
// rdma_conn_param). The zero value is valid.
type Param struct {
	// PrivateData travels in the connect or accept message (see MaxPrivateData).
	PrivateData []byte
	// IRD and ORD are the inbound and outbound RDMA Read/atomic depths (responder
	// resources and initiator depth); 0 means 16. The negotiated values are on the Conn.
	IRD, ORD int
}

// Listen listens for connection requests on addr: "host:port", ":port" (the transport's
// IP) or ":0" (a free port; Listener.Addr tells which).
func (t *Transport) Listen(addr string) (*Listener, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Net: t.network, Addr: addr, Err: fmt.Errorf("%w: %w", ErrBadAddress, err)}
	}
	if _, err := strconv.ParseUint(ps, 10, 16); err != nil {
		return nil, &OpError{Op: "listen", Net: t.network, Addr: addr, Err: fmt.Errorf("%w: %w", ErrBadAddress, err)}
	}
	if host == "" {
		host = t.local.String()
	}
	addr = net.JoinHostPort(host, ps)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, &OpError{Op: "listen", Net: t.network, Addr: addr, Err: ErrClosed}
	}
	t.mu.Unlock()
	var impl listenerImpl
	switch t.network {
	case IWARP:
		impl, err = listenIWARP(t, addr)
	default:
		impl, err = listenRoCE(t, addr)
	}
	if err != nil {
		return nil, &OpError{Op: "listen", Net: t.network, Addr: addr, Err: err}
	}
	l := &Listener{t: t, impl: impl}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = impl.close()
		return nil, &OpError{Op: "listen", Net: t.network, Addr: addr, Err: ErrClosed}
	}
	t.listeners[l] = struct{}{}
	t.mu.Unlock()
	return l, nil
}

// Dial connects qp, an Idle QP of the transport's device, to the listener at addr
// ("host:port"; for a RoCEv2 peer off UDP 4791 "host:port@udpport") and returns when the
// QP is in RTS, the peer rejected (a *RejectError), or ctx ends. The QP may dial again
// after a failure.
func (t *Transport) Dial(ctx context.Context, qp *rnic.QP, addr string, p Param) (*Conn, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, &OpError{Op: "dial", Net: t.network, Addr: addr, Err: ErrClosed}
	}
	if qp == nil || qp.Device() != t.dev {
		return nil, &OpError{Op: "dial", Net: t.network, Addr: addr, Err: rnic.ErrInvalidArg}
	}
	if len(p.PrivateData) > t.MaxPrivateData(MsgConnect) {
		return nil, &OpError{Op: "dial", Net: t.network, Addr: addr, Err: ErrPrivateDataTooLong}
	}
	var (
		impl connImpl
		err  error
	)
	switch t.network {
	case IWARP:
		impl, err = dialIWARP(ctx, t, qp, addr, p)
	default:
		impl, err = dialRoCE(ctx, t, qp, addr, p)
	}
	if err != nil {
		return nil, &OpError{Op: "dial", Net: t.network, Addr: addr, Err: classify(ctx, err)}
	}
	return newConn(t, qp, impl), nil
}

// Close closes the transport's listeners (pending requests are refused) and, for RoCEv2,
// aborts its connections and closes its link. iWARP connections are independent TCP
// connections and stay up until closed.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	ls := make([]*Listener, 0, len(t.listeners))
	for l := range t.listeners {
		ls = append(ls, l)
	}
	t.mu.Unlock()
	for _, l := range ls {
		_ = l.Close()
	}
	if t.ep != nil {
		return t.ep.Close()
	}
	return nil
}

func (t *Transport) forget(l *Listener) {
	t.mu.Lock()
	delete(t.listeners, l)
	t.mu.Unlock()
}

// ---- errors ----

// Errors of the connection manager; they are wrapped with their causes.
var (
	ErrClosed             = errors.New("cm: closed")
	ErrRefused            = errors.New("cm: connection refused (no listener)")
	ErrUnreachable        = errors.New("cm: peer unreachable")
	ErrTimeout            = errors.New("cm: connection timed out")
	ErrUnknownNetwork     = errors.New("cm: unknown network (want \"iwarp\" or \"rocev2\")")
	ErrBadAddress         = errors.New("cm: bad address")
	ErrPrivateDataTooLong = errors.New("cm: private data too long")
	ErrAnswered           = errors.New("cm: connection request already answered")
)

// OpError is the error of a Transport, Listener or ConnRequest operation: the operation,
// network, address and cause (which errors.Is/As reach through Unwrap).
type OpError struct {
	Op   string // "open", "listen", "dial", "accept", "reject"
	Net  string
	Addr string
	Err  error
}

func (e *OpError) Error() string {
	return "cm: " + e.Op + " " + e.Net + " " + e.Addr + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// RejectError reports that the peer's consumer rejected the connection (an MPA Reply with
// the R bit, RFC 5044 §7.1.2; an IB CM REJ with reason 28, consumer defined). It carries
// the peer's private data; Unwrap returns the transport's own error (*iwarp.RejectError,
// *rocev2.RejectError).
type RejectError struct {
	PrivateData []byte
	Err         error
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: connection rejected by the peer (%d bytes private data)", len(e.PrivateData))
}

// Unwrap returns the transport's error.
func (e *RejectError) Unwrap() error { return e.Err }
