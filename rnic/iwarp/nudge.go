package iwarp

// The initiator's nudges: how an initiator makes sure its first FPDUs are read by a Linux
// siw responder, at no cost to any other responder.
//
// siw_accept (drivers/infiniband/sw/siw/siw_cm.c) writes the MPA Reply and only then
// installs the QP's receive handler as the socket's sk_data_ready (siw_rtr_data_ready in
// peer-to-peer mode, siw_qp_llp_data_ready otherwise). Bytes that arrive in between are
// signalled to the CM's handler, which ignores them in RDMA mode, so they stay queued
// until new bytes arrive: then the installed handler reads everything queued
// (tcp_read_sock). An initiator whose first FPDUs land in that window, and which then
// waits for the responder, waits forever (tests/interop/README.md finding 1).
//
// The fix is to send new bytes while the peer may be stuck: a zero-length RDMA Write to
// STag 1 (siw's own Write RTR form), which every compliant peer accepts as a no-op — the
// STag and TO of a zero-length tagged message MUST NOT be checked (RFC 5041 §5) and siw's
// siw_proc_write returns at once for zero length. The nudger sends one when
//
//   - the peer has sent nothing yet, a first nudge nudgeFirst after our first FPDU, then
//     at doubling intervals, for at most Config.Timeout (then it gives up); and
//   - in the client-server model, once nudgeFirst after the peer's first FPDU if we had
//     sent something before it and nothing since (the peer's bytes prove its handler is
//     installed, not that our earlier bytes were read; the next bytes we send make it
//     read them, and those are usually our answer to the peer).
//
// It stops for good at the first FPDU from the peer in peer-to-peer mode (a responder
// sends nothing before it has processed the RTR, and siw processes the RTR in the same
// call that reads everything queued) and after that one FPDU in the client-server model.
// A compliant responder answers the default Read RTR with a zero-length Read Response at
// once (RFC 5040 §5.2.1), so no nudge is ever sent to it; a siw responder caught in its
// window gets a few, 1 ms apart at first. Nudges are counted (Conn.Nudges).
//
// In the client-server model an initiator that has sent nothing after a quarter of its
// Config.FirstFPDUTimeout sends one nudge as its first FPDU, so a responder with a first-
// FPDU timeout (softrnic's) keeps an idle but live connection.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/rdmap"
)

// nudgeFirst is the delay of the first nudge after the initiator's first FPDU.
const nudgeFirst = 2 * time.Millisecond

// nudgeSTag is the STag of a nudge: STag index 0, which never names a region (siw's RTR
// uses it too).
const nudgeSTag = 1

type nudger struct {
	done  atomic.Bool // no more nudges: the data path checks only this
	want  atomic.Bool // a nudge is due: the sender writes one between work requests
	count atomic.Uint64

	mu       sync.Mutex
	timer    *time.Timer
	interval time.Duration
	horizon  time.Time // give up then
	sentAny  bool      // an FPDU of ours has been written
	peer     bool      // an FPDU of the peer's has arrived
}

// nudgeStart sets up the nudger of a new connection: responders never nudge; an
// initiator in the client-server model starts its idle timer.
func (c *Conn) nudgeStart() {
	ng := &c.ng
	if !c.initiator {
		ng.done.Store(true)
		return
	}
	if !c.params.P2P && c.cfg.FirstFPDUTimeout > 0 {
		ng.mu.Lock()
		ng.timer = time.AfterFunc(c.cfg.FirstFPDUTimeout/4, c.nudgeTick)
		ng.mu.Unlock()
	}
}

// nudgeStop ends nudging (the connection is closing).
func (c *Conn) nudgeStop() {
	ng := &c.ng
	ng.mu.Lock()
	ng.settle()
	ng.mu.Unlock()
}

// settle stops nudging for good. The caller holds mu.
func (ng *nudger) settle() {
	ng.done.Store(true)
	ng.want.Store(false)
	if ng.timer != nil {
		ng.timer.Stop()
	}
}

// noteTx is called by the sender after FPDUs went out.
func (c *Conn) noteTx() {
	ng := &c.ng
	if ng.done.Load() {
		return
	}
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if ng.done.Load() {
		return
	}
	if ng.peer {
		// Client-server: these bytes left after the peer's first FPDU, so they reach a
		// receive handler that reads whatever was queued before them.
		ng.settle()
		return
	}
	if !ng.sentAny {
		ng.sentAny = true
		ng.horizon = time.Now().Add(c.cfg.Timeout)
		ng.interval = nudgeFirst
		if ng.timer != nil {
			ng.timer.Stop()
		}
		ng.timer = time.AfterFunc(ng.interval, c.nudgeTick)
	}
}

// notePeer is called by the receiver at the peer's first FPDU.
func (c *Conn) notePeer() {
	ng := &c.ng
	if ng.done.Load() {
		return
	}
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if ng.done.Load() {
		return
	}
	ng.peer = true
	if c.params.P2P || !ng.sentAny {
		ng.settle()
		return
	}
	// One FPDU of ours must follow the peer's; usually the answer to it (a Read
	// Response, say) is, and noteTx settles. If nothing goes out within nudgeFirst, a
	// nudge does.
	ng.timer.Reset(nudgeFirst)
}

// nudgeTick runs on the nudge timer.
func (c *Conn) nudgeTick() {
	ng := &c.ng
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if ng.done.Load() {
		return
	}
	if ng.sentAny && !ng.peer {
		if time.Now().After(ng.horizon) {
			ng.settle() // the peer stayed silent for the whole MPA timeout: give up
			return
		}
		ng.interval *= 2
		ng.timer.Reset(ng.interval)
	}
	ng.want.Store(true)
	c.wake()
}

// sendNudge queues a nudge if one is due. The caller (the sender) holds txMu and is
// between work requests.
func (c *Conn) sendNudge() error {
	if !c.ng.want.Load() || !c.ng.want.CompareAndSwap(true, false) {
		return nil
	}
	h := c.hdr[:ddp.TaggedLen]
	putTagged(h, true, rdmap.OpWrite, nudgeSTag, 0)
	if err := c.fpdu(h, nil); err != nil {
		return err
	}
	c.ng.count.Add(1)
	c.qp.CountTx(0, 1)
	return nil
}

// Nudges returns how many nudges this connection sent (see the package documentation).
func (c *Conn) Nudges() uint64 { return c.ng.count.Load() }
