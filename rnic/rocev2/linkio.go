package rocev2

// The endpoint's side of its Link: the receive goroutine with its error handling,
// and the one send path every packet takes (counted and logged on failure).

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Receive back-off: after a temporary Link.Recv error the receive goroutine waits
// recvBackoffMin, doubling per consecutive error up to recvBackoffMax.
const (
	recvBackoffMin = time.Millisecond
	recvBackoffMax = time.Second
)

// recvLoop receives from link (the endpoint's, or its GSI link) and hands each
// packet to input, ending each batch with endBatch.
func (e *Endpoint) recvLoop(link Link, input func(r *rxCtx, b []byte, from, local netip.AddrPort)) {
	defer e.wg.Done()
	bs := link.BatchSize()
	bufs := make([][]byte, bs)
	for i := range bufs {
		bufs[i] = make([]byte, MaxPacket)
	}
	sizes := make([]int, bs)
	from := make([]netip.AddrPort, bs)
	r := &rxCtx{ctl: make([]ctlPkt, 2*bs+8), bufs: make([][]byte, 0, 2*bs+8), touched: make([]*Conn, 0, bs),
		sends: make([]*Conn, 0, bs), recvs: make([]doneRecv, 0, 2*bs+8)}
	local := link.LocalAddr()
	if ra, ok := link.(RecvAddrLink); ok {
		local = ra.RecvAddr()
	}
	recv := link.Recv
	if v, ok := link.(viewLink); ok {
		recv = v.recvView
	}
	var backoff time.Duration
	var delay *time.Timer
	var d *rxDrive // a Wait may run this receive (rxdrive.go; e.drv implies an eachLink)
	if link == e.link {
		d = e.drv
		r.drv = d
	}
	batch := func(n int) {
		if d != nil {
			d.h.Working() // the Wait running it no longer waits: a completion need not kick it
		}
		if backoff != 0 {
			e.log.Info("rocev2: link receive recovered", "link", local)
			backoff = 0
		}
		for i := range n {
			input(r, bufs[i][:sizes[i]], from[i], local)
		}
		e.endBatch(r)
		if link == e.link && e.batchWaiters.Load() > 0 {
			select { // a DREQ waits for the data path (drainData)
			case e.batchCh <- struct{}{}:
			default:
			}
		}
	}
	each, _ := link.(eachLink)
	if d != nil {
		d.start(r, func(stop func() bool) error { return each.recvEach(bufs, sizes, from, batch, stop) })
		defer d.h.Finish()
	}
	for {
		var err error
		if d != nil {
			if !d.h.Await() {
				return
			}
			if err = d.pump(d.h.OwnerStop()); err == errRecvStopped {
				d.h.Lend()
				continue
			}
		} else if each != nil {
			err = each.recvEach(bufs, sizes, from, batch, nil)
		} else {
			var n int
			if n, err = recv(bufs, sizes, from); err == nil {
				batch(n)
				continue
			}
		}
		if errors.Is(err, ErrLinkClosed) || errors.Is(err, net.ErrClosed) || e.closed.Load() {
			return
		}
		e.RecvErrors.Add(1)
		if !temporary(err) {
			e.failLink(err)
			return
		}
		if backoff == 0 {
			e.log.Warn("rocev2: link receive failing; retrying with back-off", "link", local, "err", err)
			backoff = recvBackoffMin
		} else {
			backoff = min(2*backoff, recvBackoffMax)
		}
		if delay == nil {
			delay = time.NewTimer(backoff)
		} else {
			delay.Reset(backoff)
		}
		select {
		case <-delay.C:
		case <-e.quit:
			delay.Stop()
			return
		}
	}
}

// endBatch ends a receive batch: each connection's coalesced ACK is queued and the
// batch's control packets are sent, then the lone READ responses the batch queued
// (readQueued; sent here when the connection's goroutine is parked, sendResponses, else
// that goroutine is woken), and only then are the receive completions held during the
// batch delivered: a consumer that sees its message and exits must not leave the sender
// without the ACK (IBTA §9.7.5.1.6: the responder acknowledges what it has executed; rxe
// sends the ACK before it completes the receive). The one exception is a batch a Wait
// runs (rnic.Config.WaitDrivesReceive), whose ACK may leave after the completions, with
// the program's next packets (rxDrive.deferAck): the end of the connection still sends it.
func (e *Endpoint) endBatch(r *rxCtx) {
	for _, c := range r.touched {
		c.mu.Lock()
		c.qp.CountRx(c.rxBytes, c.rxSegs)
		c.rxBytes, c.rxSegs = 0, 0
		if !r.drv.deferAck(c) {
			c.flushAck(r)
		}
		c.inBatch = false
		if c.rdSend {
			c.rdSend = false
			r.sends = append(r.sends, c)
		}
		c.mu.Unlock()
	}
	r.touched = r.touched[:0]
	e.flushCtl(r)
	for i, c := range r.sends {
		if !c.sendResponses() {
			c.wake()
		}
		r.sends[i] = nil
	}
	r.sends = r.sends[:0]
	r.deliver()
}

// temporary reports whether a Link error is worth retrying: the error says so
// (Temporary or Timeout, as net errors and syscall.Errno do), or it is a
// resource shortage or an ICMP-reported network condition.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) && t.Temporary() {
		return true
	}
	var to interface{ Timeout() bool }
	if errors.As(err, &to) && to.Timeout() {
		return true
	}
	for _, n := range []syscall.Errno{syscall.EINTR, syscall.EAGAIN, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.EMSGSIZE} {
		if errors.Is(err, n) {
			return true
		}
	}
	return false
}

// failLink stops the endpoint after a permanent receive error: it is logged,
// kept for Err, and every connection ends with it (their QPs go to Error).
func (e *Endpoint) failLink(err error) {
	e.linkErr.Store(&err)
	e.log.Error("rocev2: link receive failed; endpoint stopped", "link", e.link.LocalAddr(), "err", err)
	e.mu.RLock()
	cs := make([]*Conn, 0, len(e.conns))
	for _, c := range e.conns {
		cs = append(cs, c)
	}
	us := make([]*UDQP, 0, len(e.ud))
	for _, u := range e.ud {
		us = append(us, u)
	}
	e.mu.RUnlock()
	for _, c := range cs {
		c.abort(err)
	}
	for _, u := range us {
		u.Disconnect(false)
	}
}

// Err returns the link error that stopped the endpoint's receive goroutine, or nil.
func (e *Endpoint) Err() error {
	if p := e.linkErr.Load(); p != nil {
		return *p
	}
	return nil
}

// send transmits bufs to dst on the link; failures are counted in SendErrors and
// logged once per episode (the first failure after a success). A lost send is a
// lost packet: the protocol's retransmission deals with it.
func (e *Endpoint) send(bufs [][]byte, dst netip.AddrPort) { e.sendOn(e.link, bufs, dst) }

// sendOn is send on link: the endpoint's, or its GSI link for CM MADs.
func (e *Endpoint) sendOn(link Link, bufs [][]byte, dst netip.AddrPort) {
	e.sent(link, link.Send(bufs, dst), dst)
}

// sendTx sends the first n packets of a connection's batch to dst: in parts on a
// gatherLink (see txBatch), else as whole buffers (b[i] with body[i] nil).
func (e *Endpoint) sendTx(t *txBatch, n int, dst netip.AddrPort) {
	if e.gather != nil {
		e.sent(e.link, e.gather.sendParts(t.b[:n], t.body[:n], t.tail[:n], dst), dst)
		return
	}
	e.send(t.b[:n], dst)
}

// sent counts and logs the outcome of a send on link.
func (e *Endpoint) sent(link Link, err error, dst netip.AddrPort) {
	if err == nil {
		if e.sendBad.Load() && e.sendBad.Swap(false) {
			e.log.Info("rocev2: link send recovered", "link", link.LocalAddr())
		}
		return
	}
	e.SendErrors.Add(1)
	if errors.Is(err, ErrLinkClosed) || e.closed.Load() {
		return
	}
	if !e.sendBad.Swap(true) {
		e.log.Warn("rocev2: link send failing", "link", link.LocalAddr(), "dst", dst, "err", err)
	}
}

func (e *Endpoint) flushCtl(r *rxCtx) {
	i := 0
	for i < r.nctl {
		j := i
		r.bufs = r.bufs[:0]
		for j < r.nctl && r.ctl[j].dst == r.ctl[i].dst {
			r.bufs = append(r.bufs, r.ctl[j].buf[:r.ctl[j].n])
			j++
		}
		e.send(r.bufs, r.ctl[i].dst)
		i = j
	}
	r.nctl = 0
}
