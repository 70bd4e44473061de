package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// session holds the verbs resources of one test (perftest's pingpong_context and the
// communication context).
type session struct {
	o        Options
	isServer bool
	dev      *rnic.Device
	pd       *rnic.PD
	commCQ   *rnic.CQ
	dataCQ   *rnic.CQ
	commQP   *rnic.QP
	dataQP   *rnic.QP
	ep       *rocev2.Endpoint // --roce
	ln       *listener        // server
	commConn *conn
	dataConn *conn
	stdout   io.Writer

	commRecv   []byte
	commRecvMR *rnic.MR
	commSend   []byte
	commSendMR *rnic.MR
	pending    [][]byte // received communication messages not yet consumed
	commErr    error    // first failed completion on the communication QP

	buf      []byte // data buffer: Write target / Read source / Send source and sink
	bufMR    *rnic.MR
	credit   []byte // Send tests: credit counter (client: written by the server; server: source)
	creditMR *rnic.MR

	closeCtx   context.Context // run's context without the data-QP watch (finish)
	remVersion float64
	cycle      int
	cacheLine  int
	my, rem    dest
	wc         [64]rnic.Completion
}

func newSession(o Options, stdout io.Writer) (*session, error) {
	s := &session{o: o, isServer: o.Peer == "", cycle: defPageSize, cacheLine: defCacheLn, stdout: stdout}
	var err error
	fail := func(e error) (*session, error) { s.close(); return nil, e }
	if s.dev, s.ep, err = openDevice(o.RoCE, func() (netip.Addr, error) { return localAddr(&o) }); err != nil {
		return fail(err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.commCQ, err = s.dev.CreateCQ(4 * commRecvs); err != nil {
		return fail(err)
	}
	if s.dataCQ, err = s.dev.CreateCQ(o.TxDepth + o.RxDepth + 64); err != nil {
		return fail(err)
	}
	if s.commQP, err = s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.commCQ, RecvCQ: s.commCQ, Cap: rnic.QPCap{
		MaxSendWR: commRecvs, MaxRecvWR: commRecvs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: commSlot}}); err != nil {
		return fail(err)
	}
	if s.dataQP, err = s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.dataCQ, RecvCQ: s.dataCQ, Cap: rnic.QPCap{
		MaxSendWR: o.TxDepth + 16, MaxRecvWR: max(o.RxDepth, 1), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 8}}); err != nil {
		return fail(err)
	}
	s.commRecv = make([]byte, commRecvs*commSlot)
	if s.commRecvMR, err = s.pd.RegMR(s.commRecv, rnic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	s.commSend = make([]byte, commSlot)
	if s.commSendMR, err = s.pd.RegMR(s.commSend, 0); err != nil {
		return fail(err)
	}
	s.credit = make([]byte, 8)
	if s.creditMR, err = s.pd.RegMR(s.credit, rnic.AccessLocalWrite|rnic.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	for i := 0; i < commRecvs; i++ {
		if err := s.postCommRecv(i); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

func (s *session) close() {
	s.dataConn.close()
	s.commConn.close()
	if s.ln != nil {
		s.ln.close()
	}
	for _, q := range []*rnic.QP{s.dataQP, s.commQP} {
		if q != nil {
			_ = q.Destroy()
		}
	}
	if s.ep != nil {
		_ = s.ep.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
}

// localAddr is the RoCE link's local address: --bind, else the route to the server.
func localAddr(o *Options) (netip.Addr, error) {
	if o.Bind != "" {
		return tool.ParseIP("--roce: --bind", o.Bind)
	}
	return tool.RouteSource(o.Peer, roce.UDPPort)
}

func (s *session) printf(format string, args ...any) { fmt.Fprintf(s.stdout, format, args...) }

func (s *session) postCommRecv(i int) error {
	return s.commQP.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{s.commRecvMR.SGE(i*commSlot, commSlot)}})
}

// sendComm sends msg on the communication QP (inline: the buffer is free on return).
func (s *session) sendComm(msg []byte) error {
	n := copy(s.commSend, msg)
	return s.commQP.PostSend(&rnic.SendWR{WRID: 1 << 32, Opcode: rnic.OpSend, Flags: rnic.Signaled | rnic.Inline,
		SGL: []rnic.SGE{s.commSendMR.SGE(0, n)}})
}

// recvComm returns the next message received on the communication QP. A batch of
// completions can hold the peer's last message followed by the flushes of the remaining
// receives (perftest's server disconnects right after its closing-sync message); the
// message is returned first and the error only when no message is left.
func (s *session) recvComm(ctx context.Context) ([]byte, error) {
	for len(s.pending) == 0 {
		if s.commErr != nil {
			return nil, s.commErr
		}
		n, err := s.commCQ.Wait(ctx, s.wc[:])
		if err != nil {
			if c := context.Cause(ctx); c != nil {
				return nil, c
			}
			return nil, err
		}
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				if s.commErr == nil {
					s.commErr = s.qpError(s.commQP, "communication QP", wc)
				}
				continue
			}
			if wc.Opcode != rnic.WCRecv || s.commErr != nil {
				continue
			}
			i := int(wc.WRID)
			if i < 0 || i >= commRecvs {
				return nil, fmt.Errorf("bad receive completion %d", wc.WRID)
			}
			msg := append([]byte(nil), s.commRecv[i*commSlot:i*commSlot+min(int(wc.ByteLen), commSlot)]...)
			s.pending = append(s.pending, msg)
			if err := s.postCommRecv(i); err != nil {
				s.commErr = err
			}
		}
	}
	m := s.pending[0]
	s.pending = s.pending[1:]
	return m, nil
}

// xchg is ctx_xchg_data / ctx_hand_shake over rdma_cm: the client sends, then receives;
// the server receives, then sends.
func (s *session) xchg(ctx context.Context, msg []byte) ([]byte, error) {
	if !s.isServer {
		if err := s.sendComm(msg); err != nil {
			return nil, err
		}
		return s.recvComm(ctx)
	}
	r, err := s.recvComm(ctx)
	if err != nil {
		return nil, err
	}
	return r, s.sendComm(msg)
}

// handshake exchanges pingpong_dest messages (ctx_hand_shake) and returns the peer's.
func (s *session) handshake(ctx context.Context, my *dest) (dest, error) {
	r, err := s.xchg(ctx, my.Append(nil))
	if err != nil {
		return dest{}, err
	}
	return parseDest(r)
}

// qpError explains a failed completion on q.
func (s *session) qpError(q *rnic.QP, which string, wc rnic.Completion) error {
	select {
	case <-q.Done():
	case <-time.After(2 * time.Second):
	}
	var te *iwarp.TermError
	if err := q.Err(); errors.As(err, &te) {
		dir := "received"
		if te.Sent {
			dir = "sent"
		}
		return fmt.Errorf("%s: completion %v status %v: Terminate %s: %v", which, wc.Opcode, wc.Status, dir, te.TerminateError)
	} else if err != nil {
		return fmt.Errorf("%s: completion %v status %v: %v", which, wc.Opcode, wc.Status, err)
	}
	return fmt.Errorf("%s: completion %v status %v (peer disconnected)", which, wc.Opcode, wc.Status)
}

func (s *session) run(ctx context.Context) error {
	o := s.o
	// The communication connection (establish_connection).
	if s.isServer {
		host := o.Bind
		if host == "" {
			host = "0.0.0.0"
		}
		ln, err := listen(s.dev, s.ep, host, &s.o)
		if err != nil {
			return fmt.Errorf("rdma_bind_addr: %w", err)
		}
		s.ln = ln
		if o.Listening != nil {
			o.Listening(ln.addr())
		}
		s.printf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
		if s.commConn, err = ln.accept(ctx, s.commQP, 1); err != nil {
			return fmt.Errorf("communication connection: %w", err)
		}
	} else {
		var err error
		if s.commConn, err = dial(ctx, s.ep, s.commQP, &s.o, 1); err != nil {
			return fmt.Errorf("communication connection: %w", err)
		}
	}
	// exchange_versions, check_version_compatibility, check_sys_data, check_mtu.
	r, err := s.xchg(ctx, versionMsg(version))
	if err != nil {
		return fmt.Errorf("version exchange: %w", err)
	}
	rv, f, err := parseVersion(r)
	if err != nil {
		return err
	}
	if f < minVersion {
		return fmt.Errorf("peer perftest version %q is older than %.2f (not supported, as in perftest)", rv, minVersion)
	}
	s.remVersion = f
	for _, p := range []*int{&s.cycle, &s.cacheLine} {
		r, err := s.xchg(ctx, int32Msg(*p))
		if err != nil {
			return fmt.Errorf("system data exchange: %w", err)
		}
		v, err := parseInt32(r)
		if err != nil {
			return err
		}
		*p = max(*p, v)
	}
	mtu := mtuEnum1024
	if r, err = s.xchg(ctx, mtuMsg(mtu)); err != nil {
		return fmt.Errorf("MTU exchange: %w", err)
	}
	if m := parseMTU(r); m != 0 {
		mtu = min(mtu, m)
	}
	// The data buffer: BUFF_SIZE(size, cycle buffer).
	s.buf = make([]byte, max(o.Size, s.cycle))
	for i := range s.buf {
		s.buf[i] = byte(i)
	}
	if s.bufMR, err = s.pd.RegMR(s.buf, rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite); err != nil {
		return err
	}
	// create_rdma_cm_connection: a handshake, the data connection, a handshake.
	var zero dest
	if _, err := s.handshake(ctx, &zero); err != nil {
		return fmt.Errorf("sync before the data connection: %w", err)
	}
	if err := s.connectData(ctx); err != nil {
		return fmt.Errorf("data connection: %w", err)
	}
	// From here an error on the data QP ends waits on the communication QP, except in the
	// closing sync (finish), when the peer may already be tearing the data connection down.
	s.closeCtx = ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.dataQP.Done():
			err := s.dataQP.Err()
			if err == nil {
				err = errors.New("data connection closed")
			}
			cancel(fmt.Errorf("data QP: %w", err))
		case <-ctx.Done():
		}
	}()
	if _, err := s.handshake(ctx, &zero); err != nil {
		return fmt.Errorf("sync after the data connection: %w", err)
	}
	// set_up_connection.
	s.my = dest{QPN: s.dataQP.Num(), PSN: rand.Uint32() & 0xffffff, RKey: s.bufMR.RKey(), VAddr: s.bufMR.Addr(),
		OutReads: uint32(o.OutReads), GIDIndex: 0xffffffff}
	if o.Verb == Send {
		// iWARP has no RNR retry: the receiver grants credits (ctx_alloc_credit).
		s.my.RKey, s.my.VAddr = s.creditMR.RKey(), s.creditMR.Addr()
	}
	s.printInfo(mtu)
	if o.Verb == Send {
		return s.runSend(ctx)
	}
	return s.runRDMA(ctx)
}

// connectData makes the data connection: the server accepts the next request on its
// listener (perftest listens again on the same port); the client retries as
// rdma_cm_client_connection does (10 times, 100 ms apart) while the server gets ready.
func (s *session) connectData(ctx context.Context) error {
	depth := 1
	if s.o.Verb == Read {
		depth = s.o.OutReads
	}
	if s.isServer {
		var err error
		s.dataConn, err = s.ln.accept(ctx, s.dataQP, s.dev.Config().MaxIRD)
		return err
	}
	var err error
	for i := 0; i < 10; i++ {
		if s.dataConn, err = dial(ctx, s.ep, s.dataQP, &s.o, depth); err == nil {
			return nil
		}
		if ctx.Err() != nil || s.dataQP.State() != rnic.QPIdle {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return err
}

func (s *session) printInfo(mtu int) {
	o := s.o
	s.printf("%s                    %v BW Test\n", resultLine, o.Verb)
	s.printf(" Dual-port       : OFF\t\tDevice         : %s\n", s.dev.Name())
	tt := "IW"
	if o.RoCE {
		tt = "IB"
	}
	s.printf(" Number of qps   : 1\t\tTransport type : %s\n", tt)
	s.printf(" Connection type : RC\t\tUsing SRQ      : OFF\n")
	if !s.isServer || o.Verb == Send {
		s.printf(" TX depth        : %d\n", o.TxDepth)
	}
	if o.Verb == Send {
		s.printf(" RX depth        : %d\n", o.RxDepth)
	}
	s.printf(" CQ Moderation   : %d\n", o.CQMod)
	s.printf(" Mtu             : %d[B]\n", 128<<mtu)
	s.printf(" Link type       : Ethernet\n")
	if o.Verb == Read {
		s.printf(" Outstand reads  : %d\n", o.OutReads)
	}
	s.printf(" rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n")
	if p, ok := s.dataConn.mpa(); ok {
		s.printf(" MPA             : rev %d, CRC %v, IRD %d ORD %d\n", p.Rev, p.CRC, p.IRD, p.ORD)
	}
	s.printf("%s", resultLine)
}

const resultLine = "---------------------------------------------------------------------------------------\n"

func (s *session) printDest(side string, d *dest) {
	s.printf(" %s address: LID %#04x QPN %#06x PSN %#06x", side, d.LID, d.QPN, d.PSN)
	if s.o.Verb == Read {
		s.printf(" OUT %#04x", d.OutReads)
	}
	s.printf(" RKey %#08x VAddr %#016x\n", d.RKey, d.VAddr)
}

func (s *session) printHeader() {
	if s.o.Gbits {
		s.printf("%s #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n", resultLine)
	} else {
		s.printf("%s #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n", resultLine)
	}
}

// printReport prints a report line in perftest's format (REPORT_FMT, or REPORT_FMT_EXT
// for averages below 0.1 Gb/s).
func (s *session) printReport(r bwReport) {
	if s.o.gotReport != nil {
		s.o.gotReport(r)
	}
	if s.o.Gbits && r.Avg < 0.1 {
		s.printf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRateAvg)
		return
	}
	s.printf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRateAvg)
}

// bwMeter turns completion times into perftest's report: the average over the whole run
// and the peak, here the best rate over any interval between two completions.
type bwMeter struct {
	size       int
	gbits      bool
	start, end time.Time
	last       time.Time
	peak       float64 // bytes per second
}

func (m *bwMeter) begin(t time.Time) { m.start, m.last = t, t }

// done records that n messages completed at t.
func (m *bwMeter) done(n uint64, t time.Time) {
	if d := t.Sub(m.last).Seconds(); d > 0 {
		m.peak = max(m.peak, float64(n)*float64(m.size)/d)
	}
	m.last, m.end = t, t
}

func (m *bwMeter) report(iters uint64) bwReport {
	unit := float64(0x100000) // MB/s as perftest counts them
	if m.gbits {
		unit = 125e6
	}
	r := bwReport{Size: uint64(m.size), Iters: iters}
	if d := m.end.Sub(m.start).Seconds(); d > 0 {
		r.Avg = float64(iters) * float64(m.size) / d / unit
		r.MsgRateAvg = float64(iters) / d / 1e6
	}
	r.Peak = max(m.peak/unit, r.Avg)
	return r
}

// runRDMA is the RDMA Write / RDMA Read test after set_up_connection.
func (s *session) runRDMA(ctx context.Context) error {
	rem, err := s.handshake(ctx, &s.my)
	if err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.printDest("local", &s.my)
	if rem, err = s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.rem = rem
	s.printDest("remote", &s.rem)
	if _, err := s.handshake(ctx, &s.my); err != nil { // "additional handshake after RTR"
		return fmt.Errorf("sync after RTR: %w", err)
	}
	s.printHeader()
	var mine bwReport
	if s.isServer {
		// The server only waits for the client to finish.
		if _, err := s.handshake(ctx, &s.my); err != nil {
			return fmt.Errorf("waiting for the client's test: %w", err)
		}
	} else {
		if mine, err = s.postRDMA(ctx); err != nil {
			return err
		}
		s.printReport(mine)
		s.printf("%s", resultLine)
		if _, err := s.handshake(ctx, &s.my); err != nil {
			return fmt.Errorf("sync after the test: %w", err)
		}
	}
	// xchg_bw_reports; the server prints the client's.
	var theirs bwReport
	for i, m := range mine.messages(s.remVersion) {
		r, err := s.xchg(ctx, m)
		if err != nil {
			return fmt.Errorf("report exchange: %w", err)
		}
		if err := theirs.setField(i, r, s.remVersion); err != nil {
			return err
		}
	}
	if s.isServer {
		s.printReport(theirs)
	}
	return s.finish(ctx)
}

// finish is ctx_close_connection and the teardown. The client gives the server a moment
// (linger) to close the communication connection itself, as perftest servers do, because
// siw fails a SEND whose connection closes before its transmit thread has reported it
// complete (siw_sq_flush: IBV_WC_LOC_QP_OP_ERR), which makes perftest's server exit 1
// after its final message; then it disconnects both connections. The server waits (at
// most 5 s each) for the client's disconnects.
//
// The closing sync waits on the context without the data-QP watch: a perftest server
// destroys its data QP right after answering it, and that disconnect can overtake the
// answer on the communication connection.
func (s *session) finish(ctx context.Context) error {
	if s.closeCtx != nil {
		ctx = s.closeCtx
	}
	if _, err := s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("closing sync: %w", err)
	}
	if s.isServer {
		s.printf("%s", resultLine)
	} else {
		select {
		case <-s.commQP.Done():
		case <-time.After(s.o.Linger):
		}
	}
	for _, q := range []*rnic.QP{s.dataQP, s.commQP} {
		if !s.isServer {
			q.Disconnect()
		}
		select {
		case <-q.Done():
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}

// postRDMA posts iters RDMA Writes or Reads of size bytes to the server's buffer, at most
// TX depth outstanding, a completion requested every CQ-moderation WRs and on the last
// (run_iter_bw). Unlike perftest it does not walk the remote address through the cycle
// buffer (that only matters for CPU caches).
func (s *session) postRDMA(ctx context.Context) (bwReport, error) {
	o := s.o
	op := rnic.OpWrite
	if o.Verb == Read {
		op = rnic.OpRead
	}
	wr := rnic.SendWR{Opcode: op, SGL: []rnic.SGE{s.bufMR.SGE(0, o.Size)}, RemoteAddr: s.rem.VAddr, RKey: s.rem.RKey}
	m := bwMeter{size: o.Size, gbits: o.Gbits}
	iters, depth, mod := uint64(o.Iters), uint64(o.TxDepth), uint64(o.CQMod)
	var scnt, ccnt, lastSig uint64
	start := time.Now()
	m.begin(start)
	if o.Duration > 0 {
		// -D: post until the time is up, then count what the last completion covers
		// (the unsignaled tail finishes before the disconnect but is not counted).
		iters = math.MaxUint64
	}
	for ccnt < iters {
		for scnt < iters && scnt-ccnt < depth {
			if o.Duration > 0 && time.Since(start) >= o.Duration {
				iters = lastSig
				break
			}
			wr.Flags = 0
			if (scnt+1)%mod == 0 || scnt+1 == iters {
				wr.Flags = rnic.Signaled
				wr.WRID = scnt + 1 - lastSig // how many WRs this completion covers
				lastSig = scnt + 1
			}
			if err := s.dataQP.PostSend(&wr); err != nil {
				return bwReport{}, fmt.Errorf("post send (scnt=%d): %w", scnt, err)
			}
			scnt++
		}
		if ccnt >= iters {
			break
		}
		n, err := s.dataCQ.Wait(ctx, s.wc[:])
		if err != nil {
			return bwReport{}, fmt.Errorf("poll CQ (ccnt=%d): %w", ccnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return bwReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			ccnt += wc.WRID
			m.done(wc.WRID, now)
		}
	}
	return m.report(ccnt), nil
}

// causeOf prefers the cancellation cause of ctx to err.
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

// runSend is the Send test after set_up_connection.
func (s *session) runSend(ctx context.Context) error {
	o := s.o
	rem, err := s.handshake(ctx, &s.my) // keys (the credit buffers)
	if err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	if _, err := s.handshake(ctx, &s.my); err != nil { // where ctx_connect would be
		return fmt.Errorf("sync: %w", err)
	}
	s.printDest("local", &s.my)
	if rem, err = s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.rem = rem
	s.printDest("remote", &s.rem)
	s.printHeader()
	recv := rnic.RecvWR{SGL: []rnic.SGE{s.bufMR.SGE(0, o.Size)}}
	if s.isServer {
		for i := 0; i < o.RxDepth; i++ { // ctx_set_recv_wqes
			if err := s.dataQP.PostRecv(&recv); err != nil {
				return fmt.Errorf("post recv: %w", err)
			}
		}
	}
	if _, err := s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("sync before the test: %w", err)
	}
	var r bwReport
	if s.isServer {
		r, err = s.recvSends(ctx, &recv)
	} else {
		r, err = s.postSends(ctx)
	}
	if err != nil {
		return err
	}
	s.printReport(r)
	if !s.isServer {
		s.printf("%s", resultLine)
	}
	return s.finish(ctx)
}

// recvSends receives iters messages, re-posting each receive and granting credits with a
// 4-byte RDMA Write of the receive count every rx-depth/3 receives (run_iter_bw_server).
func (s *session) recvSends(ctx context.Context, recv *rnic.RecvWR) (bwReport, error) {
	o := s.o
	iters, rx := uint64(o.Iters), uint64(o.RxDepth)
	creditCnt := max(rx/3, 1)
	credit := rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Inline, SGL: []rnic.SGE{s.creditMR.SGE(0, 4)},
		RemoteAddr: s.rem.VAddr, RKey: s.rem.RKey}
	m := bwMeter{size: o.Size, gbits: o.Gbits}
	var rcnt uint64
	posted := rx
	for rcnt < iters {
		n, err := s.dataCQ.Wait(ctx, s.wc[:])
		if err != nil {
			return bwReport{}, fmt.Errorf("poll CQ (rcnt=%d): %w", rcnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return bwReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			if wc.Opcode != rnic.WCRecv {
				continue // a credit Write
			}
			if rcnt == 0 {
				m.begin(now)
			}
			rcnt++
			m.done(1, now)
			if posted < iters {
				if err := s.dataQP.PostRecv(recv); err != nil {
					return bwReport{}, fmt.Errorf("post recv (rcnt=%d): %w", rcnt, err)
				}
				posted++
			}
			if (rcnt%rx)%creditCnt == 0 {
				v := uint32(rcnt)
				if o.testCredit != nil {
					v = o.testCredit(v)
				}
				// Inline: the value is copied at post time, so the buffer is free at once.
				binary.LittleEndian.PutUint32(s.credit[:4], v)
				if err := s.postRetry(ctx, &credit); err != nil {
					return bwReport{}, fmt.Errorf("post credit (rcnt=%d): %w", rcnt, err)
				}
			}
		}
	}
	return m.report(iters), nil
}

// postRetry posts wr, waiting while the send queue is full of (unsignaled) credit Writes.
func (s *session) postRetry(ctx context.Context, wr *rnic.SendWR) error {
	for {
		err := s.dataQP.PostSend(wr)
		if !errors.Is(err, rnic.ErrQueueFull) {
			return err
		}
		if ctx.Err() != nil {
			return causeOf(ctx, ctx.Err())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// postSends sends iters messages, at most TX depth outstanding and never more than
// rx-depth beyond the server's credit (run_iter_bw with send_rcredit).
func (s *session) postSends(ctx context.Context) (bwReport, error) {
	o := s.o
	wr := rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{s.bufMR.SGE(0, o.Size)}}
	m := bwMeter{size: o.Size, gbits: o.Gbits}
	iters, depth, mod, rx := uint64(o.Iters), uint64(o.TxDepth), uint64(o.CQMod), uint32(o.RxDepth)
	var scnt, ccnt, lastSig uint64
	spins := 0
	m.begin(time.Now())
	for ccnt < iters {
		waitCredit := false
		for scnt < iters && scnt-ccnt < depth {
			if uint32(scnt+1)-loadCredit(&s.credit[0]) >= rx {
				waitCredit = true
				break
			}
			wr.Flags = 0
			if (scnt+1)%mod == 0 || scnt+1 == iters {
				wr.Flags = rnic.Signaled
				wr.WRID = scnt + 1 - lastSig
				lastSig = scnt + 1
			}
			if err := s.dataQP.PostSend(&wr); err != nil {
				return bwReport{}, fmt.Errorf("post send (scnt=%d): %w", scnt, err)
			}
			scnt++
		}
		var n int
		var err error
		if waitCredit {
			// Completions may never come for the unsignaled tail: poll, and spin on the
			// credit.
			if n, err = s.dataCQ.Poll(s.wc[:]); err == nil && n == 0 {
				if ctx.Err() != nil {
					return bwReport{}, fmt.Errorf("waiting for credits (scnt=%d): %w", scnt, causeOf(ctx, ctx.Err()))
				}
				if s.dataQP.State() != rnic.QPRTS {
					return bwReport{}, fmt.Errorf("data QP left RTS while waiting for credits: %v", s.dataQP.Err())
				}
				if spins++; spins%64 == 0 {
					time.Sleep(20 * time.Microsecond)
				} else {
					runtime.Gosched()
				}
				continue
			}
		} else {
			n, err = s.dataCQ.Wait(ctx, s.wc[:])
		}
		if err != nil {
			return bwReport{}, fmt.Errorf("poll CQ (ccnt=%d): %w", ccnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return bwReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			ccnt += wc.WRID
			m.done(wc.WRID, now)
		}
	}
	return m.report(iters), nil
}

// openDevice opens the device and, for RoCE, its endpoint on UDP 4791 at the local address.
func openDevice(useRoCE bool, localAddr func() (netip.Addr, error)) (*rnic.Device, *rocev2.Endpoint, error) {
	devCfg := rnic.Config{Name: tool.DefaultDevice}
	var laddr netip.Addr
	if useRoCE {
		var err error
		if laddr, err = localAddr(); err != nil {
			return nil, nil, err
		}
		devCfg.LocalAddr = laddr.String()
	}
	dev, err := rnic.Open(devCfg)
	if err != nil || !useRoCE {
		return dev, nil, err
	}
	link, err := rocev2.ListenUDP(netip.AddrPortFrom(laddr, roce.UDPPort), nil)
	if err != nil {
		return dev, nil, fmt.Errorf("RoCEv2 UDP socket on %v: %w", laddr, err)
	}
	cfg := rocev2.DefaultConfig()
	cfg.PeerPort = roce.UDPPort
	return dev, rocev2.NewEndpoint(dev, link, cfg), nil
}
