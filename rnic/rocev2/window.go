package rocev2

// The requester's window of unacknowledged request packets. IBTA Vol.1 §9.7 leaves its
// size to the requester, and RoCEv2 has no flow control below the transport: a window
// larger than what the responder's receive path absorbs (a UDP socket's buffer, a NIC
// ring) loses packets, and every loss costs a go-back-N retransmission of the rest of
// the window (§9.7.5.2.1, PSN sequence error). A fixed small window, rxe's 128 PSNs,
// instead leaves a fast path idle while it waits for ACKs. So the window adapts
// (additive increase, multiplicative decrease):
//
//   - it starts at min(Config.Window, startWindow), rxe's RXE_MAX_UNACKED_PSNS;
//   - each ACK that acknowledges new packets while the requester was stopped at the
//     window grows it by one PSN, up to Config.Window;
//   - a loss halves it, not below minWindow: a PSN-sequence NAK, a missing READ response
//     or a local ACK timeout. The packets outstanding at that moment form one episode: a
//     further loss among them cuts nothing (Endpoint.WindowCuts counts the cuts), and the
//     window grows again only once they are all acknowledged.

import "github.com/softrnic/softrnic/roce"

const (
	startWindow = 128 // rxe's fixed RXE_MAX_UNACKED_PSNS
	minWindow   = 16
)

// window is the requester's adaptive window (requester.win).
type window struct {
	n         int  // PSNs that may be unacknowledged
	max       int  // Config.Window: the most n grows to
	stalled   bool // fill stopped at the window since an ACK last acknowledged packets
	recovery  bool // a loss cut the window; no cut or growth until recoverTo is acknowledged
	recoverTo roce.PSN
}

// initWindow sets the window of a new connection whose most is max.
func (w *window) initWindow(max int) { w.n, w.max = min(max, startWindow), max }

// full reports whether out unacknowledged PSNs fill the window; it notes the stall.
func (w *window) full(out uint32) bool {
	if out < uint32(w.n) {
		return false
	}
	w.stalled = true
	return true
}

// acked notes that an ACK or response acknowledged packets up to una (exclusive): the
// end of a loss episode, or growth when the requester waited for it.
func (w *window) acked(una roce.PSN) {
	if w.recovery {
		if !w.recoverTo.LessEq(una) {
			return
		}
		w.recovery = false
	}
	if w.stalled && w.n < w.max {
		w.n++
	}
	w.stalled = false
}

// lost halves the window after a loss among the packets before maxSent, once per
// episode; it reports whether it cut.
func (w *window) lost(maxSent roce.PSN) bool {
	if w.recovery {
		return false
	}
	w.n = max(w.n/2, min(w.n, minWindow))
	w.recovery, w.recoverTo, w.stalled = true, maxSent, false
	return true
}
