// Package cm is softrnic's connection manager: one way to listen for, accept, reject and
// establish RDMA connections over either wire protocol, in the manner of librdmacm's
// rdma_cm. A [Transport] attaches an rnic.Device to one network at a local address:
//
//	network   transport                                        connection management
//	"iwarp"   RDMAP/DDP/MPA over TCP (rnic/iwarp)               MPA Request/Reply (RFC 5044 §7.1, RFC 6581)
//	"rocev2"  IB RC/UC over UDP 4791 (rnic/rocev2)              IB CM REQ/REP/RTU as RDMA-CM uses it (IBTA Vol.1 ch. 12)
//
// The packets go through the kernel by default (TCP sockets, a UDP socket). Options
// choose otherwise: Options.TCP carries iWARP over another TCP (link/netstack's
// user-space TCP on an AF_XDP port), Options.Link carries RoCEv2 over another packet
// link (rnic/rocev2/xdp on the same AF_XDP port: one XDP program and one UMEM serve
// both; see the example), and Options.Capture records either network's traffic to a
// pcapng file (package capture).
//
// [Open] creates a Transport; [Transport.Listen] returns a [Listener] whose Accept yields
// [ConnRequest]s to [ConnRequest.Accept] or [ConnRequest.Reject]; [Transport.Dial]
// connects a QP to a listener. Both sides end with a [Conn] bound to an rnic.QP in RTS:
// work is then posted on the QP (rnic.QP.PostSend/PostRecv) and completions polled from
// its CQs, the same way whatever the network.
//
// Addresses are "host:port". The port is the service: the TCP port for iWARP, the
// RDMA-CM port (RDMA_PS_TCP service ID) for RoCEv2. A RoCEv2 peer whose RoCE link is not
// on UDP 4791 (several processes on one host without a daemon) is written
// "host:port@udpport" (see rnic/rocev2).
//
// Options have safe zero values: Open(dev, "iwarp", "", nil) is a complete configuration.
// No option adds a delay.
//
// Errors wrap their causes: errors.Is reaches the syscall error (syscall.EADDRINUSE,
// ECONNREFUSED …), *net.OpError and context errors. A consumer's rejection is a
// *[RejectError]; a refusal without a listener wraps [ErrRefused], an unreachable peer
// [ErrUnreachable], an exhausted connect [ErrTimeout]; a closed listener or transport
// returns an error wrapping [ErrClosed].
package cm
