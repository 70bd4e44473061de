package perftest

// The latency tests: write_lat.c, read_lat.c, send_lat.c and their loops
// (perftest_resources.c: run_iter_lat_write, run_iter_lat, run_iter_lat_send).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softrnic/softrnic/rnic"
)

// runLatency is a latency test after set_up_connection.
func (s *session) runLatency(ctx context.Context) error {
	o := &s.o
	s.printBanner()
	if o.Verb != Send {
		// write_lat and read_lat exchange dest[0] once more before the keys
		r, err := s.hs(ctx, &s.my[0])
		if err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		s.rem[0] = r
	}
	if err := s.exchangeKeys(ctx); err != nil {
		return err
	}
	if o.Verb == Send {
		if err := s.sync(ctx, "sync after the connection"); err != nil {
			return err
		}
	}
	s.printLocal()
	if err := s.exchangeRemote(ctx); err != nil {
		return err
	}
	if o.Verb != Send {
		if err := s.sync(ctx, "sync after RTR"); err != nil {
			return err
		}
	}
	if o.Verb == Read && s.server {
		// Only the client reads; the server waits in the closing handshake.
		if err := s.closeConnection(ctx); err != nil {
			return err
		}
		s.printf("%s", resultLine)
		return nil
	}
	s.latHeader()
	sizes := []int{o.Size}
	if o.All {
		sizes = allSizes()
	}
	for _, size := range sizes {
		if o.Verb == Send {
			if err := s.postRecvs(size); err != nil {
				return err
			}
			if err := s.sync(ctx, "sync before the test"); err != nil {
				return err
			}
		}
		var (
			r   *latRun
			err error
		)
		switch o.Verb {
		case Write:
			r, err = s.iterLatWrite(ctx, size)
		case Read:
			r, err = s.iterLatRead(ctx, size)
		default:
			r, err = s.iterLatSend(ctx, size)
		}
		if err != nil {
			return err
		}
		s.printLat(size, r)
	}
	s.printf("%s", resultLine)
	if o.Verb == Write {
		return nil // ib_write_lat has no closing handshake
	}
	return s.closeConnection(ctx)
}

func (s *session) latHeader() {
	h := latHeader
	if s.o.Duration > 0 {
		h = latHeaderDur
	}
	s.printf("%s%s\n", resultLine, h)
}

// latRun is one latency run's timestamps.
type latRun struct {
	tposted []cycles
	dur     *durationRun
	sampled uint64
}

func (s *session) newLatRun(ctx context.Context) *latRun {
	r := &latRun{}
	if s.o.Duration > 0 {
		r.dur = startDuration(ctx, s.o.Duration, s.o.Margin)
	} else {
		r.tposted = make([]cycles, s.o.Iters)
	}
	return r
}

// printLat prints print_report_lat (or print_report_lat_duration), with -U the samples
// unsorted and with -H sorted.
func (s *session) printLat(size int, r *latRun) {
	rtt := 2
	if s.o.Verb == Read || s.o.Verb == Atomic {
		rtt = 1
	}
	if r.dur != nil {
		avg, tps := latencyDuration(r.sampled, r.dur.tEnd.Load()-r.dur.tStart.Load(), rtt)
		s.printf("%s", latDurRow(uint64(size), r.sampled, avg, tps))
		return
	}
	q := cyclesPerUsec * float64(rtt)
	if s.o.Unsorted {
		s.printf("#, usec\n")
		for i := 1; i < len(r.tposted); i++ {
			s.printf("%d, %.6g\n", i, float64(r.tposted[i]-r.tposted[i-1])/q)
		}
	}
	if cap(s.delta) < len(r.tposted) {
		s.delta = make([]cycles, len(r.tposted))
	}
	rep, sorted := latencyReport(uint64(size), r.tposted, rtt, s.delta)
	if s.o.Histo && len(sorted) > 2 {
		s.printf("#, usec\n")
		for i, d := range sorted[:len(sorted)-2] {
			s.printf("%d, %.6g\n", i+1, float64(d)/q)
		}
	}
	if s.o.Unsorted || s.o.Histo {
		s.latHeader()
	}
	if s.o.gotLat != nil {
		s.o.gotLat(rep)
	}
	s.printf("%s", latRow(rep))
}

// iterLatWrite is run_iter_lat_write: each side RDMA-Writes size bytes to the peer's
// target, the last byte being its message count, and waits for the peer's Write by
// watching the last byte of its own target change to the count it expects (the Write
// has no completion at the target: the memory is polled, as perftest polls it). The
// server writes first.
func (s *session) iterLatWrite(ctx context.Context, size int) (*latRun, error) {
	o := &s.o
	r := s.newLatRun(ctx)
	defer r.dur.stop()
	n := len(s.qps)
	post := s.slot(0) + size - 1
	poll := &s.buf[s.slot(n)+size-1]
	wr := rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{s.mr.SGE(s.slot(0), size)},
		RemoteAddr: s.rem[0].VAddr, RKey: s.rem[0].RKey}
	iters := uint64(o.Iters)
	dur := o.Duration > 0
	wctx := ctx
	if dur {
		wctx = r.dur.ended
	}
	var scnt, ccnt, rcnt uint64
	var sp spinner
	// With --wait-drives the wait runs the receive that places the Write (QP.DriveReceive)
	// instead of spinning while the connection's goroutine does.
	drive := o.WaitDrives > 0
	arrived := func() bool { return loadByte(poll) == byte(rcnt) }
	for scnt < iters || ccnt < iters || rcnt < iters || (dur && !r.dur.over()) {
		if (rcnt < iters || dur) && !(scnt < 1 && s.server) {
			rcnt++
			for !arrived() {
				var err error
				if drive {
					if err = s.qps[0].DriveReceive(wctx, arrived); errors.Is(err, rnic.ErrNoDriver) {
						drive, err = false, nil
					}
				} else {
					err = sp.spin(wctx)
				}
				if err != nil {
					if dur && r.dur.over() {
						return r, nil
					}
					return nil, fmt.Errorf("waiting for the peer's RDMA Write %d: %w", rcnt, causeOf(wctx, err))
				}
			}
			sp.reset()
		}
		if scnt < iters || dur {
			if !dur {
				r.tposted[scnt] = now()
			}
			scnt++
			s.buf[post] = byte(scnt)
			if err := s.qps[0].PostSend(&wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if dur && r.dur.over() {
			break
		}
		if ccnt < iters || dur {
			if err := s.waitFirstWrite(wctx, ccnt == 0); err != nil {
				if dur && r.dur.over() {
					break
				}
				return nil, err
			}
			ccnt++
			if r.dur.sampling() {
				r.sampled++
			}
		}
	}
	return r, nil
}

// firstWriteWait bounds the iWARP server's wait for its first Write to leave.
const firstWriteWait = 5 * time.Second

// waitFirstWrite waits for a Write's completion. The server's first Write over iWARP can
// be held by its RNIC: an MPA responder sends nothing before the initiator's first FPDU
// (RFC 5044 §7.1.2 rule 4), and an ib_write_lat client sends nothing before the server's
// Write. softrnic's clients send an RTR first (RFC 6581 peer-to-peer mode); siw does not
// ask for one (and itself ignores the rule as a responder), so that pairing is refused
// with the reason instead of waiting forever.
func (s *session) waitFirstWrite(ctx context.Context, first bool) error {
	if !first || !s.server || !s.o.iwarp() {
		return s.waitSend(ctx)
	}
	fctx, cancel := context.WithTimeoutCause(ctx, firstWriteWait, errResponderFirst)
	defer cancel()
	err := s.waitSend(fctx)
	if err != nil && context.Cause(fctx) == errResponderFirst && ctx.Err() == nil {
		return errResponderFirst
	}
	return err
}

var errResponderFirst = errors.New("ib_write_lat over iWARP: the server writes first, but an MPA responder may send nothing before the client's first FPDU (RFC 5044 §7.1.2), and this client sent none (no RFC 6581 RTR: siw's client-server mode); run softrnic as the client")

// iterLatRead is run_iter_lat: the client RDMA-Reads size bytes from the server's target
// and waits for the completion, iters times.
func (s *session) iterLatRead(ctx context.Context, size int) (*latRun, error) {
	o := &s.o
	r := s.newLatRun(ctx)
	defer r.dur.stop()
	wr := rnic.SendWR{Opcode: rnic.OpRead, Flags: rnic.Signaled, SGL: []rnic.SGE{s.mr.SGE(s.slot(0), size)},
		RemoteAddr: s.rem[0].VAddr, RKey: s.rem[0].RKey}
	dur := o.Duration > 0
	wctx := ctx
	if dur {
		wctx = r.dur.ended
	}
	for scnt := 0; scnt < o.Iters || (dur && !r.dur.over()); {
		if !dur {
			r.tposted[scnt] = now()
		}
		scnt++
		if err := s.qps[0].PostSend(&wr); err != nil {
			return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if err := s.waitSend(wctx); err != nil {
			if dur && r.dur.over() {
				break
			}
			return nil, err
		}
		if r.dur.sampling() {
			r.sampled++
		}
	}
	return r, nil
}

// iterLatSend is run_iter_lat_send: the client sends first; each side waits for the
// peer's message, reposts the receive while more are due, then sends (signaled) and waits
// for its completion.
func (s *session) iterLatSend(ctx context.Context, size int) (*latRun, error) {
	o := &s.o
	r := s.newLatRun(ctx)
	defer r.dur.stop()
	n := len(s.qps)
	wr := rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{s.mr.SGE(s.slot(0), size)}}
	rwr := rnic.RecvWR{SGL: []rnic.SGE{s.mr.SGE(s.slot(n), size)}}
	iters := uint64(o.Iters)
	dur := o.Duration > 0
	wctx := ctx
	if dur {
		wctx = r.dur.ended
	}
	var scnt, rcnt uint64
	for scnt < iters || rcnt < iters || (dur && !r.dur.over()) {
		if (rcnt < iters || dur) && !(scnt < 1 && !s.server) {
			if err := s.waitRecv(wctx); err != nil {
				if dur && r.dur.over() {
					break
				}
				return nil, err
			}
			rcnt++
			if r.dur.sampling() {
				r.sampled++
			}
			if dur || rcnt+uint64(o.RxDepth) <= iters {
				if err := s.qps[0].PostRecv(&rwr); err != nil {
					return nil, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if scnt < iters || (dur && !r.dur.over()) {
			if !dur {
				r.tposted[scnt] = now()
			}
			scnt++
			if err := s.qps[0].PostSend(&wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if err := s.waitSend(wctx); err != nil {
				if dur && r.dur.over() {
					break
				}
				return nil, err
			}
		}
	}
	return r, nil
}

// waitSend and waitRecv wait for the next send (or receive) completion of QP 0; the other
// kind, arriving first on the shared CQ, is counted for later.
func (s *session) waitSend(ctx context.Context) error { return s.waitLat(ctx, false) }
func (s *session) waitRecv(ctx context.Context) error { return s.waitLat(ctx, true) }

func (s *session) waitLat(ctx context.Context, recv bool) error {
	for {
		if recv && s.latRecvs > 0 {
			s.latRecvs--
			return nil
		}
		if !recv && s.latSends > 0 {
			s.latSends--
			return nil
		}
		k, err := s.cq.Wait(ctx, s.wc)
		if err != nil {
			return fmt.Errorf("poll CQ: %w", causeOf(ctx, err))
		}
		for _, wc := range s.wc[:k] {
			if wc.Status != rnic.StatusSuccess {
				return s.qpFailure(0, wc)
			}
			if wc.Opcode == rnic.WCRecv {
				s.latRecvs++
			} else {
				s.latSends++
			}
		}
	}
}

// spinner paces a loop that polls memory the transport writes (as perftest spins on its
// poll byte and credits). There is no event to wait on instead: an RDMA Write is placed
// at its target without a completion there (RFC 5040 §4.3, IBTA §9.4.3), which is why
// perftest's write_lat busy-polls. Each turn yields twice: the processor to the process's
// other goroutines (runtime.Gosched) and the CPU to the host's other threads (osYield,
// sched_yield(2)). The second matters when every CPU runs a spinner, as when both ends of
// a test share a 2-CPU machine: the thread the kernel woke to place the peer's Write (the
// Go runtime's network poller) waits for a CPU, and without the yield gets one only when
// the scheduler preempts a spinner. Once a wait has lasted spinPatience, the spinner
// sleeps spinBackoff between looks, so that a peer that is gone or very slow costs little
// CPU. It ends the wait when ctx does. The back-off is a timer (reused, so a wait
// allocates nothing) that ctx interrupts, not a sleep.
type spinner struct {
	n     int
	start time.Time
	t     *time.Timer
}

func (sp *spinner) spin(ctx context.Context) error {
	if sp.n&63 == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sp.n == 0 {
			sp.start = time.Now()
		}
	}
	sp.n++
	if sp.n > 64 && time.Since(sp.start) > spinPatience {
		if sp.t == nil {
			sp.t = time.NewTimer(spinBackoff)
		} else {
			sp.t.Reset(spinBackoff)
		}
		select {
		case <-sp.t.C:
			return nil
		case <-ctx.Done():
			sp.t.Stop()
			return ctx.Err()
		}
	}
	runtime.Gosched()
	osYield()
	return nil
}

func (sp *spinner) reset() { sp.n = 0 }

// The spinner's pacing. spinPatience is how long a wait spins before pausing: twice a
// round trip on a host's loopback (softrnic's write_lat: ~25 µs typical). spinBackoff is
// the pause: long enough to give a shared CPU to the thread that places the peer's Write,
// short beside a slow round trip. (Inside the QEMU/TCG interop guest, where vCPUs are
// host threads, spinning for 1 ms before pausing gave minimum latencies up to twice as
// long: a spinning vCPU takes host CPU from the emulated network path.)
const (
	spinPatience = 50 * time.Microsecond
	spinBackoff  = 10 * time.Microsecond
)
