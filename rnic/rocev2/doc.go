// Package rocev2 is the RoCEv2 transport of the rnic engine: the InfiniBand
// RC, UC and UD transports (IBTA Vol.1 chapter 9, Annex A17) over UDP port
// 4791, wire compatible with Linux rxe, plus the IB CM as RDMA-CM uses it.
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
// sent after it in one call.
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
// silently (no NAK), as rxe does. With UDP GSO the kernel numbers the
// segments' IP IDs 0, 1, 2…, which softrnic accepts (ID-solved) but rxe,
// which sees the real ID, drops: GSO is for IPv6 or softrnic peers.
//
// # Reliable connection (IBTA §9.7)
//
// [Endpoint.Connect] binds an Idle rnic.QP to a peer QP with [ConnAttr]
// (the modify_qp RTR/RTS attributes) and returns a [Conn], the
// rnic.QPTransport. Each Conn has one goroutine for the requester (segmenting
// send WQEs to the path MTU, 256-4096, one PSN per packet, AckReq on the last
// packet of a message and every AckEvery packets, at most Window unacked
// PSNs, at most MaxRdAtomic outstanding READs/atomics, fences), READ response
// streaming and the timers. WQEs stay unfinished until acknowledged:
//
//   - ACKs are cumulative; a READ response or atomic ACK implicitly
//     acknowledges the requests before it;
//   - local ACK timeout (4.096 µs × 2^Timeout) and PSN-sequence NAKs rewind the
//     send cursor to the PSN to retransmit (go-back-N, rxe's behaviour),
//     decrementing the retry count (reset on progress); exhausted: the WQE
//     completes with RetryExcErr;
//   - RNR NAKs wait the RNR timer of the NAK (table 45) and retry from the
//     NAKed PSN, rnr_retry times (7 = forever), then RNRRetryExcErr;
//   - NAK invalid request / remote access / remote operational error complete
//     the WQE with RemInvReqErr / RemAccessErr / RemOpErr and move the QP to
//     Error (the remaining WQEs flush);
//   - an ACK that covers a READ or atomic whose response is missing, or a gap
//     in READ responses, retransmits the request from the oldest missing PSN.
//
// The responder checks PSNs (one PSN-sequence NAK per gap), executes requests
// at the expected PSN, coalesces ACKs per receive batch, sends RNR NAKs (its
// MinRNRTimer) when no receive is posted, NAKs protection, length and opcode
// sequence errors and moves its QP to Error, answers duplicates (re-ACK of
// SENDs and WRITEs, never applied twice; duplicate READs re-executed from
// their PSN with their own RETH; duplicate atomics answered from the saved
// result, MaxDestRd of them kept) and limits inbound READs/atomics to
// MaxDestRd. READ responses and the control packets queued behind them leave
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
// timeout ([CMConfig]). Kernel peers listen on UDP 4791 whatever their source
// port: set [Config].PeerPort to 4791 for them.
//
// ibv_rc_pingpong's out-of-band address exchange is [PingpongDest].
package rocev2
