package rocev2

// Payload CRCs computed before the send, off the connection's goroutine.
//
// Every request packet carries an ICRC (IBTA Vol.1 §7.8.1; RoCEv2: Annex A17.3.3, A17.4)
// over pseudo headers, its transport headers, its payload and its pad. For a full-MTU
// packet the payload is almost all of it (4096 of ~4130 bytes), and the connection's
// goroutine, which also makes the sendmmsg calls, was spending ~240 ns per 4 KiB packet
// on it. CRC-32 is linear: the ICRC is the CRC of the headers, multiplied by the constant
// x^(8·MTU) mod P, XOR the payload's own CRC (roce.ICRCJoin). So the payload's CRC can
// be run anywhere once the WQE's memory is known, and the goroutine pays for a few dozen
// header bytes and a table multiplication instead.
//
// Who runs them: a goroutine that posts send work (SendQueued, called from rnic's
// QP.PostSend) first wakes the connection and then runs the payload CRCs of the WQEs the
// connection has taken but not sent (Conn.help). The connection takes RC WQEs ahead of
// its send cursor, up to a window of packets (Conn.takeAhead), and gives a job to those
// with packets beyond its next batch (Conn.take): a WQE that leaves whole in the next
// batch would be reached by the connection before any helper. An application that posts
// while it waits for completions — the usual RDMA pattern, and the benchmark's — lends
// its goroutine to the work (one that posts from a CQ handler lends the endpoint's
// receive goroutine); a packet nobody helped with costs the connection what it did
// before, plus the multiplication. RDMA semantics make this safe: a WRITE's or SEND's
// source buffer belongs to the transport from the post until the WQE's completion (the
// consumer must not change it meanwhile), so a CRC taken after the post equals one taken
// at the send; a packet's CRC, once computed, is reused by its retransmissions.
//
// Per-packet state (pcrc.st) is claimed with a compare-and-swap by whichever of the
// helper and the connection gets there first, so neither waits for the other, and the
// helper stops reading the WQE's memory before the WQE completes (pcrc.close), so the
// application may reuse it as soon as it sees the completion.

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// Bounds of the payload CRC state, which the local application's posts drive (a peer
// cannot make it grow): the packets of one WQE that get a precomputed CRC (later ones
// are computed by the connection as before; 8 bytes each), the jobs waiting for a helper
// per connection (the oldest is dropped for a new one), and the idle jobs an endpoint
// keeps. Jobs live from the take of their WQE to its completion: the WQEs taken and not
// started are bounded by the window (Conn.takeAhead), the started ones by the window and
// the send queue.
const (
	pcrcMaxPackets = 1024
	crcQueueLen    = 64
	pcrcFreeMax    = 64
)

// Packet states in pcrc.st: pending (0), being computed, or computed (the CRC in the
// low 32 bits).
const (
	pcrcBusy  = 1 << 32
	pcrcReady = 2 << 32
)

// pcrcClosed is added to pcrc.gate when the WQE completes: helpers that enter later see
// a negative gate and leave.
const pcrcClosed = -1 << 30

// pcrc holds the payload CRCs (roce.ICRCPart) of the full-MTU packets of one RC WRITE or
// SEND WQE, packet k covering bytes [k·mtu, (k+1)·mtu) of its message.
type pcrc struct {
	segs rnic.Segs       // the WQE's memory (a copy of its Segs), cleared on close
	mtu  int             // packet payload size
	st   []atomic.Uint64 // per packet: 0, pcrcBusy, or pcrcReady|CRC
	gate atomic.Int32    // helpers reading segs; pcrcClosed once closed
	refs atomic.Int32    // the connection's entry and the queue or helper holding it
}

// part returns the payload CRC of packet k, whose payload is p (its n = mtu bytes in the
// WQE's memory, or their copy): the helper's if it computed it, else computed here and
// kept for a retransmission. ok is false when k is past the packets held.
func (j *pcrc) part(k int, p []byte) (crc uint32, ok bool) {
	if k >= len(j.st) {
		return 0, false
	}
	s := &j.st[k]
	v := s.Load()
	if v&pcrcReady != 0 {
		return uint32(v), true
	}
	crc = roce.ICRCPart(p)
	if v == 0 && s.CompareAndSwap(0, pcrcReady|uint64(crc)) {
		return crc, true
	}
	return crc, true // a helper is computing it now: the same value
}

// partOf returns the CRC of part of a message: bytes [off, off+n) of segs.
func partOf(segs rnic.Segs, off uint64, n int) uint32 {
	var buf [8][]byte // a packet spans a few SGEs; more spill to the heap
	var crc uint32
	for _, p := range segs.Slices(buf[:0], off, uint64(n)) {
		crc = roce.ICRCAdd(crc, p)
	}
	return crc
}

// compute is the helper's run over the packets nobody has claimed, in order; it stops
// when the WQE completed (close).
func (j *pcrc) compute() {
	for k := range j.st {
		s := &j.st[k]
		if s.Load() != 0 {
			continue
		}
		if j.gate.Add(1) < 0 {
			j.gate.Add(-1)
			return
		}
		if s.CompareAndSwap(0, pcrcBusy) {
			s.Store(pcrcReady | uint64(partOf(j.segs, uint64(k)*uint64(j.mtu), j.mtu)))
		}
		j.gate.Add(-1)
	}
}

// close ends the helpers' reading of the WQE's memory: it returns once no helper is
// inside a packet, and none enters after. Called before the WQE completes.
func (j *pcrc) close() {
	if j.gate.Add(pcrcClosed) != pcrcClosed {
		for i := 0; j.gate.Load() != pcrcClosed; i++ {
			if i > 16 {
				runtime.Gosched() // a helper is inside one packet's CRC (≤ an MTU of bytes)
			}
		}
	}
	clear(j.segs)
	j.segs = j.segs[:0]
}

// getPCRC returns a job for the n first full packets of w (n ≥ 1, ≤ pcrcMaxPackets),
// with one reference for the connection's entry and one for the queue.
func (e *Endpoint) getPCRC(w *rnic.SendWQE, mtu, n int) *pcrc {
	var j *pcrc
	e.crcMu.Lock()
	if k := len(e.crcFree); k > 0 {
		j = e.crcFree[k-1]
		e.crcFree[k-1] = nil
		e.crcFree = e.crcFree[:k-1]
	}
	e.crcMu.Unlock()
	if j == nil {
		j = new(pcrc)
	}
	if cap(j.st) < n {
		j.st = make([]atomic.Uint64, n)
	}
	j.st = j.st[:n]
	j.segs = append(j.segs[:0], w.Segs...)
	j.mtu = mtu
	j.gate.Store(0)
	j.refs.Store(2)
	return j
}

// release drops a reference; the last one gives j back to the endpoint. The
// connection's reference is dropped after close.
func (e *Endpoint) releasePCRC(j *pcrc) {
	if j.refs.Add(-1) != 0 {
		return
	}
	clear(j.segs)
	j.segs = j.segs[:0]
	clear(j.st) // no other holder: the last reference was dropped atomically
	e.crcMu.Lock()
	if len(e.crcFree) < pcrcFreeMax {
		e.crcFree = append(e.crcFree, j)
	}
	e.crcMu.Unlock()
}

// crcQueue holds a connection's jobs waiting for a helper, oldest first.
type crcQueue struct {
	mu      sync.Mutex
	ring    [crcQueueLen]*pcrc
	head, n int
}

// push queues j. When the queue is full it drops the oldest job and returns it for
// release: the connection is nearest to that WQE, or past it, and a queue no poster
// drains holds no more than crcQueueLen jobs.
func (q *crcQueue) push(j *pcrc) (dropped *pcrc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == len(q.ring) {
		dropped = q.ring[q.head]
		q.ring[q.head] = nil
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	q.ring[(q.head+q.n)%len(q.ring)] = j
	q.n++
	return dropped
}

func (q *crcQueue) pop() *pcrc {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil
	}
	j := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return j
}

// help runs the payload CRCs of the jobs queued when it is called (a poster's goroutine,
// SendQueued): at most the WQEs the connection has taken and not sent, about a window of
// packets.
func (c *Conn) help() {
	q := c.crcq.Load()
	if q == nil {
		return
	}
	for range crcQueueLen {
		j := q.pop()
		if j == nil {
			return
		}
		j.compute()
		c.e.releasePCRC(j)
	}
}

// crcJob gives a WQE just taken (fill, takeAhead) a payload CRC job when it is an RC
// WRITE or SEND with at least one full packet, and queues it for a helper.
func (c *Conn) crcJob(e *sqe) {
	w := e.w
	if c.typ != RC || w.Len < uint64(c.mtu) {
		return
	}
	switch w.Opcode {
	case rnic.OpWrite, rnic.OpWriteImm, rnic.OpSend, rnic.OpSendImm, rnic.OpSendInv:
	default:
		return
	}
	q := c.crcq.Load()
	if q == nil {
		q = new(crcQueue)
		c.crcq.Store(q)
	}
	j := c.e.getPCRC(w, c.mtu, int(min(w.Len/uint64(c.mtu), pcrcMaxPackets)))
	if d := q.push(j); d != nil {
		c.e.releasePCRC(d)
	}
	e.crc = j
	if c.e.crcHelpNow {
		c.help() // tests: every packet's CRC comes from the helper
	}
}

// dropCRC closes and releases e's job (before its WQE completes, or when the
// connection ends).
func (c *Conn) dropCRC(e *sqe) {
	if e.crc != nil {
		e.crc.close()
		c.e.releasePCRC(e.crc)
		e.crc = nil
	}
}

// dropCRCs ends every job of the connection: its entries' and the queue's.
func (c *Conn) dropCRCs() {
	for i := c.sqHead; i != c.sqTail; i++ {
		c.dropCRC(c.ent(i))
	}
	if q := c.crcq.Load(); q != nil {
		for j := q.pop(); j != nil; j = q.pop() {
			c.e.releasePCRC(j)
		}
	}
}
