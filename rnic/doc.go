// Package rnic is the transport-independent engine of softrnic, a software RDMA NIC.
//
// It implements the verbs resource model of RFC 5040 §5 / the IB verbs: a [Device]
// owns protection domains ([PD]), memory regions ([MR]) and memory windows ([MW]) named by
// STags, completion queues ([CQ]), shared receive queues ([SRQ]) and reliable-connected
// queue pairs ([QP]). Work is posted with [QP.PostSend] / [QP.PostRecv] / [SRQ.PostRecv]
// and reported as [Completion]s polled from a CQ with [CQ.Poll] (no allocation).
//
// The wire protocols live in sub-packages: rnic/iwarp (RDMAP/DDP/MPA over TCP, with its
// connection manager) and rnic/rocev2 (IB transport over UDP). They plug into the engine
// through the transport-facing API ("SPI") described below.
//
// # STags
//
// An STag (RFC 5040 §2; the lkey/rkey of verbs) is index<<8 | key: a 24-bit index into the
// device's STag table and an 8-bit consumer key. Index 0 is reserved, so STag values 0..255
// never name a region and never grant remote access (siw uses STag 1 in RTR messages).
// Memory regions have an IOVA: the tagged offset (TO) of their first byte. [PD.RegMR] uses
// the address of the slice's first byte, like ibv_reg_mr; [PD.RegMRAt] chooses it
// (0 gives zero-based addressing).
//
// # QP states (RFC 5040 §5 and the verbs state model)
//
//	state      verbs     meaning
//	Idle       INIT      created; receives may be posted; sends are refused (ErrQPState)
//	RTS        RTS       connected (the transport called Established); all work flows
//	Closing    SQD-like  graceful disconnect in progress; new sends are refused
//	Terminate  SQE/ERR   a local protocol error was found; a Terminate message is being sent
//	Error      ERR       work is flushed with StatusWRFlushErr; new work completes flushed
//
//	from       event                                      to
//	Idle       transport Established                      RTS
//	Idle       Destroy, Disconnect, QP.Fatal              Error
//	Idle       connect failed or rejected                 Idle (may connect again)
//	RTS        Disconnect (graceful)                      Closing
//	RTS        local protocol error (QP.Terminate)        Terminate
//	RTS        Terminate received, LLP error, abort       Error
//	Closing    LLP closed (QP.TransportDone)              Error
//	Terminate  Terminate sent, LLP closed                 Error
//	Error      Destroy                                    (gone)
//
// Entering Error flushes: every posted, unfinished send and receive work request completes
// with StatusWRFlushErr (errors are always reported, even for unsignaled WRs), after the
// transport has stopped touching their memory ([QP.TransportDone]).
//
// # Transport SPI
//
// Applications use [QP]; a wire transport binds itself to a QP with [AttachTransport],
// giving a [QPTransport] and getting a [TransportQP]: the transport's handle, with the calls
// only a transport makes. The engine calls the transport only through QPTransport:
// SendQueued when new send work was posted, Disconnect to close (gracefully or abortively).
// The transport calls back into the engine, from its own goroutines, through TransportQP:
//
//   - [TransportQP.NextSend] to take the next send WQE in post order and
//     [TransportQP.CompleteSend] to finish it with a status (completions are reported in
//     post order; a WQE finished out of order, such as a Write after an outstanding Read,
//     waits for its predecessors);
//   - [TransportQP.TakeRecv] to consume the next receive buffer from the RQ or the SRQ,
//     and [TransportQP.FinishRecv] (or CompleteRecv) to complete it;
//   - [TransportQP.ResolveRemote] to validate an incoming tagged access (STag exists, is
//     valid, PD and QP match, rights, bounds) and get the target bytes,
//     [TransportQP.Invalidate] for Send with Invalidate, [TransportQP.Atomic] to execute an
//     inbound atomic under the device's atomic lock;
//   - [TransportQP.Established], [TransportQP.Fatal], [TransportQP.TransportDone] to drive
//     the state machine, and the Count… methods for the per-QP and per-device counters.
//
// Payload moves between the wire and a WQE's memory through [Segs], the resolved SGL
// addressed as one message (vectored slices for readv/writev, or copies for packets).
//
// The SPI is deliberately message oriented: an iWARP transport streams bytes over TCP and
// finishes a send WQE as soon as it is written; a packet transport (RoCEv2, with PSNs,
// ACK/NAK, retransmission and RNR) keeps WQEs unfinished until they are acknowledged and
// may re-read their memory for retransmission, since WQEs (and their SGE lists) stay owned
// by the transport until CompleteSend. Neither transport needs anything else from the
// engine.
//
// # Concurrency
//
// All exported methods are safe for concurrent use. Each QP's data path is owned by its
// transport's goroutines; locks guard only shared tables (STags, QPs) and the queues.
// CQ handlers run on transport goroutines and must not block.
package rnic
