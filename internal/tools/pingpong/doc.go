// Package pingpong is "softrnic pingpong": rdma-core's ibverbs ping-pong examples
// (libibverbs/examples, rdma-core 44) over softrnic's RoCEv2 transport, in either role,
// so that they interoperate with the real tools on Linux rxe:
//
//	softrnic pingpong         ibv_rc_pingpong   one RC QP
//	softrnic pingpong --uc    ibv_uc_pingpong   one UC QP (no ACKs, no retries)
//	softrnic pingpong --ud    ibv_ud_pingpong   one UD QP, Q_Key 0x11111111, 40-byte GRH
//	softrnic pingpong --srq   ibv_srq_pingpong  -q RC QPs (default 16) sharing one SRQ
//
// The protocol (exchange.go, oob.go):
//
//   - both sides create their QPs, post rx-depth receives (on the SRQ for --srq) and pick
//     random PSNs;
//   - they exchange "%04x:%06x:%06x:%s" (LID:QPN:PSN:GID, the GID as 32 hex digits)
//     messages of 52 bytes over TCP (default port 18515): one per side, or always 256
//     (MAX_QP) for --srq, the entries past -q zero. The client sends first; the server
//     connects its QPs, answers, and the client connects and sends "done";
//   - the client SENDs size bytes on every QP, and each side SENDs again on a QP once its
//     previous SEND there completed and a message arrived for it, until iters SENDs and
//     iters receives completed (counted over all QPs for --srq); receives are reposted when
//     one or fewer remain (-q or fewer for --srq);
//   - both print the byte rate and the per-iteration latency.
//
// The QP attributes are the examples': RC timeout 14, retry_cnt 7, rnr_retry 7,
// min_rnr_timer 12, max_rd_atomic 1; UC only the path MTU and PSNs; UD the Q_Key. softrnic
// has no GID table of its own: any -g index names the RoCEv2 GID of the local address
// (-a, else the route to the server, else the first non-loopback IPv4 address), as rxe's
// IPv4 GID (index 1). RoCE packets go to UDP port 4791 (-u).
//
// Where the C tools would wait forever (a lost UC or UD packet, a peer with another -q or
// another QP type), softrnic gives up after --idle without a completion (default 60 s)
// and refuses what it can see in the exchange (a peer with fewer --srq QPs) with a
// one-line reason; --timeout bounds the whole run.
package pingpong
