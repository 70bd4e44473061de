// Package pingpong is "softrnic pingpong": rdma-core's ibv_rc_pingpong
// (libibverbs/examples/rc_pingpong.c) over softrnic's RoCEv2 transport, so it interoperates
// with ibv_rc_pingpong on Linux rxe in either role:
//
//   - both sides create an RC QP, post rx-depth receives of size bytes and pick a random PSN;
//   - they exchange "%04x:%06x:%06x:%s" (LID:QPN:PSN:GID) messages of 52 bytes over TCP
//     (default port 18515): the client sends first, the server connects its QP and answers,
//     the client connects and sends "done";
//   - the client SENDs size bytes, and each side SENDs again once its previous SEND completed
//     and a message arrived, iters times; receives are reposted when one or fewer remain;
//   - both print the byte rate and the per-iteration latency.
//
// The QP attributes are rc_pingpong's: timeout 14, retry_cnt 7, rnr_retry 7, min_rnr_timer
// 12, max_rd_atomic 1. softrnic has no GID table of its own: any -g index names the RoCEv2
// GID of the local address (-a, else the route to the server, else the first non-loopback
// IPv4 address), as rxe's IPv4 GID (index 1). RoCE packets go to UDP port 4791 (-u).
//
// The out-of-band address message is in oob.go, the exchange and the QP connection in
// exchange.go.
package pingpong
