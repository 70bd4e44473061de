package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// maxBuffer bounds the data buffer (2 × QPs × max(size, page)), which perftest
// allocates whatever its size.
const maxBuffer = 4 << 30

// session holds the resources of one test (perftest's pingpong_context, the
// communication context and the parameters that both sides agree on).
type session struct {
	o      Options
	server bool
	out    io.Writer
	laddr  netip.Addr // RoCEv2: the link's address

	dev  *rnic.Device
	t    *cm.Transport
	ep   *rocev2.Endpoint // RoCEv2
	pd   *rnic.PD
	ln   *cm.Listener // server with rdma_cm
	comm comm

	remVersion float64
	cycle      int // cycle buffer (page size), the larger of both sides'
	cacheLine  int
	mtu        int // negotiated ibv_mtu enum

	qps     []*rnic.QP
	conns   []*cm.Conn // -R
	cq      *rnic.CQ   // every data QP's completions (wr_id: the QP's index)
	buf     []byte     // 2·N slots of bufSize: send sources, then targets / receive buffers
	mr      *rnic.MR
	bufSize int      // BUFF_SIZE: max(size, cycle buffer)
	ctrl    []byte   // iWARP Send: 2·N uint32: credit sources, then the peer-written credits
	ctrlMR  *rnic.MR //
	my, rem []dest   // per QP
	wc      []rnic.Completion
	stopWD  func()

	bwIn     bwInput  // timestamp arrays, reused across -a sizes
	delta    []cycles // latency scratch
	latSends int      // latency tests: completions taken off the CQ ahead of their wait
	latRecvs int

	naksAfterRun atomic.Uint64              // 1 + the data QPs' NAKs when this side's transfers ended (0: running)
	watched      atomic.Pointer[[]*rnic.QP] // the QPs the watchdog samples
}

// errIdle ends a run that heard nothing from the peer for Options.Idle.
var errIdle = errors.New("nothing from the peer")

func newSession(o Options, out io.Writer) (*session, error) {
	s := &session{o: o, server: o.Peer == "", out: out, cycle: defPageSize, cacheLine: defCacheLn}
	if err := s.open(); err != nil {
		return s, err
	}
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return s, err
	}
	return s, nil
}

func (s *session) close() {
	if s.stopWD != nil {
		s.stopWD()
	}
	for _, c := range s.conns {
		if c != nil {
			_ = c.Close()
		}
	}
	if s.comm != nil {
		s.comm.close()
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for _, q := range s.qps {
		_ = q.Destroy()
	}
	if s.t != nil {
		_ = s.t.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
}

func (s *session) printf(format string, args ...any) { fmt.Fprintf(s.out, format, args...) }

// xchg is ctx_xchg_data: the client sends, then receives; the server receives, then
// sends. The peer's message must be n bytes.
func (s *session) xchg(ctx context.Context, msg []byte, n int) ([]byte, error) {
	if !s.server {
		if err := s.comm.send(ctx, msg); err != nil {
			return nil, err
		}
		return s.comm.recv(ctx, n)
	}
	r, err := s.comm.recv(ctx, n)
	if err != nil {
		return nil, err
	}
	return r, s.comm.send(ctx, msg)
}

// hs is ctx_hand_shake: a pingpong_dest each way, binary over rdma_cm, ASCII over TCP.
func (s *session) hs(ctx context.Context, my *dest) (dest, error) {
	if s.o.commCM() {
		r, err := s.xchg(ctx, my.Append(nil), destLen)
		if err != nil {
			return dest{}, err
		}
		return parseDest(r)
	}
	r, err := s.xchg(ctx, my.AppendText(nil), textDestGIDLen)
	if err != nil {
		return dest{}, err
	}
	return parseTextDest(r)
}

// sync is a handshake whose content does not matter (the rdma_cm syncs, "after RTR", the
// per-size syncs, the closing one): it exchanges dest[0].
func (s *session) sync(ctx context.Context, what string) error {
	if _, err := s.hs(ctx, &s.my[0]); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// run is the common part of every test (the mains of perftest's *_bw.c and *_lat.c up to
// the test-specific exchange), then the test.
func (s *session) run(ctx context.Context) error {
	o := &s.o
	if o.Verb == Read || o.Verb == Atomic {
		// perftest's ctx_set_max_inline, finding no inline support on the device for
		// these verbs, prints a result line (and a note on stderr) before anything else
		s.printf("%s", resultLine)
	}
	if err := s.connectComm(ctx); err != nil {
		return err
	}
	// From here every wait on the peer ends after o.Idle without a message or data.
	s.watchQPs()
	ctx, s.stopWD = s.watch(ctx)
	if err := s.exchangeSystem(ctx); err != nil {
		return err
	}
	if err := s.alloc(); err != nil {
		return err
	}
	s.my = make([]dest, len(s.qps)) // zeroes until set_up_connection
	s.rem = make([]dest, len(s.qps))
	if o.RDMACM {
		// create_rdma_cm_connection: a sync, the data connections, a sync.
		var zero dest
		if _, err := s.hs(ctx, &zero); err != nil {
			return fmt.Errorf("Failed to sync between client and server before creating RDMA CM connection: %w", err)
		}
		if err := s.connectData(ctx); err != nil {
			return err
		}
		if _, err := s.hs(ctx, &zero); err != nil {
			return fmt.Errorf("Failed to sync between client and server after creating RDMA CM connection: %w", err)
		}
	}
	s.setUp()
	var err error
	switch {
	case o.Latency:
		err = s.runLatency(ctx)
	case o.Verb == Send:
		err = s.runSendBW(ctx)
	default:
		err = s.runBW(ctx)
	}
	if err != nil {
		return err
	}
	s.disconnect()
	return nil
}

// watch bounds the waits on the peer: ctx ends with errIdle after o.Idle without a
// message on the exchange or a byte on a data QP, and with errExtraSends when, after this
// side's run, its data QPs refuse more messages from the peer (RNR NAKs: the peer runs a
// larger -n). A goroutine samples the QPs' counters every 250 ms.
func (s *session) watch(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	idle := fmt.Errorf("%w for %v: it may run another test or other options (perftest has no negotiation)", errIdle, s.o.Idle)
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		last, _ := s.traffic()
		lastMove := time.Now()
		for {
			select {
			case <-t.C:
			case <-done:
				return
			}
			n, naks := s.traffic()
			if base := s.naksAfterRun.Load(); base > 0 && naks > base-1 {
				cancel(errExtraSends)
				return
			}
			if n != last {
				last, lastMove = n, time.Now()
			} else if s.o.Idle > 0 && time.Since(lastMove) > s.o.Idle {
				cancel(idle)
				return
			}
		}
	}()
	return wctx, func() { close(done); cancel(nil) }
}

// errExtraSends reports Sends beyond this side's iterations.
var errExtraSends = errors.New("the peer sent more messages than this side's -n (refused with RNR NAKs): both sides need the same -n")

// traffic sums the bytes and segments every QP of the session has moved, and the NAKs
// its data QPs sent.
func (s *session) traffic() (n, naks uint64) {
	count := func(q *rnic.QP) rnic.Stats {
		if q == nil {
			return rnic.Stats{}
		}
		st := q.Counters().Snapshot()
		n += st.TxBytes + st.RxBytes + st.TxSegments + st.RxSegments
		return st
	}
	if tc, ok := s.comm.(*tcpComm); ok {
		n += tc.msgs.Load()
	}
	qps := s.watched.Load()
	if qps == nil {
		return n, 0
	}
	for i, q := range *qps {
		st := count(q)
		if i > 0 {
			naks += st.NAKs
		}
	}
	return n, naks
}

// watchQPs hands the watchdog the exchange's QP (first; a zero QP over TCP) and the data
// QPs.
func (s *session) watchQPs() {
	qps := make([]*rnic.QP, 0, 1+len(s.qps))
	if rc, ok := s.comm.(*rdmaComm); ok {
		qps = append(qps, rc.qp)
	} else {
		qps = append(qps, nil)
	}
	qps = append(qps, s.qps...)
	s.watched.Store(&qps)
}

// ranOut marks the end of this side's data transfer: from now on a NAK from a data QP
// means the peer sends more than expected.
func (s *session) ranOut() {
	_, naks := s.traffic()
	s.naksAfterRun.Store(naks + 1)
}

// exchangeSystem is exchange_versions, check_version_compatibility, check_sys_data and
// check_mtu.
func (s *session) exchangeSystem(ctx context.Context) error {
	r, err := s.xchg(ctx, versionMsg(version), versionLen)
	if err != nil {
		return fmt.Errorf("version exchange: %w", err)
	}
	rv, f, err := parseVersion(r)
	if err != nil {
		return err
	}
	if f < minVersion {
		return fmt.Errorf("Current implementation is not compatible with versions older than %.2f (the peer is %q)", minVersion, rv)
	}
	s.remVersion = f
	if f >= 5.32 {
		for _, p := range []*int{&s.cycle, &s.cacheLine} {
			r, err := s.xchg(ctx, int32Msg(*p), 4)
			if err != nil {
				return fmt.Errorf("system data exchange: %w", err)
			}
			v, _ := parseInt32(r)
			*p = max(*p, v)
		}
	}
	s.mtu = s.portMTU()
	if f >= 5.1 {
		n := 2
		if f < 5.31 {
			n = 4
		}
		msg := make([]byte, n)
		copy(msg, mtuMsg(s.mtu))
		r, err := s.xchg(ctx, msg, n)
		if err != nil {
			return fmt.Errorf("MTU exchange: %w", err)
		}
		if m := parseMTU(r); m != 0 && m < s.mtu {
			s.mtu = m
		}
	}
	return nil
}

// portMTU is the port's active MTU as an ibv_mtu enum: the RoCEv2 endpoint's, and 1024 on
// iWARP (siw's for a 1500-byte netdev).
func (s *session) portMTU() int {
	if s.ep != nil {
		return int(s.ep.Config().MTU)
	}
	return int(roce.MTU1024)
}

// alloc creates the data QPs, CQs and the buffer (alloc_ctx, ctx_init): one buffer of
// 2·N slots of BUFF_SIZE(size, cycle buffer) bytes, registered with the rights the test
// needs (create_single_mr), so that a peer running another verb is refused by the RNIC.
func (s *session) alloc() error {
	o := &s.o
	n := o.QPs
	size := o.Size
	if o.All {
		size = AllMaxSize
	}
	s.bufSize = max(size, s.cycle)
	if total := 2 * n * s.bufSize; total > maxBuffer || total < 0 {
		return fmt.Errorf("%d QPs of %d bytes need a %d-byte buffer (2 × QPs × max(size, %d)); the limit is %d", n, size, total, s.cycle, maxBuffer)
	}
	s.buf = make([]byte, 2*n*s.bufSize)
	if !(o.Latency && o.Verb == Write) { // ib_write_lat zeroes its buffer, the others fill it with rand()
		for i := 0; i < len(s.buf); i += 8 {
			binary.LittleEndian.PutUint64(s.buf[i:], rand.Uint64())
		}
	}
	access := rnic.AccessLocalWrite
	switch o.Verb {
	case Write:
		access |= rnic.AccessRemoteWrite
	case Read:
		access |= rnic.AccessRemoteRead
		if o.iwarp() {
			access |= rnic.AccessRemoteWrite
		}
	case Atomic:
		access |= rnic.AccessRemoteAtomic
	}
	var err error
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	credits := o.Verb == Send && o.iwarp()
	if credits {
		s.ctrl = make([]byte, 8*n)
		if s.ctrlMR, err = s.pd.RegMR(s.ctrl, rnic.AccessLocalWrite|rnic.AccessRemoteWrite); err != nil {
			return err
		}
	}
	sendWR := o.TxDepth + 1
	if credits {
		sendWR += o.TxDepth
	}
	recvWR := 1
	if o.Verb == Send {
		recvWR = o.RxDepth
	}
	// One CQ takes the sends (signaled every CQ moderation WRs, and the last), the
	// receives and the credit Writes, so that one wait sees them all.
	depth := n*(o.TxDepth/o.CQMod+2) + n*recvWR
	if credits {
		depth += n * (o.TxDepth + 1)
	}
	if s.cq, err = s.dev.CreateCQ(min(max(depth, 16), 1<<20)); err != nil {
		return err
	}
	for range n {
		qp, err := s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: rnic.QPCap{
			MaxSendWR: sendWR, MaxRecvWR: recvWR, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 8}})
		if err != nil {
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		s.qps = append(s.qps, qp)
	}
	s.watchQPs()
	s.wc = make([]rnic.Completion, 64)
	return nil
}

// slot is the offset in the buffer of QP i's send source (0 ≤ i < N) or target/receive
// buffer (N ≤ i < 2N).
func (s *session) slot(i int) int { return i * s.bufSize }

// setUp is set_up_connection (and ctx_alloc_credit for iWARP Send tests): every QP's
// dest: its number, a random PSN, the MR's rkey, its target slot, the outstanding reads
// and the GID (the IPv4 address, softrnic's only GID).
func (s *session) setUp() {
	n := len(s.qps)
	gid := roce.GIDFromAddr(s.localIP())
	gidx := uint32(max(s.o.GIDIndex, 0))
	for i, qp := range s.qps {
		s.my[i] = dest{QPN: qp.Num(), PSN: rand.Uint32() & 0xffffff, RKey: s.mr.RKey(),
			VAddr: s.mr.Addr() + uint64(s.slot(n+i)), OutReads: uint32(s.o.OutReads), GID: gid, GIDIndex: gidx}
		if s.ctrlMR != nil {
			s.my[i].RKey, s.my[i].VAddr = s.ctrlMR.RKey(), s.ctrlMR.Addr()+uint64(4*(n+i))
		}
	}
}

// localIP is the address the GID is made of: the RoCEv2 link's, else the exchange's
// local address.
func (s *session) localIP() netip.Addr {
	if s.laddr.IsValid() {
		return s.laddr
	}
	if rc, ok := s.comm.(*rdmaComm); ok && rc.conn != nil {
		if a, ok := rc.conn.LocalAddr().(*net.TCPAddr); ok {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				return ip.Unmap()
			}
		}
	}
	return s.t.LocalIP()
}

// printBanner prints ctx_print_test_info.
func (s *session) printBanner() {
	o := &s.o
	b := banner{verb: o.Verb, atomic: o.Atomic, latency: o.Latency, bidir: o.Bidir, device: s.dev.Name(), qps: len(s.qps),
		iwarp: o.iwarp(), client: !s.server, txDepth: o.TxDepth, rxDepth: o.RxDepth, cqMod: o.CQMod,
		mtuBytes: roce.MTU(s.mtu).Bytes(), gidIndex: max(o.GIDIndex, 0), outReads: o.OutReads, rdmaCM: o.RDMACM,
		commCM: o.commCM(), noRelaxed: o.NoPCIeRO || (o.Latency && o.Verb == Write)}
	s.printf("%s", b.String())
}

// exchangeKeys is the keys exchange common to every test: a handshake per QP, the GID
// check and, without -R, the QPs' connection by hand (ctx_check_gid_compatibility,
// ctx_connect).
func (s *session) exchangeKeys(ctx context.Context) error {
	for i := range s.qps {
		r, err := s.hs(ctx, &s.my[i])
		if err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		s.rem[i] = r
	}
	if s.o.RDMACM {
		return nil
	}
	if gidIPv4(s.my[0].GID) != gidIPv4(s.rem[0].GID) {
		return errors.New("Found Incompatibility issue with GID types. Please Try to use a different IP version.")
	}
	return s.connectManual()
}

// printLocal and exchangeRemote print the address lines: every local QP's, then a
// handshake and the remote line per QP.
func (s *session) printLocal() {
	for i := range s.my {
		s.printf("%s", destLine("local", &s.my[i], s.o.Verb, s.o.commCM()))
	}
}

func (s *session) exchangeRemote(ctx context.Context) error {
	for i := range s.qps {
		r, err := s.hs(ctx, &s.my[i])
		if err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		s.rem[i] = r
		s.printf("%s", destLine("remote", &s.rem[i], s.o.Verb, s.o.commCM()))
	}
	return nil
}

// closeConnection is ctx_close_connection: the closing handshake and, over TCP, "done".
func (s *session) closeConnection(ctx context.Context) error {
	if s.server && s.o.commCM() {
		// The server answers the client's closing message (xchg's order). The client
		// disconnects as soon as it has the answer, and on a lossy link its ACK of the
		// answer can come after its DREQ, which flushes our send: that is the client done
		// with the session, not a failure.
		if _, err := s.comm.recv(ctx, destLen); err != nil {
			return fmt.Errorf("closing the connection: %w", err)
		}
		if err := s.comm.send(ctx, s.my[0].Append(nil)); err != nil && !errors.Is(err, errPeerClosed) &&
			!errors.Is(err, rocev2.ErrPeerDisconnected) {
			return fmt.Errorf("closing the connection: %w", err)
		}
		return nil
	}
	if err := s.sync(ctx, "closing the connection"); err != nil {
		if s.o.commCM() && errors.Is(err, errPeerClosed) {
			// The server disconnects once it has answered our closing message. On a lossy
			// link its answer can be lost and its retransmission flushed by that
			// disconnect (rdma_disconnect moves the QP to Error): the server is done with
			// the session either way, and the results are out.
			return nil
		}
		return err
	}
	if !s.o.commCM() {
		return s.comm.send(ctx, []byte(doneMsg))
	}
	return nil
}

// qpFailure explains a failed completion on data QP i.
func (s *session) qpFailure(i int, wc rnic.Completion) error {
	code, text := tool.IBVStatus(wc.Status)
	what := fmt.Sprintf("data QP %d: %v completion with error: %s (%d)", i, wc.Opcode, text, code)
	q := s.qps[min(max(i, 0), len(s.qps)-1)]
	select {
	case <-q.Done():
	case <-time.After(time.Second): // the transport records the cause as it tears the QP down
	}
	if err := q.Err(); err != nil {
		if cm.IsPeerClose(err) {
			return fmt.Errorf("%s: the peer closed the connection", what)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if wc.Status == rnic.StatusWRFlushErr {
		return fmt.Errorf("%s: the connection was closed", what)
	}
	return errors.New(what)
}
