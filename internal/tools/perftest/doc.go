// Package perftest is "softrnic perftest": either side of linux-rdma perftest 4.5's tests
// (Debian bookworm's perftest 4.5+0.17, version string "6.06", upstream tag v4.5-0.17),
// over iWARP or RoCEv2, so it interoperates with perftest on Linux siw and rxe:
//
//	bandwidth   write, read, send, atomic        ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw
//	latency     write_lat, read_lat, send_lat    ib_write_lat ib_read_lat ib_send_lat
//
// with -q QPs, -a (every size from 2 B to 8 MiB), -D (a duration with perftest's warm-up
// and cool-down margins), -b (bidirectional), -N, --report_gbits, -A (atomics), -U/-H
// (latency samples). Atomics run over RoCEv2 only (iWARP's RFC 7306 atomics are not in
// siw; the test is refused with a one-line reason).
//
// Waiting: perftest busy-polls its CQ unless -e is given, and so does an iWARP latency
// test here without -e: its waits read the socket themselves and busy-poll it before
// they block (--wait-drives and --spin, defaults PollHold and PollSpin), so that a
// message reaches the test with no thread wake-up, as a completion reaches perftest. With
// -e, and in bandwidth and RoCEv2 tests, a wait blocks until the connection's goroutine
// completes the work.
//
// Connections (conn.go): over iWARP every connection is an rdma_cm one (-R is implied):
// the communication connection first, then one data connection per QP, all to the same
// port. Over RoCEv2 (--roce) -R does the same with the IB CM; without it the exchange is
// a TCP connection to the port and the data QPs are connected by hand from the addresses
// exchanged (their GIDs), as perftest -x does; -z exchanges over rdma_cm and connects the
// QPs by hand.
//
// The exchange (comm.go, wire.go): one message each way per step, the client first;
// every message a SEND of the exact size perftest reads (rdma_cm) or one write (TCP):
//
//	connect, xchg version (16), cycle buffer (4), cache line (4), MTU (2)
//	-R: sync, the N data connections (the softrnic server listens before it answers
//	    the sync), sync
//	banner; one pingpong_dest per QP ("keys"; 56 bytes binary, 108 ASCII over TCP)
//	without -R: the QPs connect to the peer's
//	write/read/atomic BW: local lines, a dest per QP + remote lines, sync "after RTR";
//	    the client runs, prints its rows, syncs, sends its report (5 exchanges), syncs
//	    to close; the server waits in a sync and prints the client's report
//	send BW: (iWARP: the dests name credit counters), sync, lines, receives posted,
//	    sync, run, each side prints its own row (no report exchange), close sync
//	-b: both run; reports exchanged, the sum printed
//	write_lat: sync, keys, lines, sync; both ping-pong with RDMA Writes whose last byte
//	    (the message count) the receiver polls in memory; no closing sync
//	read_lat: as write_lat; the client reads, the server waits in the close sync
//	send_lat: keys, sync, lines, receives, sync; ping-pong of Sends; close sync
//
// iWARP Sends are paced by credits (there is no RNR retry): the receiver RDMA-Writes its
// receive count (a little-endian uint32) to the sender's credit slot every rx-depth/3
// receives, and the sender stays within rx-depth of it. RoCEv2 Sends rely on RNR retries.
//
// Reports (report.go, output.go) are computed and printed as perftest does: the peak
// bandwidth from per-WR post and completion times, the latency statistics (t_min, t_max
// = the second-largest sample, typical = median, avg, stdev, 99 % and 99.9 %) from the
// gaps between posts; the banner, address lines, headers and rows byte for byte. Times
// are nanoseconds of the monotonic clock instead of TSC cycles; connection set-up is not
// in any figure.
//
// perftest 4.5 negotiates nothing: both sides must run the same test with the same
// options. softrnic refuses what it can see (a peer older than 5.70, a message of the
// wrong size on the rdma_cm exchange, a peer sending more messages than -n, an iWARP
// peer that never sends first to an ib_write_lat server) with a one-line reason, and
// gives up after --idle (default 2 min) without a message or data from the peer, so a
// mismatch never hangs. Not supported: UD/UC/XRC/DC connection types, SRQ,
// post lists, inline sizes, --run_infinitely, dual port; the remote address does not
// walk through the cycle buffer (it only matters for CPU caches).
package perftest
