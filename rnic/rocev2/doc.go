// Package rocev2 is the RoCEv2 transport of the rnic engine: the InfiniBand
// RC, UC and UD transports (IBTA Vol.1 chapter 9, Annex A17) over UDP port
// 4791, wire compatible with Linux rxe, plus the IB CM as RDMA-CM uses it.
//
// The code is split by role: conn.go is the connection (the orchestrator of a
// QP's goroutine, state and disconnect), requester.go, completer.go and
// responder.go its three IBTA roles; cm.go the CM agent every connection
// shares, cm_passive.go and cm_active.go the two sides of setup; endpoint.go
// and linkio.go the endpoint and its link.
//
// # Links
//
// A [Link] moves batches of UDP payloads (BTH through ICRC). [UDPLink] is a
// kernel UDP socket with sendmmsg/recvmmsg and optional UDP GSO/GRO
// ([UDPOptions]); [MemNet]/[MemLink] is an in-memory network whose links drop,
// duplicate, reorder and corrupt packets at configurable rates ([Faults]) for
// tests. An [Endpoint] owns one link: its receive goroutine verifies the ICRC,
// demultiplexes by destination QP and runs the responder and completer of
// the target QP inline; control packets produced by a batch (ACKs, NAKs) are
// sent after it in one call. On a UDPLink the receive goroutine runs its whole loop
// inside one wait on the socket, so a batch that drained the socket is followed by a
// wait for the runtime's poller, not by a read that finds it empty. On a UDPLink an RC WRITE or SEND payload is copied once
// in user space, into the destination's memory: the requester hands sendmmsg the
// registered memory of the WQE (an iovec between headers and ICRC, for a packet's
// payload of 512 bytes or more within one SGE; READ responses are copied, their
// memory may change under them), and the receive goroutine reads GRO-coalesced
// packets where the kernel put them. The ICRC of an RC WRITE or SEND packet of a full
// path MTU is the CRC of its headers joined with its payload's CRC (roce.ICRCJoin),
// which the goroutine that posts send work computes for the WQEs the connection has
// taken ahead of its send cursor (Conn.SendQueued): the connection's goroutine then runs
// the CRC over the headers only, unless it reaches a packet before the poster did.
//
// # Addresses and UDP ports
//
// An [Addr] names a connection end: IP, RDMA-CM port and the UDP port of its
// RoCE link, written "10.0.0.2:7471" for the standard UDP port 4791 and
// "10.0.0.2:7471@4792" otherwise ([ParseAddr]). Kernel and hardware RoCEv2
// devices listen on 4791 and send from a per-flow source port in 0xC000-0xFFFF
// (Annex A17.3 entropy); a softrnic endpoint sends from the port it listens
// on, so several endpoints can share an IP on different ports. The passive
// side answers a REQ by that rule: source port 0 or 0xC000-0xFFFF → the peer
// is on 4791, any other → the peer is on the source port. [ListenUDP]
// therefore refuses ports 0xC000-0xFFFF ([ErrEntropyPort]); port 0 picks a
// free port below. [Config].PeerPort overrides the rule for peers that send
// from other ports but listen on one fixed port.
//
// ICRC: packets are sent with DF set from an unconnected socket, for which
// Linux uses IP ID 0 (ip_select_ident), and the ICRC is computed with ID 0.
// A receiver on a UDP socket cannot see the sender's IP ID (rxe's are not
// 0), so an IPv4 ICRC that does not verify with ID 0 is solved for the ID
// by CRC linearity (roce.SolveICRCIPv4ID, Annex A17.4.1.1 covers the ID):
// it is accepted, and counted in ICRCIDSolved, iff some ID explains it — a
// 16-bit check that catches every single-bit error — and dropped as an
// ICRC error otherwise. [Config].StrictICRC requires ID 0; IPv6 and
// in-memory ICRCs are verified exactly. Corrupt packets are dropped
// silently (no NAK), as rxe does. With UDP GSO (on by default) the kernel
// numbers the segments of a super-datagram 0, 1, 2…; the link fixes each
// segment's ICRC for its ID before the send (roce.ICRCIPv4IDDelta), so rxe,
// which verifies with the real ID, accepts them, and a softrnic UDP receiver
// solves for the ID.
//
// # Reliable connection (IBTA §9.7)
//
// [Endpoint.Connect] binds an Idle rnic.QP to a peer QP with [ConnAttr]
// (the modify_qp RTR/RTS attributes) and returns a [Conn], the
// rnic.QPTransport. Each Conn has one goroutine for the requester (segmenting
// send WQEs to the path MTU, 256-4096, one PSN per packet — over a link that sends
// with UDP GSO an RDMA WRITE without Immediate data as one WRITE Only per packet,
// each with its own RETH, so that its packets are of one size and a run of them is
// one GSO send (Config.WholeWrites) —, AckReq on the last
// packet of a message and every AckEvery packets or half a window, at most a
// window of unacked PSNs that adapts up to Config.Window (window.go: it grows
// while the requester waits for ACKs and halves on a loss), at most MaxRdAtomic
// outstanding READs/atomics, fences), READ response streaming and the timers; a
// message of at most 1 KiB (a READ's or atomic's request carries none) posted while the
// connection is idle and that goroutine parked is sent by the posting goroutine itself
// (Conn.SendQueued, counted in Endpoint.InlineSends), which saves a goroutine wake-up
// on the way of each message of a ping-pong; likewise the READ responses a receive batch
// queued while that goroutine is parked leave from the receive goroutine at the end of
// the batch, one batch of packets, the goroutine streaming the rest (counted in
// Endpoint.InlineResponses). The endpoint's one receive goroutine reads its link for all
// its QPs; with rnic.Config.WaitDrivesReceive, while one RC connection is the only user
// of an endpoint on a Linux [UDPLink], the goroutine blocked in rnic.CQ.Wait on that
// QP's CQ (or in rnic.QP.DriveReceive) reads the socket itself, so the message that
// completes it costs no goroutine hand-off (rxdrive.go; [Endpoint.DriveStats]); the
// ACK of what such a Wait received is deferred and leaves with the next packets the
// connection sends, as a request/response program's answer, or when the receive next
// waits for the socket, the next batch ends or the connection ends, or after an eighth of
// the ACK timeout (counted in Endpoint.AcksDeferred and AckDeferTimeouts). A second
// connection or UD QP on the endpoint takes the receive back at once. WQEs stay
// unfinished until acknowledged:
//
//   - ACKs are cumulative; a READ response or atomic ACK implicitly
//     acknowledges the requests before it;
//   - local ACK timeout (4.096 µs × 2^Timeout) and PSN-sequence NAKs rewind the
//     send cursor to the PSN to retransmit (go-back-N, rxe's behaviour),
//     decrementing the retry count (reset on progress); exhausted: the WQE
//     completes with RetryExcErr;
//   - RNR NAKs wait the RNR timer of the NAK (table 45) and retry from the
//     NAKed PSN, rnr_retry times (7 = forever), then RNRRetryExcErr; a
//     PSN-sequence NAK of that PSN meanwhile (rxe sends one for the requests
//     behind the RNR-NAKed one) is no loss: it changes nothing;
//   - NAK invalid request / remote access / remote operational error complete
//     the WQE with RemInvReqErr / RemAccessErr / RemOpErr and move the QP to
//     Error (the remaining WQEs flush);
//   - an ACK that covers a READ or atomic whose response is missing, or a gap
//     in READ responses, retransmits the request from the oldest missing PSN.
//
// The responder checks PSNs (one PSN-sequence NAK per gap), executes requests
// at the expected PSN, coalesces ACKs per receive batch, sends RNR NAKs (its
// MinRNRTimer) when no receive is posted (and then drops the requests behind
// it silently, as after a sequence NAK, until the requester resends it), NAKs protection, length and opcode
// sequence errors and moves its QP to Error, answers duplicates (re-ACK of
// SENDs and WRITEs, never applied twice; a duplicate READ is re-executed from
// its PSN with its own RETH only if it lies in one of the last MaxDestRd READs
// received and asks for a subset of its bytes through the same R_Key, one
// re-execution per READ at a time — others are dropped and counted in
// DupReadsDropped, so old PSNs cannot buy reads past the IRD; duplicate
// atomics answered from the saved result) and limits inbound READs/atomics to
// MaxDestRd. A connected QP takes packets only from its peer's address
// (others: RxWrongSource). READ responses and the control packets queued behind them leave
// in PSN order. Completion statuses follow rxe's.
//
// UC ([RC]'s sibling [UC]) sends SEND and WRITE without ACKs; a PSN gap drops
// the message in progress and resynchronises on the next First/Only packet.
// UD ([Endpoint.CreateUD], [UDQP]) sends single-packet SENDs with a DETH to
// an [AH]; receives get a 40-byte GRH (the IPv4 header in its last 20
// bytes, as rxe writes it) before the payload; wrong Q_Keys are dropped.
//
// # Connection management
//
// [Listen], [Listener.Accept], [ConnRequest.Accept], [ConnRequest.Reject] and
// [Dial] mirror rnic/iwarp over the IB CM: REQ/REP/RTU, REJ (reason 28,
// consumer defined, for Reject), MRA for duplicate REQs while the
// application decides, DREQ/DREP when a QP disconnects; MADs are UD
// SEND_ONLY packets to QP1 with Q_Key 0x80010000, the service ID is RDMA-CM's
// TCP port space (0x0106<<16 | port) and the REQ private data starts with
// the 36-byte cma_hdr. REQ, REP and DREQ are retried every CM response
// timeout ([CMConfig]); duplicates are answered from the last MAD sent; the
// first packet on a QP stands in for a lost RTU. Every MAD must name both
// comm IDs of a connection and come from its peer's address (others:
// CMDropped). A REQ or REP from a QP number still connected here under another
// comm ID is stale (IBTA Vol.1 ch. 12; Linux cm.c cm_insert_remote_qpn): it is rejected with reason 10 and the
// old connection ends with [ErrStaleConn]; a REJ with reason 10 makes Dial
// fail with an error that is [ErrStaleConn] (connect again with a new QP).
// QP numbers (rnic), comm IDs and starting PSNs are random per process, so a
// restarted process does not meet its predecessor's stale entries.
//
// UD QPs are "connected" the way RDMA-CM does it in its UDP port space
// (0x0111<<16 | port): service ID resolution, SIDR_REQ/SIDR_REP ([ListenUD],
// [UDRequest.Accept], [ResolveUD]; sidr.go).
//
// A connection's end is reported by [Conn.Err] and in the QP's
// EventDisconnected: [ErrPeerDisconnected], [ErrRetryExceeded], a
// [*NAKError], [ErrCMTimeout], [ErrFirstMessageTimeout], a [*RejectError], a
// link error. Errors wrap their causes: errors.Is reaches syscall errors from
// [ListenUDP], [ErrRejected] from a *RejectError and context errors from Dial.
//
// # Limits and timeouts
//
// Every zero field of [Config] and [CMConfig] is the default below; the
// explicit values [ACKTimeoutInfinite], [NoRetry], [RNRTimerLongest],
// [Unlimited], [NoTimeout] and [CMNoRetry] turn a limit or timer off.
//
//	name                          default                what happens
//	Config.Timeout                14: 4.096 µs×2^14      an unacknowledged request is retransmitted
//	                              ≈ 67 ms                (go-back-N from the oldest PSN)
//	Config.RetryCnt               7                      after 1+RetryCnt timeouts or sequence NAKs without
//	                                                     progress the WQE completes RetryExcErr, QP → Error
//	Config.RNRRetry               7 (infinite)           RNR NAKs retried; then RNRRetryExcErr, QP → Error
//	Config.MinRNRTimer            12 (0.64 ms)           the wait our RNR NAKs ask of the peer
//	Config.MaxRdAtomic (ORD)      128                    more outstanding READs/atomics wait
//	Config.MaxDestRd (IRD)        128                    one more inbound READ/atomic in progress: NAK invalid
//	                                                     request, QP → Error; also the READ/atomic history
//	                                                     that duplicates are checked against
//	Config.Window                 512 PSNs               the requester waits for ACKs; its window starts at
//	                                                     128 and adapts below this (halved on a loss)
//	Config.AckEvery               64 packets             AckReq set at least this often
//	Config.KeepAlive              15 s                   an RC connection that carried nothing that long is
//	                                                     probed (a zero-length WRITE, checked every quarter
//	                                                     interval); a dead peer exhausts the retries; probes
//	                                                     and their ACKs are not "use" for FirstMessageTimeout
//	Config.MaxPendingRequests     1024 per endpoint      REQ refused: REJ no resources (CMRejectedLimit)
//	Config.MaxPassiveConns        4096 per endpoint      REQ refused: REJ no resources (CMRejectedLimit)
//	Config.StrictICRC             off                    on: IPv4 ICRCs must verify with IP ID 0 (no solving;
//	                                                     only for peers that send ID 0: no rxe, no GSO)
//	CMConfig.ResponseTimeout      20: ≈ 4.3 s            a REQ, REP or DREQ is resent
//	CMConfig.MaxRetries           15                     REQ: Dial fails ErrCMTimeout; REP: REJ timeout, the
//	                                                     connection ends ErrCMTimeout; DREQ: Timewait
//	CMConfig.Backlog              128 per listener       REQ refused: REJ no resources (CMRejectedLimit)
//	CMConfig.MaxConns             1024 per listener      REQ refused as above; Accept returns ErrLimit
//	CMConfig.AcceptTimeout        60 s                   an unanswered request is rejected (REJ timeout,
//	                                                     AcceptTimeouts); Accept then fails with ErrCMTimeout
//	CMConfig.FirstMessageTimeout  60 s                   an accepted connection with no packet received or
//	                                                     sent ends (DREQ, ErrFirstMessageTimeout,
//	                                                     FirstMessageTimeouts)
//	MRA service timeout           2^24×4.096 µs ≈ 69 s   announced while the application decides (fixed)
//	Timewait                      2 × the longer of our  duplicates answered from the last MAD; then the
//	                              and the peer's CM      connection is forgotten; at most 4096 per endpoint
//	                              response timeouts      (the oldest forgotten early)
//	READ response queue           4×MaxDestRd+64 per QP  full: a new READ is dropped (the requester retries)
//	receive back-off              1 ms doubling to 1 s   temporary Link.Recv errors (RecvErrors, logged once
//	                                                     per episode); a permanent one stops the endpoint:
//	                                                     its QPs end with it, Endpoint.Err reports it
//
// A peer that dies is noticed by retry exhaustion: within (1+RetryCnt) × the
// ACK timeout (≈ 0.54 s by default) when requests are outstanding, 1 to 1¼
// KeepAlive later (15–19 s + 0.54 s by default) when the connection was idle;
// with ACKTimeoutInfinite or NoTimeout keepalive, never. The QP then moves to
// Error with ErrRetryExceeded and its work is flushed.
//
// Counters (Endpoint fields, atomic): RxDropped, ICRCErrors, ICRCIDSolved,
// RxWrongSource, RecvErrors, SendErrors, CMDropped, CMRejectedLimit, CMStale,
// AcceptTimeouts, FirstMessageTimeouts, DupReadsDropped, WakeFallbacks, InlineSends,
// InlineResponses, AcksDeferred, AckDeferTimeouts; per QP and device the rnic counters
// (retransmits, NAKs, bytes, packets; a connection adds its bytes and packets once per
// send batch and once per receive batch).
//

package rocev2
