package ddp

// MaxWindow is the number of untagged messages an UntaggedQueue can track at
// once (posted buffers beyond it are counted but segments for them are
// rejected as out of range until earlier messages are delivered).
const MaxWindow = 64

// CheckQN validates a queue number against the n queues of the stream
// (RFC 5041 §7.1 check 1): QN must be below n.
func CheckQN(qn uint32, n uint32) error {
	if qn >= n {
		return ErrInvalidQN
	}
	return nil
}

// UntaggedQueue is the Data Sink state of one untagged buffer queue
// (RFC 5041 §5.1.2, §7.1). The buffer for MSN m is the (m - Expected())-th
// posted buffer. Use NewUntaggedQueue; the zero value expects MSN 0.
type UntaggedQueue struct {
	next   MSN    // MSN of the oldest undelivered message
	posted uint32 // buffers available, starting at next
	done   uint64 // bit i: message next+i has seen its L segment
	base   uint8  // ring index of next in high
	high   [MaxWindow]uint32
}

// NewUntaggedQueue returns a queue expecting InitialMSN with no buffers.
func NewUntaggedQueue() UntaggedQueue { return UntaggedQueue{next: InitialMSN} }

// Reset empties the queue and makes first the next expected MSN.
func (q *UntaggedQueue) Reset(first MSN) { *q = UntaggedQueue{next: first} }

// Expected returns the MSN of the oldest undelivered message.
func (q *UntaggedQueue) Expected() MSN { return q.next }

// Posted returns the number of buffers available from Expected on.
func (q *UntaggedQueue) Posted() uint32 { return q.posted }

// Post makes n more buffers available (saturating at 2^32-1).
func (q *UntaggedQueue) Post(n uint32) {
	if q.posted+n < q.posted {
		q.posted = ^uint32(0)
		return
	}
	q.posted += n
}

// Unpost removes up to n buffers that have not received any segment from the
// end of the queue (e.g. flushed receives); it returns how many it removed.
func (q *UntaggedQueue) Unpost(n uint32) uint32 {
	var k uint32
	for k < n && q.posted > 0 {
		i := q.posted - 1
		if i < MaxWindow && (q.high[(uint32(q.base)+i)%MaxWindow] != 0 || q.done&(1<<i) != 0) {
			break
		}
		q.posted--
		k++
	}
	return k
}

// Slot returns the index, relative to Expected, of the buffer that MSN msn
// targets (RFC 5041 §7.1 checks 2 and 5): ErrMSNRange for a message already
// delivered or too far ahead, ErrMSNNoBuffer when no buffer is posted for it.
func (q *UntaggedQueue) Slot(msn MSN) (int, error) {
	d := uint32(msn - q.next)
	if d >= 1<<31 || d >= MaxWindow {
		return 0, ErrMSNRange
	}
	if d >= q.posted {
		return 0, ErrMSNNoBuffer
	}
	return int(d), nil
}

// Accept validates one untagged segment of n payload octets at offset mo of
// message msn, targeting a buffer of bufLen octets, and records it (RFC 5041
// §7.1). It returns the buffer index relative to Expected. Checks, in order:
// the MSN has a buffer (ErrMSNRange, ErrMSNNoBuffer); no segment follows the
// message's L segment and the L segment carries the highest MO (ErrInvalidMO);
// for non-zero n, MO lies within the buffer (ErrInvalidMO) and MO+n does too
// (ErrMessageTooLong). On error nothing is recorded.
func (q *UntaggedQueue) Accept(msn MSN, mo uint32, n int, last bool, bufLen uint64) (int, error) {
	slot, err := q.Slot(msn)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, ErrMessageTooLong
	}
	bit := uint64(1) << uint(slot)
	if q.done&bit != 0 {
		return 0, ErrInvalidMO // segment after the last one
	}
	end := uint64(mo) + uint64(n)
	if n > 0 {
		if uint64(mo) >= bufLen {
			return 0, ErrInvalidMO
		}
		if end > bufLen {
			return 0, ErrMessageTooLong
		}
	}
	if end > MaxMessageLen {
		return 0, ErrMessageTooLong
	}
	h := &q.high[(uint32(q.base)+uint32(slot))%MaxWindow]
	if last && end < uint64(*h) {
		return 0, ErrInvalidMO // L segment must carry the highest MO
	}
	if uint32(end) > *h {
		*h = uint32(end)
	}
	if last {
		q.done |= bit
	}
	return slot, nil
}

// Length returns the message length known so far for the message in slot
// (the highest MO+len seen); after its L segment it is the message length.
func (q *UntaggedQueue) Length(slot int) uint32 {
	if slot < 0 || slot >= MaxWindow {
		return 0
	}
	return q.high[(uint32(q.base)+uint32(slot))%MaxWindow]
}

// Complete reports whether the message in slot has received its L segment.
func (q *UntaggedQueue) Complete(slot int) bool {
	return slot >= 0 && slot < MaxWindow && q.done&(1<<uint(slot)) != 0
}

// Deliver pops the oldest message if its L segment has arrived, consuming its
// buffer; messages are delivered strictly in MSN order (RFC 5041 §5.3). It
// returns the message's MSN and length.
func (q *UntaggedQueue) Deliver() (msn MSN, length uint32, ok bool) {
	if q.done&1 == 0 {
		return 0, 0, false
	}
	msn = q.next
	h := &q.high[q.base]
	length = *h
	*h = 0
	q.base = (q.base + 1) % MaxWindow
	q.done >>= 1
	q.next++
	q.posted--
	return msn, length, true
}

// CheckTaggedBounds validates placing n octets at Tagged Offset to into a
// tagged buffer that covers [base, base+length) (RFC 5041 §7.1 tagged checks
// 3-5): ErrTOWrap if to+n wraps 2^64, ErrBaseBounds if the range leaves the
// buffer. A zero-length segment is not checked (RFC 5041 §5.2).
func CheckTaggedBounds(to uint64, n int, base, length uint64) error {
	if n <= 0 {
		if n < 0 {
			return ErrBaseBounds
		}
		return nil
	}
	end := to + uint64(n)
	if end < to {
		return ErrTOWrap
	}
	if to < base || end-base > length {
		return ErrBaseBounds
	}
	return nil
}

// TaggedStream checks that the segments of the tagged message in progress
// arrive in order on the in-order LLP: every segment after the first carries
// the same STag and the TO where the previous segment ended, until the L
// segment. RFC 5041 §4.2 requires this of the Data Source; siw enforces it.
// The zero value is ready for use.
type TaggedStream struct {
	active bool // a segment without L has been accepted
	known  bool // stag and nextTO hold the message's values
	stag   uint32
	nextTO uint64
}

// Active reports whether a tagged message is in progress (a segment without
// L has been accepted).
func (s *TaggedStream) Active() bool { return s.active }

// Accept validates and records a tagged segment with the given STag, TO,
// payload length and L bit. A segment whose STag differs from the message in
// progress is ErrInvalidSTag; one whose TO is not contiguous is
// ErrBaseBounds; to+n wrapping 2^64 is ErrTOWrap. Zero-length segments are
// not checked against STag and TO (RFC 5041 §5.2). On error nothing is
// recorded.
func (s *TaggedStream) Accept(stag uint32, to uint64, n int, last bool) error {
	if n < 0 {
		return ErrBaseBounds
	}
	if n > 0 {
		end := to + uint64(n)
		if end < to {
			return ErrTOWrap
		}
		if s.known {
			if stag != s.stag {
				return ErrInvalidSTag
			}
			if to != s.nextTO {
				return ErrBaseBounds
			}
		}
		s.known, s.stag, s.nextTO = true, stag, end
	}
	if last {
		*s = TaggedStream{}
	} else {
		s.active = true
	}
	return nil
}

// Reset abandons the message in progress.
func (s *TaggedStream) Reset() { *s = TaggedStream{} }
