package perftest

// The bandwidth tests: write_bw.c, read_bw.c and atomic_bw.c (runBW), send_bw.c
// (runSendBW), and their loops (perftest_resources.c: run_iter_bw, run_iter_bw_server,
// run_iter_bi).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softrnic/softrnic/rnic"
)

// allSizes are -a's sizes: 2^1 … 2^23.
func allSizes() []int {
	s := make([]int, 0, 23)
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

func (s *session) bwHeader() {
	h := bwHeaderMB
	if s.o.Gbits {
		h = bwHeaderGb
	}
	s.printf("%s%s\n", resultLine, h)
}

// printBW prints a report row (through the hook tests use).
func (s *session) printBW(r bwReport) {
	if s.o.gotReport != nil {
		s.o.gotReport(r)
	}
	s.printf("%s", bwRow(r, s.o.Gbits))
}

// xchgReports is xchg_bw_reports: size, iters, peak, average and message rate, each in
// its own exchange.
func (s *session) xchgReports(ctx context.Context, mine bwReport) (bwReport, error) {
	var theirs bwReport
	for i, m := range mine.messages(s.remVersion) {
		n := 8
		if i == 1 && s.remVersion < longIters {
			n = 4
		}
		r, err := s.xchg(ctx, m, n)
		if err != nil {
			return theirs, fmt.Errorf("report exchange: %w", err)
		}
		if err := theirs.setField(i, r, s.remVersion); err != nil {
			return theirs, err
		}
	}
	return theirs, nil
}

// sum is print_full_bw_report with the peer's report: the two sides' rates added.
func sum(a, b bwReport) bwReport {
	return bwReport{Size: a.Size, Iters: a.Iters, Peak: a.Peak + b.Peak, Avg: a.Avg + b.Avg, MsgRateAvg: a.MsgRateAvg + b.MsgRateAvg}
}

// runBW is the RDMA Write, RDMA Read and atomic bandwidth test after set_up_connection.
func (s *session) runBW(ctx context.Context) error {
	o := &s.o
	s.printBanner()
	if err := s.exchangeKeys(ctx); err != nil {
		return err
	}
	s.printLocal()
	if err := s.exchangeRemote(ctx); err != nil {
		return err
	}
	if err := s.sync(ctx, "sync after RTR"); err != nil {
		return err
	}
	s.bwHeader()
	if s.server && !o.Bidir {
		// The server only waits for the client's test and prints the client's report.
		if err := s.sync(ctx, "waiting for the client's test"); err != nil {
			return err
		}
		theirs, err := s.xchgReports(ctx, bwReport{})
		if err != nil {
			return err
		}
		s.printBW(theirs)
		if o.Verb == Atomic {
			s.printf("%s", resultLine)
		}
		if err := s.closeConnection(ctx); err != nil {
			return err
		}
		if o.Verb != Atomic {
			s.printf("%s", resultLine)
		}
		return nil
	}
	sizes := []int{o.Size}
	if o.All {
		sizes = allSizes()
	}
	var mine bwReport
	for _, size := range sizes {
		if o.Bidir {
			if err := s.sync(ctx, "sync before the test"); err != nil {
				return err
			}
		}
		r, err := s.iterBW(ctx, size, false)
		if err != nil {
			return err
		}
		mine = r
		if !o.Bidir {
			s.printBW(mine)
			continue
		}
		if o.All {
			if err := s.sync(ctx, "sync after the test"); err != nil {
				return err
			}
		}
		theirs, err := s.xchgReports(ctx, mine)
		if err != nil {
			return err
		}
		s.printBW(sum(mine, theirs))
	}
	s.printf("%s", resultLine)
	if !o.Bidir {
		if err := s.sync(ctx, "sync after the test"); err != nil {
			return err
		}
		if _, err := s.xchgReports(ctx, mine); err != nil {
			return err
		}
	}
	return s.closeConnection(ctx)
}

// runSendBW is the Send bandwidth test after set_up_connection.
func (s *session) runSendBW(ctx context.Context) error {
	o := &s.o
	s.printBanner()
	if err := s.exchangeKeys(ctx); err != nil {
		return err
	}
	if err := s.sync(ctx, "sync after the connection"); err != nil {
		return err
	}
	s.printLocal()
	if err := s.exchangeRemote(ctx); err != nil {
		return err
	}
	s.bwHeader()
	sizes := []int{o.Size}
	if o.All {
		sizes = allSizes()
	}
	for _, size := range sizes {
		receiver := s.server || o.Bidir
		if receiver {
			if err := s.postRecvs(size); err != nil {
				return err
			}
		}
		if err := s.sync(ctx, "sync before the test"); err != nil {
			return err
		}
		if s.ctrl != nil { // the credits start again at every size
			for i := range s.qps {
				storeCredit(s.creditSlot(i), 0)
			}
		}
		var (
			r   bwReport
			err error
		)
		switch {
		case o.Bidir:
			r, err = s.iterBW(ctx, size, true)
		case s.server:
			r, err = s.iterSendServer(ctx, size)
		default:
			r, err = s.iterBW(ctx, size, false)
		}
		if err != nil {
			return err
		}
		if !o.Bidir || o.Duration > 0 {
			s.printBW(r)
		}
		if o.Bidir && o.Duration == 0 {
			theirs, err := s.xchgReports(ctx, r)
			if err != nil {
				return err
			}
			s.printBW(sum(r, theirs))
		}
		if o.All {
			if err := s.sync(ctx, "sync after the test"); err != nil {
				return err
			}
		}
	}
	s.printf("%s", resultLine)
	return s.closeConnection(ctx)
}

// postRecvs posts RxDepth receives of size bytes on every QP into its receive slot
// (ctx_set_recv_wqes).
func (s *session) postRecvs(size int) error {
	n := len(s.qps)
	for i, qp := range s.qps {
		wr := rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{s.mr.SGE(s.slot(n+i), size)}}
		for range s.o.RxDepth {
			if err := qp.PostRecv(&wr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: %w", i, err)
			}
		}
	}
	return nil
}

// creditSlot is the uint32 the peer's credit Writes for QP i land in (ctx->credit_buf).
func (s *session) creditSlot(i int) *byte { return &s.ctrl[4*(len(s.qps)+i)] }

// sendWRs builds every QP's work request (ctx_set_send_reg_wqes): the verb from the QP's
// send slot to the peer's target slot (8 bytes for atomics: FETCH_AND_ADD adds 1,
// CMP_AND_SWAP compares and swaps 0); a Send carries size bytes.
func (s *session) sendWRs(size int) []rnic.SendWR {
	wrs := make([]rnic.SendWR, len(s.qps))
	for i := range wrs {
		w := &wrs[i]
		w.WRID = uint64(i)
		w.SGL = []rnic.SGE{s.mr.SGE(s.slot(i), size)}
		w.RemoteAddr, w.RKey = s.rem[i].VAddr, s.rem[i].RKey
		switch s.o.Verb {
		case Write:
			w.Opcode = rnic.OpWrite
		case Read:
			w.Opcode = rnic.OpRead
		case Send:
			w.Opcode = rnic.OpSend
			w.RemoteAddr, w.RKey = 0, 0
		case Atomic:
			w.SGL = []rnic.SGE{s.mr.SGE(s.slot(i), 8)}
			if s.o.Atomic == FetchAdd {
				w.Opcode, w.Compare = rnic.OpAtomicFetchAdd, 1
			} else {
				w.Opcode = rnic.OpAtomicCmpSwap
			}
		}
	}
	return wrs
}

// bwRun is one run of run_iter_bw / run_iter_bi.
type bwRun struct {
	s          *session
	iters      uint64
	dur        *durationRun
	noPeak     bool
	tposted    []cycles
	tcompleted []cycles
	sampled    uint64
}

func (s *session) newBWRun() *bwRun {
	o := &s.o
	r := &bwRun{s: s, iters: uint64(o.Iters), noPeak: o.noPeak()}
	n := 1
	if !r.noPeak {
		n = o.Iters * len(s.qps)
	}
	if cap(s.bwIn.tposted) >= n {
		r.tposted, r.tcompleted = s.bwIn.tposted[:n], s.bwIn.tcompleted[:n]
		clear(r.tposted)
		clear(r.tcompleted)
	} else {
		r.tposted, r.tcompleted = make([]cycles, n), make([]cycles, n)
		s.bwIn.tposted, s.bwIn.tcompleted = r.tposted, r.tcompleted
	}
	return r
}

// report is print_report_bw for the run.
func (r *bwRun) report(size int) bwReport {
	o := &r.s.o
	in := bwInput{size: uint64(size), iters: r.iters, qps: len(r.s.qps), cqMod: o.CQMod, noPeak: r.noPeak, gbits: o.Gbits,
		tposted: r.tposted, tcompleted: r.tcompleted}
	if r.dur != nil {
		in.duration, in.iters = true, r.sampled
		in.tposted[0], in.tcompleted[0] = r.dur.tStart.Load(), r.dur.tEnd.Load()
	}
	return in.report()
}

// iterBW posts iters WRs of size bytes on every QP (or until -D ends), at most TX depth
// outstanding per QP, a completion requested every CQ moderation WRs and on the last
// (run_iter_bw); each completion counts for CQ moderation WRs. Over iWARP a Send never
// gets more than rx-depth ahead of the credit the receiver RDMA-Writes. With bidir (Send
// tests) it also receives iters messages per QP and grants credits (run_iter_bi); a
// server starts sending at its first receive.
func (s *session) iterBW(ctx context.Context, size int, bidir bool) (bwReport, error) {
	o := &s.o
	r := s.newBWRun()
	n := len(s.qps)
	wrs := s.sendWRs(size)
	scnt, ccnt := make([]uint64, n), make([]uint64, n)
	tx, mod := uint64(o.TxDepth), uint64(o.CQMod)
	tot := r.iters * uint64(n)
	var totS, totC uint64
	recv := newReceiver(s, size)
	started := !bidir || !s.server // a bidirectional server sends after its first receive
	wctx := ctx
	if o.Duration > 0 && started {
		r.dur = startDuration(ctx, o.Duration, o.Margin)
		defer r.dur.stop()
		wctx = r.dur.ended
		r.iters = 0
		tot = 0
	}
	if r.noPeak && o.Duration == 0 {
		r.tposted[0] = now()
	}
	dur := func() bool { return o.Duration > 0 }
	running := func() bool {
		if dur() {
			return !r.dur.over()
		}
		return totS < tot || totC < tot || (bidir && recv.total < tot)
	}
	var sp spinner
	for running() {
		creditWait := false
		if started {
			for i := range n {
				w := &wrs[i]
				for (dur() || scnt[i] < r.iters) && scnt[i]+recv.scredit[i]-ccnt[i]+1 <= tx {
					if s.ctrl != nil && uint32(scnt[i]+1)-loadCredit(s.creditSlot(i)) >= uint32(o.RxDepth) {
						creditWait = true
						break
					}
					k := scnt[i]
					w.Flags = 0
					if k%mod == mod-1 || (!dur() && k == r.iters-1) {
						w.Flags = rnic.Signaled
					}
					if !r.noPeak {
						r.tposted[totS] = now()
					}
					if dur() && r.dur.over() {
						break
					}
					if err := s.qps[i].PostSend(w); err != nil {
						return bwReport{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, k, err)
					}
					scnt[i]++
					totS++
				}
			}
		}
		if !running() {
			break
		}
		var (
			k   int
			err error
		)
		if creditWait {
			if k, err = s.cq.Poll(s.wc); err == nil && k == 0 {
				if err := sp.spin(wctx); err != nil {
					if dur() && r.dur.over() {
						break
					}
					return bwReport{}, fmt.Errorf("waiting for credits (scnt=%d): %w", totS, causeOf(wctx, err))
				}
				continue
			}
		} else {
			k, err = s.cq.Wait(wctx, s.wc)
		}
		if err != nil {
			if dur() && r.dur.over() {
				break
			}
			return bwReport{}, fmt.Errorf("poll CQ (ccnt=%d): %w", totC, causeOf(wctx, err))
		}
		sp.reset()
		t := now()
		for _, wc := range s.wc[:k] {
			i := int(wc.WRID)
			if wc.Status != rnic.StatusSuccess {
				return bwReport{}, s.qpFailure(i, wc)
			}
			if i < 0 || i >= n {
				return bwReport{}, fmt.Errorf("completion for unknown QP %d", i)
			}
			switch {
			case wc.Opcode == rnic.WCRecv:
				if err := recv.got(ctx, i, dur() && r.dur.over(), o.Duration > 0); err != nil {
					return bwReport{}, err
				}
				if !started {
					started = true
					if o.Duration > 0 {
						r.dur = startDuration(ctx, o.Duration, o.Margin)
						defer r.dur.stop()
						wctx = r.dur.ended
						r.iters, tot = 0, 0
					}
				}
				if r.dur.sampling() {
					r.sampled++
				}
			case s.ctrl != nil && wc.Opcode == rnic.WCWrite: // a credit
				recv.scredit[i]--
			default:
				ccnt[i] += mod
				totC += mod
				if !r.noPeak {
					r.tcompleted[min(totC, tot)-1] = t
				}
				if r.dur.sampling() {
					r.sampled += mod
				}
			}
		}
	}
	if r.noPeak && o.Duration == 0 {
		r.tcompleted[0] = now()
	}
	if err := recv.drainCredits(ctx); err != nil {
		return bwReport{}, err
	}
	if bidir && !s.o.All {
		s.ranOut()
	}
	return r.report(size), nil
}

// receiver is the receiving half of a Send test: it reposts receives until iters per QP
// are posted and, over iWARP, RDMA-Writes the receive count to the sender's credit slot
// every rx-depth/3 receives (perftest's credits; there is no RNR retry on iWARP).
type receiver struct {
	s       *session
	iters   uint64
	total   uint64
	rcnt    []uint64
	posted  []uint64
	scredit []uint64 // credit Writes outstanding per QP
	wrs     []rnic.RecvWR
	credit  []rnic.SendWR
	every   uint64
	// deferred are receives reap took off the shared CQ while it waited for credit
	// Writes (the sender kept sending); the server's loop handles them next.
	deferred []int
}

func newReceiver(s *session, size int) *receiver {
	o := &s.o
	n := len(s.qps)
	rv := &receiver{s: s, iters: uint64(o.Iters), rcnt: make([]uint64, n), posted: make([]uint64, n), scredit: make([]uint64, n)}
	if o.Verb != Send {
		return rv
	}
	rv.wrs = make([]rnic.RecvWR, n)
	for i := range n {
		rv.posted[i] = uint64(o.RxDepth)
		rv.wrs[i] = rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{s.mr.SGE(s.slot(n+i), size)}}
	}
	if s.ctrl != nil {
		rv.every = uint64(o.RxDepth / 3)
		rv.credit = make([]rnic.SendWR, n)
		for i := range n {
			rv.credit[i] = rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpWrite, Flags: rnic.Signaled | rnic.Inline,
				SGL: []rnic.SGE{s.ctrlMR.SGE(4*i, 4)}, RemoteAddr: s.rem[i].VAddr, RKey: s.rem[i].RKey}
		}
	}
	return rv
}

// got handles a receive on QP i: repost while fewer than iters were posted (always under
// -D), and grant a credit when due.
func (rv *receiver) got(ctx context.Context, i int, over, duration bool) error {
	s := rv.s
	rv.rcnt[i]++
	rv.total++
	if (duration && !over) || rv.posted[i]+1 <= rv.iters {
		if err := s.qps[i].PostRecv(&rv.wrs[i]); err != nil {
			return fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", i, rv.rcnt[i], err)
		}
		rv.posted[i]++
	}
	if s.ctrl == nil || (rv.rcnt[i]%uint64(s.o.RxDepth))%rv.every != 0 {
		return nil
	}
	v := uint32(rv.rcnt[i])
	if s.o.testCredit != nil {
		v = s.o.testCredit(v)
	}
	binary.LittleEndian.PutUint32(s.ctrl[4*i:], v) // host order, as perftest stores it
	for rv.scredit[i] >= uint64(s.o.TxDepth) {
		if err := rv.reap(ctx, true); err != nil {
			return err
		}
	}
	if err := s.qps[i].PostSend(&rv.credit[i]); err != nil {
		return fmt.Errorf("Couldn't post send qp %d credit = %d: %w", i, rv.rcnt[i], err)
	}
	rv.scredit[i]++
	return nil
}

// reap takes credit-Write completions off the CQ (waiting for one with block). The CQ
// also takes the receives (perftest has a send and a receive CQ; this session one):
// those that come meanwhile are kept in deferred for the server's loop. A receiver that
// also sends (bidirectional) counts its send slots with the credits, so it never blocks
// on a full send queue.
func (rv *receiver) reap(ctx context.Context, block bool) error {
	s := rv.s
	var wc [16]rnic.Completion
	var k int
	var err error
	if block {
		k, err = s.cq.Wait(ctx, wc[:])
	} else {
		k, err = s.cq.Poll(wc[:])
	}
	if err != nil {
		return fmt.Errorf("waiting for credit Writes: %w", causeOf(ctx, err))
	}
	for _, c := range wc[:k] {
		i := int(c.WRID)
		if c.Status != rnic.StatusSuccess {
			return s.qpFailure(i, c)
		}
		if c.Opcode == rnic.WCRecv && i >= 0 && i < len(rv.scredit) {
			rv.deferred = append(rv.deferred, i)
			continue
		}
		if c.Opcode != rnic.WCWrite || i < 0 || i >= len(rv.scredit) {
			return fmt.Errorf("unexpected %v completion while waiting for credit Writes", c.Opcode)
		}
		rv.scredit[i]--
	}
	return nil
}

// drainCredits waits for the credit Writes still outstanding (clean_scq_credit).
func (rv *receiver) drainCredits(ctx context.Context) error {
	for {
		var n uint64
		for _, c := range rv.scredit {
			n += c
		}
		if n == 0 {
			return nil
		}
		if err := rv.reap(ctx, true); err != nil {
			return err
		}
	}
}

// iterSendServer receives iters Sends per QP (or until -D ends), reposting receives and
// granting credits (run_iter_bw_server). The time runs from the first receive.
func (s *session) iterSendServer(ctx context.Context, size int) (bwReport, error) {
	o := &s.o
	r := s.newBWRun()
	rv := newReceiver(s, size)
	tot := r.iters * uint64(len(s.qps))
	wctx := ctx
	first := true
	for {
		for len(rv.deferred) > 0 { // receives reap took while waiting for credit Writes
			i := rv.deferred[0]
			rv.deferred = rv.deferred[1:]
			if err := rv.got(ctx, i, r.dur.over(), o.Duration > 0); err != nil {
				return bwReport{}, err
			}
			if r.dur.sampling() {
				r.sampled++
			}
		}
		if o.Duration > 0 {
			if r.dur != nil && r.dur.over() {
				break
			}
		} else if rv.total >= tot {
			break
		}
		k, err := s.cq.Wait(wctx, s.wc)
		if err != nil {
			if r.dur.over() {
				break
			}
			return bwReport{}, fmt.Errorf("poll CQ (%d of %d receives): %w", rv.total, tot, causeOf(wctx, err))
		}
		if first {
			first = false
			if o.Duration > 0 {
				r.dur = startDuration(ctx, o.Duration, o.Margin)
				defer r.dur.stop()
				wctx = r.dur.ended
			} else {
				r.tposted[0] = now()
			}
		}
		for _, wc := range s.wc[:k] {
			i := int(wc.WRID)
			if wc.Status != rnic.StatusSuccess {
				return bwReport{}, s.qpFailure(i, wc)
			}
			if i < 0 || i >= len(s.qps) {
				return bwReport{}, fmt.Errorf("completion for unknown QP %d", i)
			}
			if wc.Opcode != rnic.WCRecv {
				rv.scredit[i]--
				continue
			}
			if err := rv.got(ctx, i, r.dur.over(), o.Duration > 0); err != nil {
				return bwReport{}, err
			}
			if r.dur.sampling() {
				r.sampled++
			}
		}
	}
	if o.Duration == 0 {
		r.tcompleted[0] = now()
	}
	if err := rv.drainCredits(ctx); err != nil {
		return bwReport{}, err
	}
	if !o.All {
		s.ranOut()
	}
	return r.report(size), nil
}

// causeOf prefers the cancellation cause of ctx to err.
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
		return c
	}
	return err
}
