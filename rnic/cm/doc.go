// Package cm is softrnic's connection manager: one way to listen for, accept, reject and
// establish RDMA connections over either wire protocol, in the manner of librdmacm's
// rdma_cm. A [Transport] attaches an rnic.Device to one network at a local address:
//
//	network   transport                                        connection management
//	"iwarp"   RDMAP/DDP/MPA over kernel TCP (rnic/iwarp)        MPA Request/Reply (RFC 5044 §7.1, RFC 6581)
//	"rocev2"  IB RC/UC over UDP 4791 (rnic/rocev2)              IB CM REQ/REP/RTU as RDMA-CM uses it (IBTA Vol.1 ch. 12)
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
