// Package steer lets several processes on one host share the RoCEv2 port,
// UDP 4791 on one IP address, the way the processes using one rxe device do:
// every incoming packet reaches the process that owns its destination QP
// (the BTH DestQP field, IBTA Vol. 1 §9.2 and Annex A17 RoCEv2), straight
// from the kernel into that process's socket, with no copy in between. It is
// the steering building block of the softrnic daemon (issue 11 item 3): the
// daemon owns a Steerer; each attached process owns one rocev2.Link.
//
// # Steering with SO_REUSEPORT and BPF (ModeBPF)
//
// The daemon binds its own UDP socket to <ip>:4791 with SO_REUSEPORT; that
// socket is slot 0. For each attached process it creates one more UDP
// socket bound to the same address, which joins the same reuseport group,
// puts it into a BPF_MAP_TYPE_REUSEPORT_SOCKARRAY at the process's slot, and
// hands the socket to the process. A BPF_PROG_TYPE_SK_REUSEPORT program
// attached to the group (built with cilium/ebpf's asm package, no clang)
// runs for every datagram the group receives. The kernel gives it the skb
// with data at the UDP header (the UDP lookup runs before the header is
// pulled; the kernel's own selftest test_select_reuseport_kern.c reads its
// UDP payload at offset sizeof(struct udphdr)), so the program reads BTH
// bytes 5..7 at offset 13..15: in place when the skb's linear data holds
// them, else with bpf_skb_load_bytes (payload in page fragments). It looks
// the 24-bit DestQP up in a QPN→slot hash map and selects that slot's
// socket with bpf_sk_select_reuseport. QP1 (the CM's MADs) is never in the map, so it
// and every unknown QPN go to slot 0, the daemon; a mapped QPN whose socket
// has gone (the process exited: closing a socket removes it from the
// sockarray) falls back to slot 0 too; only if slot 0 itself is gone is the
// packet dropped. The program never leaves the choice to the kernel's hash,
// so a socket that joined the group receives nothing before the daemon maps
// QPNs to it. Per-CPU counters record each outcome ([Stats]).
//
// A process's socket is an ordinary UDP socket: the process makes a
// rocev2.UDPLink of it ([Join], rocev2.NewUDPLinkFile) and receives with
// recvmmsg straight into its own buffers, sends with sendmmsg from <ip>:4791.
// Steering adds no copy, only the program's run per datagram (a hash lookup
// and bpf_sk_select_reuseport, ~180 ns on the development VM); README.md has
// the measurements (BenchmarkSteeredRecv beside a plain socket).
//
// # Who creates the socket: the daemon
//
// Linux lets a socket join a UDP reuseport group only if it has the same
// owner uid as the group's sockets (net/ipv4/udp.c, udp_reuseport_add_sock:
// uid_eq). The daemon runs as root or a service user; attached processes run
// as anyone in the device's group. So the daemon creates every socket of the
// group itself and passes each process its socket over the attach unix
// socket with SCM_RIGHTS ([SendFiles]; the process takes it with
// [RecvFiles] and [Join]). This also keeps binding and the sockarray in one
// hand: a process cannot put itself into another process's slot or bind
// the group to another address. (A second daemon on the same address fails
// with EADDRINUSE: the daemon claims the address without SO_REUSEPORT
// before it forms the group, so it never joins, and reprograms, another's.) The daemon closes its own copy of a
// process's descriptors once they are sent, so when the process exits, its
// socket closes and leaves the group and the sockarray by itself; the
// daemon still calls [Steerer.Remove] when it notices (unix socket EOF) to
// free the slot and the QPNs.
//
// # Relaying where BPF is not permitted (ModeRelay)
//
// Creating a REUSEPORT_SOCKARRAY or loading an SK_REUSEPORT program needs
// CAP_BPF (CAP_SYS_ADMIN before Linux 5.8; kernel/bpf/syscall.c lists
// SK_REUSEPORT as "need CAP_BPF only") and a kernel with the BPF syscall; a
// daemon run as a service user gets it with systemd's
// AmbientCapabilities=CAP_BPF. Before Linux 5.11 BPF maps are also charged to
// RLIMIT_MEMLOCK, which the daemon must raise (cilium/ebpf's
// rlimit.RemoveMemlock); the package leaves process limits alone. Without
// CAP_BPF (ModeAuto falls back; [Steerer.FallbackErr] says why) the daemon's
// socket is alone on <ip>:4791 and receives everything: the daemon's link
// ([Steerer.Link]) reads a batch, forwards each datagram whose QPN is
// mapped to its process over a unix SOCK_SEQPACKET socketpair (messages keep
// their boundaries and each end sees the other close; one sendmmsg per
// process per batch, MSG_DONTWAIT: a process that does not keep up loses
// packets, counted in Stats.RelayDropped, and never stalls the daemon), and
// returns the rest (QP1, unknown QPNs) to its own caller. The forwarding runs in the
// goroutine that calls the daemon link's Recv, which the daemon's RoCEv2
// engine does continuously; there is no relay goroutine. Each datagram
// carries a 20-byte header before the payload: the source IP (16 bytes,
// IPv4-mapped for IPv4) and the source UDP port (big endian), then 2 zero
// bytes; the process-side link scatters it into a header buffer and the
// payload straight into the caller's buffer.
//
// The process sends from its own UDP socket, which the daemon binds to
// <ip>:0 and passes with the socketpair end: its packets leave from an
// ephemeral source port (as rxe's leave from per-flow ports), the link's
// LocalAddr says so and the ICRC covers it; peers must send to 4791
// (rocev2.Config.PeerPort = 4791), which kernel peers always do. The relay
// costs a copy into the unix socket and a second system call and wake-up per
// batch: ~5 µs more per round trip on the development VM (BenchmarkRelayRTT,
// BenchmarkRelayRecv beside a steered socket; README.md).
//
// # Relaying from an AF_XDP port
//
// A daemon whose address is on an AF_XDP port (Config.Link, the daemon's
// -xdp) relays too: the port's XDP program takes the address's UDP port from
// the kernel, so no socket could be steered to; the daemon's link receives
// on the port and forwards as above, and processes send from kernel UDP
// sockets on the address's IP (XDP sees received packets only).
//
// # Caveats
//
// UDP GRO is kept off on every socket of the group ([Join] and
// [Steerer] clear UDPOptions.GRO in ModeBPF): the kernel's GRO stage picks a
// socket of the group by hash, without the program, and if that socket has
// UDP_GRO it coalesces the datagrams of one flow (same addresses and ports)
// into one, which the program then steers by its first packet's QPN alone.
// softrnic peers send every QP's packets from port 4791 (and rxe derives the
// source port from a 14-bit hash of the QPs, rdma_get_udp_sport), so one flow
// can carry packets for QPs of different processes.
//
// The sockarray and the program live as long as any socket of the group: if
// the daemon dies, processes keep receiving their steered QPNs and unknown
// QPNs are dropped (Stats.Dropped). In ModeRelay a process's relay link
// returns ErrDaemonGone when the daemon's end closes.
package steer
