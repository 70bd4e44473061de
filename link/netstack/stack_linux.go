//go:build linux

package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrnic/softrnic/link/afxdp"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const (
	nicID = 1
	// txQueueLen bounds the packets waiting in the queueing discipline
	// (gVisor drops beyond it and TCP retransmits).
	txQueueLen = 4096
)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("netstack: closed")

// Stack is a userspace TCP/IP stack on one AF_XDP port and its address.
type Stack struct {
	port  *afxdp.Port
	ep    *linkEndpoint
	s     *stack.Stack
	local netip.Addr
	proto tcpip.NetworkProtocolNumber
	cfg   Config

	mu       sync.Mutex
	closed   bool
	reserved map[uint16]*reservation
}

// reservation holds one TCP port: the kernel socket bound to it and the
// steering entry, shared by a listener and its connections.
type reservation struct {
	port uint16
	fd   int
	refs int
}

// New starts a stack on p for p's address. The stack steers its TCP ports
// on p; p stays the caller's to close, after the stack.
func New(p *afxdp.Port, c *Config) (*Stack, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.SendBuffer <= 0 {
		cfg.SendBuffer = 4 << 20
	}
	if cfg.ReceiveBuffer <= 0 {
		cfg.ReceiveBuffer = 4 << 20
	}
	if cfg.TimeWait <= 0 {
		cfg.TimeWait = 5 * time.Second
	}
	st := &Stack{port: p, ep: newLinkEndpoint(p), local: p.Addr(), cfg: cfg,
		reserved: make(map[uint16]*reservation)}
	st.s = stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{
			ipv4.NewProtocol,
			ipv6.NewProtocolWithOptions(ipv6.Options{DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0}}),
		},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	fail := func(what string, e tcpip.Error) (*Stack, error) {
		st.s.Close()
		return nil, fmt.Errorf("netstack: %s: %s", what, e)
	}
	sack := tcpip.TCPSACKEnabled(true)
	if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); e != nil {
		return fail("SACK", e)
	}
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &mod); e != nil {
		return fail("receive buffer moderation", e)
	}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: min(1<<20, cfg.ReceiveBuffer), Max: cfg.ReceiveBuffer}
	if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &rb); e != nil {
		return fail("receive buffer", e)
	}
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: min(1<<20, cfg.SendBuffer), Max: cfg.SendBuffer}
	if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &sb); e != nil {
		return fail("send buffer", e)
	}
	tw := tcpip.TCPTimeWaitTimeoutOption(cfg.TimeWait)
	if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &tw); e != nil {
		return fail("TIME-WAIT", e)
	}
	// gVisor's FIFO queueing discipline hands the link endpoint batches
	// (up to fifo.BatchSize packets), so one sendto kicks many frames.
	qd := fifo.New(st.ep, 1, txQueueLen)
	if e := st.s.CreateNICWithOptions(nicID, st.ep, stack.NICOptions{QDisc: qd}); e != nil {
		return fail("NIC", e)
	}
	st.proto = ipv4.ProtocolNumber
	subnet := header.IPv4EmptySubnet
	if st.local.Is6() {
		st.proto, subnet = ipv6.ProtocolNumber, header.IPv6EmptySubnet
	}
	pa := tcpip.ProtocolAddress{Protocol: st.proto, AddressWithPrefix: tcpip.AddrFromSlice(st.local.AsSlice()).WithPrefix()}
	if e := st.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); e != nil {
		return fail("address", e)
	}
	// Every destination leaves through the port; the next hop is the
	// kernel's (see the package comment).
	st.s.SetRouteTable([]tcpip.Route{{Destination: subnet, NIC: nicID}})
	return st, nil
}

// Addr is the stack's IP address.
func (st *Stack) Addr() netip.Addr { return st.local }

// reserve binds a kernel TCP socket to the stack's address and port (0: the
// kernel chooses) and steers the port to the stack; an existing
// reservation of the same port gains a reference.
func (st *Stack) reserve(port uint16) (*reservation, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, ErrClosed
	}
	if r := st.reserved[port]; r != nil && port != 0 {
		return nil, fmt.Errorf("netstack: port %d: %w", port, unix.EADDRINUSE)
	}
	var family int
	var sa unix.Sockaddr
	if st.local.Is6() {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(port), Addr: st.local.As16()}
	} else {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(port), Addr: st.local.As4()}
	}
	fd, err := st.port.Socket(family, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("netstack: reserve port: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netstack: reserve port %d in the kernel: %w", port, err)
	}
	if port == 0 {
		got, err := unix.Getsockname(fd)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("netstack: reserve port: %w", err)
		}
		switch a := got.(type) {
		case *unix.SockaddrInet4:
			port = uint16(a.Port)
		case *unix.SockaddrInet6:
			port = uint16(a.Port)
		}
	}
	if err := st.port.Steer(afxdp.ProtoTCP, port, st.ep); err != nil {
		unix.Close(fd)
		return nil, err
	}
	r := &reservation{port: port, fd: fd, refs: 1}
	st.reserved[port] = r
	return r, nil
}

// hold adds a reference to r (an accepted connection).
func (st *Stack) hold(r *reservation) {
	st.mu.Lock()
	r.refs++
	st.mu.Unlock()
}

// drop releases a reference to r.
func (st *Stack) drop(r *reservation) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed {
		st.unref(r)
	}
}

// unref drops a reference (mu held); the last one unsteers the port and
// closes the kernel socket.
func (st *Stack) unref(r *reservation) {
	if r.refs--; r.refs > 0 {
		return
	}
	st.port.Unsteer(afxdp.ProtoTCP, r.port)
	unix.Close(r.fd)
	delete(st.reserved, r.port)
}

func (st *Stack) fullAddr(a netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(a.Addr().Unmap().AsSlice()), Port: a.Port()}
}

// resolveTCP parses address (an IP literal and port: a dial hook must not
// trigger DNS lookups) for network ("tcp", "tcp4", "tcp6").
func (st *Stack) resolveTCP(network, address string, listen bool) (netip.AddrPort, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return netip.AddrPort{}, fmt.Errorf("netstack: network %q: %w", network, net.UnknownNetworkError(network))
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil && listen && host == "" {
		ap, err = netip.ParseAddrPort(net.JoinHostPort(st.local.String(), port))
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netstack: address %q: want an IP literal and a port: %w", address, err)
	}
	if listen && ap.Addr().IsUnspecified() {
		ap = netip.AddrPortFrom(st.local, ap.Port())
	}
	if ap.Addr().Unmap().Is4() != st.local.Is4() {
		return netip.AddrPort{}, fmt.Errorf("netstack: address %v: the stack is on %v", ap, st.local)
	}
	return ap, nil
}

// Listen announces on the stack's address; address is "host:port" with
// host the stack's address, empty or unspecified. Its signature is
// net.Listen's, so it serves as a listen hook.
func (st *Stack) Listen(network, address string) (net.Listener, error) {
	ap, err := st.resolveTCP(network, address, true)
	if err != nil {
		return nil, err
	}
	if ap.Addr().Unmap() != st.local {
		return nil, fmt.Errorf("netstack: listen on %v: not the stack's address %v", ap, st.local)
	}
	r, err := st.reserve(ap.Port())
	if err != nil {
		return nil, err
	}
	l := &listener{st: st, r: r, cancel: make(chan struct{})}
	ep, e := st.s.NewEndpoint(tcp.ProtocolNumber, st.proto, &l.wq)
	if e == nil {
		l.ep = ep
		if e = ep.Bind(st.fullAddr(netip.AddrPortFrom(st.local, r.port))); e == nil {
			e = ep.Listen(listenBacklog)
		}
		if e != nil {
			ep.Close()
		}
	}
	if e != nil {
		st.drop(r)
		return nil, &net.OpError{Op: "listen", Net: "tcp", Addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(st.local, r.port)), Err: tcpipErr(e)}
	}
	return l, nil
}

// listenBacklog bounds the connections a listener holds before Accept
// (Linux's default somaxconn).
const listenBacklog = 4096

// DialContext connects to address (an IP literal and port) from an
// ephemeral port the kernel reserves. Its signature is
// net.Dialer.DialContext's, so it serves as a dial hook.
func (st *Stack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := st.resolveTCP(network, address, false)
	if err != nil {
		return nil, err
	}
	r, err := st.reserve(0)
	if err != nil {
		return nil, err
	}
	opErr := func(e error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Source: net.TCPAddrFromAddrPort(netip.AddrPortFrom(st.local, r.port)),
			Addr: net.TCPAddrFromAddrPort(ap), Err: e}
	}
	var wq waiter.Queue
	ep, e := st.s.NewEndpoint(tcp.ProtocolNumber, st.proto, &wq)
	if e != nil {
		st.drop(r)
		return nil, opErr(tcpipErr(e))
	}
	fail := func(err error) (net.Conn, error) {
		ep.Close() // a connection that never was: nothing lingers
		st.drop(r)
		return nil, opErr(err)
	}
	entry, ready := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	if e = ep.Bind(st.fullAddr(netip.AddrPortFrom(st.local, r.port))); e == nil {
		e = ep.Connect(st.fullAddr(ap))
	}
	if _, ok := e.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-ready:
		}
		e = ep.LastError()
	}
	if e != nil {
		return fail(tcpipErr(e))
	}
	return newConn(st, r, ep, &wq), nil
}

// tcpipErr maps gVisor's errors to the errno a kernel socket returns, so
// callers can test them with errors.Is as they do on kernel TCP.
func tcpipErr(e tcpip.Error) error {
	var no unix.Errno
	switch e.(type) {
	case *tcpip.ErrConnectionRefused:
		no = unix.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		no = unix.ECONNRESET
	case *tcpip.ErrConnectionAborted, *tcpip.ErrAborted:
		no = unix.ECONNABORTED
	case *tcpip.ErrTimeout:
		no = unix.ETIMEDOUT
	case *tcpip.ErrHostUnreachable:
		no = unix.EHOSTUNREACH
	case *tcpip.ErrNetworkUnreachable:
		no = unix.ENETUNREACH
	case *tcpip.ErrPortInUse, *tcpip.ErrDuplicateAddress:
		no = unix.EADDRINUSE
	case *tcpip.ErrClosedForSend:
		no = unix.EPIPE
	case *tcpip.ErrNotConnected:
		no = unix.ENOTCONN
	case *tcpip.ErrInvalidOptionValue, *tcpip.ErrInvalidEndpointState:
		no = unix.EINVAL
	default:
		return errors.New(e.String())
	}
	return no
}

// Stats returns the stack's counters.
func (st *Stack) Stats() Stats {
	ts := st.s.Stats().TCP
	st.mu.Lock()
	n := len(st.reserved)
	st.mu.Unlock()
	return Stats{
		TxNoNeighbour: st.ep.noNeigh.Load(), TxTooLong: st.ep.tooLong.Load(), PartialChecksums: st.ep.partial.Load(), Reservations: n,
		SegmentsSent: ts.SegmentsSent.Value(), SegmentsReceived: ts.ValidSegmentsReceived.Value(),
		Retransmits: ts.Retransmits.Value(), ChecksumErrors: ts.ChecksumErrors.Value(), ResetsSent: ts.ResetsSent.Value(),
	}
}

// Close aborts every connection and listener of the stack, releases its
// ports and stops gVisor's goroutines. The port stays open.
func (st *Stack) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	st.mu.Unlock()
	st.s.Close()
	st.s.Wait()
	st.mu.Lock()
	for _, r := range st.reserved {
		st.port.Unsteer(afxdp.ProtoTCP, r.port)
		unix.Close(r.fd)
	}
	clear(st.reserved)
	st.mu.Unlock()
	return nil
}

// listener accepts the stack's connections on one reserved port; its
// connections share the reservation.
type listener struct {
	st     *Stack
	r      *reservation
	ep     tcpip.Endpoint
	wq     waiter.Queue
	cancel chan struct{}
	once   sync.Once
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	entry, ready := waiter.NewChannelEntry(waiter.ReadableEvents)
	l.wq.EventRegister(&entry)
	defer l.wq.EventUnregister(&entry)
	for {
		ep, wq, e := l.ep.Accept(nil)
		if _, ok := e.(*tcpip.ErrWouldBlock); ok {
			select {
			case <-l.cancel:
				return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
			case <-ready:
			}
			continue
		}
		if e != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: tcpipErr(e)}
		}
		l.st.hold(l.r)
		return newConn(l.st, l.r, ep, wq), nil
	}
}

// Close implements net.Listener: the listening endpoint closes (pending
// connections are reset) and the listener's reference to the port goes;
// accepted connections keep theirs.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.cancel)
		l.ep.Close()
		l.st.drop(l.r)
	})
	return nil
}

// Addr implements net.Listener.
func (l *listener) Addr() net.Addr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(l.st.local, l.r.port))
}
