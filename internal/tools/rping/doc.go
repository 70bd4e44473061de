// Package rping is "softrnic rping": the protocol of rdma-core's rping
// (librdmacm/examples/rping.c) over iWARP, so it interoperates with rping on Linux siw in
// either role.
//
// The protocol, per ping (the client's count; the server loops until the client leaves):
//
//	client → server  SEND 16 bytes {be64 addr, be32 rkey, be32 size}: the client's source buffer
//	server           RDMA READ size bytes from it into its own buffer
//	server → client  SEND 16 bytes ("go ahead"; the content is not looked at)
//	client → server  SEND 16 bytes advertising the client's sink buffer
//	server           RDMA WRITE strlen(data)+1 bytes into it
//	server → client  SEND 16 bytes ("go ahead")
//	client           with -V, compares the sink with the source (size bytes)
//
// The source holds "rdma-ping-%d: " followed by printable ASCII 'A'..'z' starting at a
// letter that advances by one per ping (wrapping after 'z'), NUL-terminated in its last byte.
// Connection: MPA rev 2 with the RFC 6581 IRD/ORD word (IRD = ORD = 1, as rping's
// rdma_conn_param asks), no CRC, client-server model, like siw's default; --crc asks for CRC.
//
// With --roce the same protocol runs over RoCEv2 (rnic/rocev2), as rping does on Linux rxe:
// rdma_cm's IB CM exchange (REQ with the cma_hdr and the TCP port-space service ID, REP,
// RTU; DREQ/DREP on disconnect) as UD MADs to QP1, the RC QP's packets on UDP 4791. The
// local address is -a for the server (a RoCE link binds one address; the ICRC covers it)
// and --local or the route to -a for the client.
package rping
