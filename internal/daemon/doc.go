// Package daemon is "softrnic daemon": it runs one soft RNIC as a standalone service: a device with its iWARP and/or
// RoCEv2 transports, a memory target that peers can RDMA READ and WRITE, optionally the rping
// and perftest servers, and a control socket (internal/uapi) that "softrnic stat" reads.
//
// The memory target registers one region of -target-mib MiB (anonymous mmap) and accepts
// every connection request on the daemon's listeners. The accept private data (MPA Reply or
// IB CM REP) starts with the region's 16-byte advertisement, the layout of rping's
// struct rping_rdma_info:
//
//	offset  size  field
//	0       8     addr   big-endian IOVA of the region's first byte (the tagged offset)
//	8       4     rkey   big-endian STag granting Remote Read and Remote Write
//	12      4     len    big-endian region length in bytes
//
// The target posts no receives: a peer that Sends to it gets a Terminate (iWARP) or RNR
// NAKs (RoCEv2). RDMA READ and WRITE of the advertised range are all it serves.
package daemon
