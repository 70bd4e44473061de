// Package perftest is "softrnic perftest": it plays either side of linux-rdma perftest's ib_write_bw, ib_read_bw and
// ib_send_bw with -R (rdma_cm) over iWARP, so it interoperates with perftest on Linux siw.
// The protocol is perftest 6.06's (Debian bookworm's perftest 4.5+0.17); the wire formats
// are in wire.go.
//
// Sequence (every "xchg" is one message each way on the communication QP, client first):
//
//	comm     rdma_cm connection #1 to the port (the communication QP)
//	         xchg version, xchg cycle buffer, xchg cache line, xchg MTU
//	         xchg dest (zeroes); data connection #2 to the same port; xchg dest (zeroes)
//	write/read:
//	         xchg dest (keys), xchg dest (again, printed as "remote"), xchg dest (after RTR)
//	         client runs the test; xchg dest; 5 × xchg report; xchg dest (close)
//	         the server waits in the xchg after RTR+1 and prints the client's report
//	send:    on iWARP both sides advertise a 4-byte credit counter in their dest
//	         (ctx_alloc_credit; there is no RNR retry to fall back on)
//	         xchg dest (keys), xchg dest (after connect), xchg dest (remote), server posts
//	         rx-depth receives, xchg dest; client sends iters messages, never more than
//	         rx-depth beyond the credit the server RDMA-WRITEs (a little-endian uint32
//	         receive count, every rx-depth/3 receives); xchg dest (close)
//
// Then the client disconnects the data and the communication connections.
//
// With --roce both connections are RoCEv2 RC connections made with the IB CM (rnic/rocev2,
// UDP 4791), as perftest -R does on Linux rxe; only write and read are supported there (a
// Send test on RoCE relies on RNR retries instead of iWARP's credits, not implemented).
// The RoCE address is --bind on the server and the route to the server on the client.
//
// As with perftest, both ends must be given the same -n for Send tests (the server counts
// receives) and the server's -s must cover the client's. Not supported: -q > 1, UD/UC,
// bidirectional (-b), -a, events, -D for Send tests; the peak bandwidth is the best rate
// between two completions rather than perftest's per-WR timestamps, and the remote
// address does not walk through the cycle buffer.
package perftest
