// Package iwarp is the iWARP transport of the rnic engine: RDMAP (RFC 5040, RFC 7306) over
// DDP (RFC 5041) over MPA (RFC 5044, RFC 6581) over TCP, plus its connection manager. The
// kernel's TCP is the default; [Config.Dial] and [Serve] take any net.Conn and
// net.Listener (a user-space TCP stack, say); llp.go lists what a net.Conn that is not a
// *net.TCPConn does without (readv placement, half-close, RST on abort, MSS-derived
// MULPDU, keepalive and TCP_USER_TIMEOUT).
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
// siw's responder has a race (siw_accept writes the MPA Reply before it installs its
// receive handler, and bytes arriving in between wait for newer bytes): an initiator
// nudges a silent responder with zero-length RDMA Writes to STag 1, a no-op at any
// compliant peer (RFC 5041 §5), from 2 ms after its first FPDU, at doubling intervals,
// until the responder speaks or Config.Timeout passes. The default configuration offers
// the Read RTR, which a compliant responder answers at once with a zero-length Read
// Response, so nothing is delayed and no nudge goes to a peer without the race. nudge.go
// has the details; [Conn.Nudges] counts them.
//
// # Data path
//
// Each connected QP has two goroutines. The receiver reads the MPA length and DDP/RDMAP
// header of each FPDU, validates the STag (tagged) or takes the next receive WQE
// (untagged), and reads the payload from the socket straight into the registered memory.
// Deframing is mpa.Reader's, over the socket wrapped as an mpa.VectoredReader: without
// Markers one readv(2) places the payload and fetches the next FPDU's header and CRC.
// With CRC negotiated the receiver first reads the whole FPDU into a staging buffer
// (pooled) and verifies the CRC, then interprets and places it (one more copy of
// the payload), so an FPDU with a bad CRC leaves no trace in any region (RFC 5044 §6),
// except where no one can tell the difference. A Read Response that continues the pending
// Read exactly is placed straight into that Read's sink and checked after (the sink's
// contents are undefined until the Read completes, and a CRC error fails it). A Write
// segment that continues the last one placed, other than its message's last, and a Send
// segment of the message in progress are read straight from the socket as without CRC,
// and checked at their end: they only write where their message goes, and a CRC error
// ends the connection before that message completes.
// A multi-segment Read Response is read ahead: the segments still to come are expected
// at the same size and the same readv takes several of them into the sink
// (mpa.Reader.ReadAhead), checking each one's length, header and CRC after.
// Every violation is answered with a Terminate carrying the RFC 5040/5041/5044 layer,
// type and code; the QP then moves to Error.
//
// The sender writes Terminates, Read/atomic responses (streamed from the source region)
// and send-queue work, segmented to the negotiated MULPDU, straight from registered memory:
// mpa.Writer queues the FPDUs (with or without Markers) and all that is queued goes out
// with one vectored write. One writer runs at a time: the per-QP sender goroutine, or — when the
// connection is idle and the work request is small — the goroutine that posted it (a
// doorbell fast path that saves a goroutine hand-off per message). Completions, and so
// CQ handlers, can therefore run on a goroutine that called PostSend. Likewise the
// receiver answers a small Read or atomic request itself when the sender is idle, with a
// write that never waits for the socket (what it does not take is left to the sender):
// every goroutine hand-off on a round trip also makes the runtime wake an idle thread,
// which on a small machine costs more than the rest of the round trip.
//
// With rnic.Config.WaitDrivesReceive the receiver runs as a coroutine that whichever
// goroutine holds it drives: the connection's goroutine, or a goroutine blocked in
// rnic.CQ.Wait on the QP's CQ, which then reads the socket itself and returns as soon as
// what it read completed work (its round trip costs the system calls of a plain socket
// read: no eventfd write, no extra poll, no goroutine switch). A Wait may stop anywhere,
// even in the middle of an FPDU; the next one, or the connection's goroutine when no Wait
// came for the hold time, goes on from there. rnic.QP.DriveReceive drives it the same way
// until a condition of the caller's holds (an RDMA Write has no completion at its target:
// a program polling memory for one places it itself); a caller that finds another driving
// is woken when that one stops.
//
// With rnic.Config.ReceiveSpin, whoever holds the receive reads its empty socket again and
// again for that long before it blocks in the poller (spin.go): a busy-poll, so that a
// message arriving meanwhile costs no thread wake-up. Beside WaitDrivesReceive one
// goroutine per connection spins: the waiter, or the connection's goroutine of a side
// that only serves (a Read responder). The end of the connection and a Wait asking for
// the receive end a spin; the QP's SpinHits and SpinTimeouts count how spins ended.
//
// As RFC 5041 §5 and RFC 5040 §5.2.1 require, zero-length Writes, Read Requests and Read
// Responses are not checked against the STag table or their TO (which is also how siw's
// RTR forms and our nudges, STag 1, pass); a zero-length Send still consumes a receive
// buffer.
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
//
// # Other TCP stacks
//
// Any net.Conn carries iWARP ([Config.Dial] for Dial, [Serve] for a net.Listener); a
// *net.TCPConn (the kernel's TCP) gets the fast paths and socket options. Any other
// net.Conn gets each option it offers as a method — net.TCPConn's own (CloseWrite,
// SetLinger, SetNoDelay, SetKeepAliveConfig, SyscallConn), and MSS() int and
// SetUserTimeout(time.Duration) error — and degrades as follows without it (a wrapper
// that cannot forward a method returns an error satisfying errors.ErrUnsupported):
//
//	feature              *net.TCPConn                              other net.Conn
//	payload placement    readv(2) into registered memory, with the ReadVectored if it
//	                     next FPDU's header in the same call       implements
//	                                                               mpa.VectoredReader, else
//	                                                               the plain Read (one call
//	                                                               per piece)
//	sending              writev(2), one per batch of FPDUs         WriteVectored if it
//	                                                               implements
//	                                                               mpa.VectoredWriter, else
//	                                                               one Write per piece
//	half-close           CloseWrite (FIN)                          CloseWrite, else a full
//	                                                               Close
//	abortive close       SetLinger(0): RST                         SetLinger(0), else Close
//	MULPDU default       from TCP_MAXSEG; 64 KiB on loopback       MSS(), else TCP_MAXSEG
//	                                                               through SyscallConn, else
//	                                                               a 1460-byte MSS
//	dead-peer detection  keepalive, TCP_USER_TIMEOUT               SetKeepAliveConfig,
//	                     (Config.KeepAlive, Config.UserTimeout)    SetUserTimeout (or
//	                                                               SyscallConn), else
//	                                                               whatever the conn does
//	local address        the device's LocalAddr / Interface        whatever Config.Dial binds
//	receive run by the   with rnic.Config.WaitDrivesReceive        no (the connection's
//	CQ's waiter                                                    goroutine receives)
//	busy-poll receive    with rnic.Config.ReceiveSpin              no
//
// # Limits and timeouts
//
// Everything a peer can make a listener or a connection hold is bounded in time or
// number; every refusal and timeout is counted ([Listener.Stats], the QP and device
// counters, [Conn.Nudges]). A zero Config field takes the default below.
//
//	limit (Config field)     default          what happens
//	Timeout                  10 s             MPA exchange bound in both roles: Dial fails
//	                                          (os.ErrDeadlineExceeded); a listener closes a
//	                                          connection with no valid Request in time
//	                                          (Stats.BadRequests) and drops a ConnRequest
//	                                          not answered in time (Stats.Unanswered);
//	                                          also how long an initiator nudges
//	FirstFPDUTimeout         Timeout          an accepted connection whose initiator sends
//	                                          no FPDU (the RTR) after the Reply is aborted:
//	                                          QP Error, ErrFirstFPDUTimeout
//	                                          (Stats.FirstFPDUTimeouts); negative: no limit.
//	                                          A client-server initiator idle for a quarter
//	                                          of its own value sends one zero-length Write
//	Backlog                  128              ConnRequests queued for Accept; one more is
//	                                          refused with an MPA Reject (Stats.RefusedBacklog)
//	MaxConns                 1024             a listener's pending + established
//	                                          connections; one more is closed before any
//	                                          Reply (Stats.RefusedListener); negative: none
//	MaxDeviceConns           4096             the same over all listeners of a device
//	                                          (Stats.RefusedDevice); negative: none
//	Disconnect               5 s              graceful disconnect; then the close is abortive
//	KeepAlive                10 s             TCP keepalive idle time and probe interval, 3
//	                                          probes: a vanished idle peer ends the
//	                                          connection (QP Error, ETIMEDOUT); negative: off
//	UserTimeout              30 s             TCP_USER_TIMEOUT: unacknowledged data this old
//	                                          ends the connection (ETIMEDOUT); negative:
//	                                          the kernel's default (~15 min)
//	(accept backoff)         5 ms .. 1 s      a failed accept (EMFILE, ENFILE, ENOBUFS, …)
//	                                          is retried after a doubling delay, logged once
//	                                          per run of failures and its end once
//	                                          (Config.Logger), counted (Stats.AcceptErrors)
//	(nudges)                 2 ms, doubling   zero-length Writes while the responder is
//	                                          silent, for at most Timeout (Conn.Nudges)
//	(Terminate linger)       1 s              after sending a Terminate, the peer's data is
//	                                          drained this long before the socket closes
//	(EPIPE grace)            100 ms           a write that failed with EPIPE waits this long
//	                                          for the receiver to report the cause
//	(CRC staging buffer)     64 KiB           taken from a pool shared by all connections
//	                                          while one FPDU is verified and placed
//	IRD / ORD (ConnParam)    16               inbound / outbound Reads and atomics; a peer
//	                                          exceeding our IRD gets a Terminate (0/2/0x07)
//	MPA private data         256 bytes        MPA.MaxPrivateData (siw's cap), at most 512
package iwarp
