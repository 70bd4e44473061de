// Package daemon is "softrnic daemon": the host's soft RNIC run as a standalone service —
// a device with its iWARP and/or RoCEv2 transports, optionally a memory target that peers
// can RDMA READ and WRITE and rping and perftest servers, and a control socket
// (internal/uapi) that "softrnic stat" reads. It logs through log/slog (text, or JSON with -log-json).
// With -rocev2 (or -netdev) the device is one processes attach to (internal/broker); each
// -device NAME@ADDR adds another such device to the same process (StartAll), without a
// memory target or tools of its own.
//
// With -target-mib (none by default: "softrnic target" is the memory target as a process
// of the device) the daemon serves a memory target itself. It registers one region of
// -target-mib MiB (anonymous mmap) and accepts every connection request on the daemon's
// listeners (rnic/cm) with the accept loop of "softrnic target" (target.Server). The
// accept private data (MPA Reply or IB CM REP) is the region's 16-byte advertisement, an
// rnic.RemoteBuffer (the layout of rping's struct rping_rdma_info):
//
//	offset  size  field
//	0       8     addr   big-endian IOVA of the region's first byte (the tagged offset)
//	8       4     rkey   big-endian STag granting Remote Read and Remote Write
//	12      4     len    big-endian region length in bytes
//
// The target posts no receives: a peer that Sends to it gets a Terminate (iWARP) or RNR
// NAKs (RoCEv2). RDMA READ and WRITE of the advertised range are all it serves.
//
// What outsiders can make the daemon hold is bounded, and each bound is counted in the
// status (uapi.DaemonCounters): iWARP listeners (-max-listeners; listen_iwarp takes IP
// literals only), the memory target's connections (-target-max-conns), control clients
// (-ctl-max-clients, -ctl-idle-timeout; the accept loop backs off and retries when
// descriptors run out), rping sessions (-rping-max-sessions, -rping-idle-timeout). The
// README's limits table lists them with their defaults.
package daemon
