package ddp

import "errors"

// ErrMULPDU reports a MULPDU that leaves no room for payload after the header.
var ErrMULPDU = errors.New("ddp: MULPDU too small for header")

// ErrMessageSize reports a ULP message of 2^32 octets or more (RFC 5041 §5.2),
// or a negative length.
var ErrMessageSize = errors.New("ddp: message length out of range")

// MaxMessageLen is the largest ULP message DDP can carry (RFC 5041 §5.2).
const MaxMessageLen = 1<<32 - 1

// Segmenter cuts one DDP message into segments no larger than the MULPDU
// (RFC 5041 §5.2). The zero value yields nothing; use NewSegmenter.
type Segmenter struct {
	total uint64 // message length
	chunk uint64 // payload per segment
	off   uint64 // next offset
	done  bool
}

// PayloadPerSegment returns the ULP payload that fits one segment: mulpdu
// minus the header length hdrLen (which includes any RDMAP header carried in
// every segment), or 0 if none fits.
func PayloadPerSegment(hdrLen, mulpdu int) int {
	if mulpdu <= hdrLen || hdrLen < 0 {
		return 0
	}
	return mulpdu - hdrLen
}

// NewSegmenter returns a Segmenter for a message of msgLen octets sent with a
// hdrLen-byte header per segment (TaggedLen or UntaggedLen) over an LLP whose
// MULPDU is mulpdu.
func NewSegmenter(msgLen, hdrLen, mulpdu int) (Segmenter, error) {
	if msgLen < 0 || uint64(msgLen) > MaxMessageLen {
		return Segmenter{done: true}, ErrMessageSize
	}
	chunk := PayloadPerSegment(hdrLen, mulpdu)
	if chunk == 0 {
		return Segmenter{done: true}, ErrMULPDU
	}
	return Segmenter{total: uint64(msgLen), chunk: uint64(chunk)}, nil
}

// Next returns the next segment: its offset into the message (MO, or the
// distance from the initial TO), its payload length, and whether it is the
// last segment (L bit). ok is false once every segment has been returned. A
// zero-length message yields one zero-length last segment.
func (s *Segmenter) Next() (off, n int, last, ok bool) {
	if s.done || s.chunk == 0 {
		return 0, 0, false, false
	}
	rem := s.total - s.off
	c := min(rem, s.chunk)
	off = int(s.off)
	s.off += c
	last = s.off == s.total
	s.done = last
	return off, int(c), last, true
}

// Count returns the total number of segments of the message.
func (s *Segmenter) Count() int {
	if s.chunk == 0 {
		return 0
	}
	if s.total == 0 {
		return 1
	}
	return int((s.total + s.chunk - 1) / s.chunk)
}

// Remaining returns the number of message octets not yet returned by Next.
func (s *Segmenter) Remaining() int { return int(s.total - s.off) }
