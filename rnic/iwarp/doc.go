// Package iwarp is the iWARP transport of the rnic engine: RDMAP (RFC 5040, RFC 7306) over
// DDP (RFC 5041) over MPA (RFC 5044, RFC 6581) over kernel TCP, plus its connection manager.
//
// # Connection management
//
// The passive side calls [Listen] and [Listener.Accept] to receive a [ConnRequest] (the
// initiator's private data and IRD/ORD), then [ConnRequest.Accept] binds an Idle QP and
// sends the MPA Reply, or [ConnRequest.Reject] sends an MPA Reply with the R bit and
// private data. The active side calls [Dial] with an Idle QP. MPA rev 1 and rev 2, CRC and
// Markers as negotiated, the RFC 6581 IRD/ORD exchange and peer-to-peer mode with all three
// RTR types are supported in both roles (see [Config]).
//
// Linux siw interop (drivers/infiniband/sw/siw in Linux; tests/interop): private data is capped at 256
// bytes by default; an enhanced (S) request gets a rev-2 S reply; Terminate messages are
// QN 2, MSN 1, MO 0 with the echoed DDP (and Read Request) headers; a responder accepts
// the RTR forms siw sends (zero-length Write to STag 1, zero-length Read Request from
// source STag 1) and never transmits before the initiator's first FPDU (RFC 5044 §7.1.2).
//
// # Data path
//
// Each connected QP has two goroutines. The receiver reads the MPA length and DDP/RDMAP
// header of each FPDU, validates the STag (tagged) or takes the next receive WQE
// (untagged), and reads the payload from the socket straight into the registered memory,
// then checks the CRC. Deframing is mpa.Reader's, over the socket wrapped as an
// mpa.VectoredReader: without Markers one readv(2) places the payload and fetches the
// next FPDU's header and CRC. Every violation is answered with a Terminate carrying the RFC
// 5040/5041/5044 layer, type and code; the QP then moves to Error.
//
// The sender writes Terminates, Read/atomic responses (streamed from the source region)
// and send-queue work, segmented to the negotiated MULPDU, straight from registered memory:
// mpa.Writer queues the FPDUs (with or without Markers) and all that is queued goes out
// with one vectored write. One writer runs at a time: the per-QP sender goroutine, or — when the
// connection is idle and the work request is small — the goroutine that posted it (a
// doorbell fast path that saves a goroutine hand-off per message). Completions, and so
// CQ handlers, can therefore run on a goroutine that called PostSend.
//
// As RFC 5041 §5.2 and RFC 5040 §5.2.1 require, zero-length Writes and zero-length Read
// Requests are not checked against the STag table (which is also how siw's RTR forms, STag
// 1, pass); a zero-length Send still consumes a receive buffer.
//
// iWARP has no receiver-not-ready flow control: a Send (or Immediate Data) that arrives
// with no receive posted is answered with Terminate DDP / untagged buffer / "no buffer
// available" (1/2/0x02) and both QPs go to Error; the sender sees the Terminate as an
// EventQPFatal whose error (a *TermError) wraps the rdmap.TerminateError, and its
// unfinished work flushes.
//
// RFC 7306 atomics and immediate data are used only when Config.Extensions is set on both
// ends (MPA has no bit to negotiate them); otherwise such work requests complete with
// LocQPOpErr and received ones are answered with Terminate "unexpected opcode", as siw does.
//
// Send-type operations (Send, Write) complete at the sender once written to TCP (RFC 5040
// §5.5 allows it), so a remote error found in them later reaches the sender only as the
// Terminate: an async event (EventQPAccessErr for protection errors, EventQPReqErr for DDP
// untagged errors, EventQPFatal otherwise) whose Err is a *TermError, after which all
// unfinished WQEs flush. A Terminate that echoes a Read or atomic request (QN 1, matched
// by MSN) completes that WQE with RemAccessErr, RemInvReqErr or RemOpErr instead.
package iwarp
