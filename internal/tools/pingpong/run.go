package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// run is one ping-pong: the examples' pingpong_context.
type run struct {
	o     *Options
	out   io.Writer
	laddr netip.Addr
	dev   *rnic.Device
	t     *cm.Transport
	ep    *rocev2.Endpoint

	pd   *rnic.PD
	sbuf []byte // what SENDs carry
	rbuf []byte // where receives land (after a GRH for UD)
	mr   *rnic.MR
	cq   *rnic.CQ
	srq  *rnic.SRQ
	qps  []*rnic.QP
	ud   *rocev2.UDQP
	ah   rocev2.AH
	my   []Dest
	recv rnic.RecvWR
	send rnic.SendWR
}

// errIdle ends a run that saw no completion for Options.Idle.
var errIdle = errors.New("no completion from the peer")

func newRun(o *Options, out io.Writer) (*run, error) {
	r := &run{o: o, out: out}
	if err := r.open(); err != nil {
		return r, err
	}
	if o.Mode == UD {
		if mtu := r.ep.Config().MTU.Bytes(); o.Size > mtu {
			return r, fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
	}
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return r, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	// The examples send from and receive into one buffer (filled with 0x7b; zeroed for
	// srq). Here SENDs and receives have halves of their own (the engine reads one while
	// it writes the other; the bytes on the wire are the same).
	n := o.Size
	if o.Mode == UD {
		n += rocev2.GRHLen
	}
	buf := make([]byte, o.Size+n)
	if o.Mode != SRQ {
		for i := range buf {
			buf[i] = 0x7b
		}
	}
	r.sbuf, r.rbuf = buf[:o.Size], buf[o.Size:]
	if r.mr, err = r.pd.RegMR(buf, rnic.AccessLocalWrite); err != nil {
		return r, fmt.Errorf("Couldn't register MR: %w", err)
	}
	nqp := 1
	cqDepth := o.RxDepth + 1
	if o.Mode == SRQ {
		nqp = o.NumQP
		cqDepth = o.RxDepth + o.NumQP
		if r.srq, err = r.dev.CreateSRQ(r.pd, rnic.SRQAttr{MaxWR: o.RxDepth, MaxSGE: 1}); err != nil {
			return r, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
	}
	if r.cq, err = r.dev.CreateCQ(cqDepth); err != nil {
		return r, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	for range nqp {
		qp, err := r.dev.CreateQP(r.pd, rnic.QPAttr{SendCQ: r.cq, RecvCQ: r.cq, SRQ: r.srq,
			Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return r, fmt.Errorf("Couldn't create QP: %w", err)
		}
		r.qps = append(r.qps, qp)
	}
	flags := rnic.Signaled
	if o.Size <= r.qps[0].Attr().Cap.MaxInline {
		flags |= rnic.Inline
	}
	r.send = rnic.SendWR{WRID: sendWRID, Opcode: rnic.OpSend, Flags: flags, SGL: []rnic.SGE{r.mr.SGE(0, o.Size)}}
	r.recv = rnic.RecvWR{WRID: recvWRID, SGL: []rnic.SGE{r.mr.SGE(o.Size, len(r.rbuf))}}
	if o.Mode == UD {
		// INIT with the Q_Key; a UD QP needs nothing from the peer to reach RTS.
		if r.ud, err = r.ep.CreateUD(r.qps[0], udQKey); err != nil {
			return r, fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
	}
	return r, nil
}

func (r *run) close() {
	for _, qp := range r.qps {
		_ = qp.Destroy()
	}
	if r.srq != nil {
		_ = r.srq.Destroy()
	}
	if r.t != nil {
		_ = r.t.Close()
	}
	if r.dev != nil {
		_ = r.dev.Close()
	}
}

// postRecv posts up to n receives (on the SRQ for --srq) and returns how many it posted.
func (r *run) postRecv(n int) int {
	for i := range n {
		var err error
		if r.srq != nil {
			err = r.srq.PostRecv(&r.recv)
		} else {
			err = r.qps[0].PostRecv(&r.recv)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend sends one message on QP i.
func (r *run) postSend(i int) error {
	var err error
	if r.ud != nil {
		err = r.ud.PostSend(r.ah, &r.send)
	} else {
		err = r.qps[i].PostSend(&r.send)
	}
	if err != nil {
		return fmt.Errorf("Couldn't post send: %w", err)
	}
	return nil
}

// printDest prints an address line as the examples do (ud_pingpong's local line has a
// colon before the GID).
func (r *run) printDest(side string, d Dest) {
	sep := ","
	if side == "local" && r.o.Mode == UD {
		sep = ":"
	}
	pad := " "
	if side == "local" {
		pad = "  "
	}
	fmt.Fprintf(r.out, "  %s address:%sLID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", side, pad, d.LID, d.QPN, d.PSN, sep, GIDString(d.GID))
}

func (r *run) run(ctx context.Context) error {
	o := r.o
	routs := r.postRecv(o.RxDepth)
	if routs < o.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", routs)
	}
	r.my = make([]Dest, len(r.qps))
	for i, qp := range r.qps {
		r.my[i] = Dest{QPN: qp.Num(), PSN: rand.Uint32() & 0xFFFFFF}
		if o.GIDIdx >= 0 {
			r.my[i].GID = roce.GIDFromAddr(r.laddr)
		}
		r.printDest("local", r.my[i])
	}
	entries := 1
	if o.Mode == SRQ {
		entries = maxQP
	}
	rem, err := r.exchange(ctx, entries)
	if err != nil {
		return err
	}
	for i := range r.qps {
		r.printDest("remote", rem[i])
	}

	nq := len(r.qps)
	pending := make([]int, nq)
	if o.Peer != "" {
		if o.Validate {
			r.markPages()
		}
		for i := range nq {
			if err := r.postSend(i); err != nil {
				return err
			}
			pending[i] = recvWRID | sendWRID
		}
	} else {
		for i := range pending {
			pending[i] = recvWRID
		}
	}
	refill := 1
	if o.Mode == SRQ {
		refill = nq
	}
	wctx, wd, stop := tool.NewWatchdog(ctx, o.Idle, fmt.Errorf("%w for %v (is the peer running %s with the same options?)", errIdle, o.Idle, o.Mode))
	defer stop()
	start := time.Now()
	rcnt, scnt := 0, 0
	wc := make([]rnic.Completion, nq+o.RxDepth)
	for rcnt < o.Iters || scnt < o.Iters {
		n, err := r.cq.Wait(wctx, wc)
		if err != nil {
			if c := context.Cause(wctx); c != nil {
				err = c
			}
			return fmt.Errorf("poll CQ failed (%d sends, %d receives of %d done): %w", scnt, rcnt, o.Iters, err)
		}
		wd.Kick()
		for _, c := range wc[:n] {
			if c.Status != rnic.StatusSuccess {
				code, s := tool.IBVStatus(c.Status)
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", s, code, int(c.WRID))
			}
			qi := r.qpIndex(c.QPNum)
			if qi < 0 {
				return fmt.Errorf("Couldn't find QPN %06x", c.QPNum)
			}
			switch c.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				if routs--; routs <= refill {
					routs += r.postRecv(o.RxDepth - routs)
					if routs < o.RxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", int(c.WRID))
			}
			pending[qi] &^= int(c.WRID)
			if scnt < o.Iters && pending[qi] == 0 {
				if err := r.postSend(qi); err != nil {
					return err
				}
				pending[qi] = recvWRID | sendWRID
			}
		}
	}
	// gettimeofday's microseconds in a C float, as the examples compute them.
	usec := float32(time.Since(start).Microseconds())
	// The QPs go when this returns: let the ACK of the peer's last message leave first.
	_ = tool.FlushRoCE(ctx, r.dev, r.ep)
	bytes := int64(o.Size) * int64(o.Iters) * 2
	fmt.Fprintf(r.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(r.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.Iters, float64(usec)/1e6, float64(usec)/float64(o.Iters))
	return nil
}

// qpIndex finds the QP of a completion (srq_pingpong's find_qp); 0 for one QP.
func (r *run) qpIndex(qpn uint32) int {
	if len(r.qps) == 1 {
		return 0
	}
	for i, qp := range r.qps {
		if qp.Num() == qpn {
			return i
		}
	}
	return -1
}

// pageSize is the examples' sysconf(_SC_PAGESIZE), the stride of -c's marks.
var pageSize = os.Getpagesize()

// markPages is the client's -c: the first byte of every page of the message gets
// i / page_size % sizeof(char), which is 0.
func (r *run) markPages() {
	for i := 0; i < r.o.Size; i += pageSize {
		r.sbuf[i] = 0
	}
}

// checkPages is the server's -c: every page's first byte of the last message received
// (after the GRH for UD) must be the client's mark. Run calls it once the QPs are gone:
// with several QPs (--srq -q) the peer's last messages may still land in the receive
// buffer after the counts are reached.
func (r *run) checkPages() {
	m := r.rbuf[len(r.rbuf)-r.o.Size:]
	for i := 0; i < r.o.Size; i += pageSize {
		if m[i] != 0 {
			fmt.Fprintf(r.out, "invalid data in page %d\n", i/pageSize)
		}
	}
}
