package mpa

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/softrnic/softrnic/internal/fastcrc"
)

// Ahead is an FPDU a caller expects to follow the current one in the stream: its ULPDU is
// Header, exactly, followed by len(Payload) octets, which ReadAhead reads straight into
// Payload. A DDP receiver knows this much when a tagged message continues (a Read
// Response the requester is waiting for: the sink STag, the next TO, the segment size).
type Ahead struct {
	Header  []byte
	Payload []byte
}

// Bounds of one ReadAhead: how many FPDUs, how many payload octets and how many header
// octets it reads ahead of the current FPDU.
const (
	MaxAhead       = 15
	MaxAheadBytes  = 256 << 10
	maxAheadHeader = 32
)

// aheadScratch holds what a ReadAhead reads between payloads: each FPDU's pad and CRC and
// the next one's length and header. Pooled: a Reader holds one only during the call.
type aheadScratch struct {
	b   [(MaxAhead + 1) * (3 + CRCLen + LengthLen + maxAheadHeader)]byte
	vec [2*MaxAhead + 3][]byte
}

var aheadScratches = sync.Pool{New: func() any { return new(aheadScratch) }}

// ReadAhead reads the rest of the current ULPDU into p, which must be exactly Remaining()
// octets, ends the FPDU as End does, and with the same system call tries to take the
// FPDUs described by ahead (at most MaxAhead of them, MaxAheadBytes of payload, headers of
// at most 32 octets; the rest of ahead is ignored) straight into their payloads. It
// returns how many of them it took whole: each was consumed as Next, ReadFull of its
// header and payload and End would have (the CRC checked). If started is set, the FPDU
// ahead[done] has begun as well: its length and header matched and were consumed, and the
// first len(Payload)-Remaining() octets of its payload are in place; the caller continues
// it with ReadFull of the rest and End. Otherwise the Reader is between FPDUs.
//
// An FPDU that does not match its Ahead (another length, another header) is not an error:
// the octets read for it, which may have been written into the Payloads of ahead[done:],
// are kept in a buffer and the stream goes on from there with Next. So Payloads must be
// memory the caller does not mind being written to when the stream turns out otherwise
// (the sink of the very Read whose Response this is). Errors are those of ReadFull and End.
//
// Without a VectoredReader, with Markers, or when the Reader's buffer already holds the
// rest of the FPDU and more, ReadAhead is ReadFull(p) and End (done is 0).
func (fr *Reader) ReadAhead(p []byte, ahead []Ahead) (done int, started bool, err error) {
	if fr.err != nil {
		return 0, false, fr.err
	}
	if !fr.in {
		return 0, false, ErrNotInFPDU
	}
	if len(p) != fr.remain {
		return 0, false, ErrShortULPDU
	}
	k := 0
	for sum := 0; k < len(ahead) && k < MaxAhead; k++ {
		a := ahead[k]
		sum += len(a.Payload)
		if len(a.Header) > maxAheadHeader || len(a.Header)+len(a.Payload) > MaxULPDU || sum > MaxAheadBytes {
			break
		}
	}
	if k > 0 && !fr.markers && fr.vr != nil {
		// what the buffer holds of p first
		for len(p) > 0 && fr.rp != fr.wp {
			m, err := fr.raw(p, len(p))
			if err != nil {
				return 0, false, fr.fail(err)
			}
			p, fr.remain = p[m:], fr.remain-m
		}
		if fr.rp == fr.wp {
			return fr.readAhead(p, ahead[:k])
		}
	}
	if err := fr.ReadFull(p); err != nil {
		return 0, false, err
	}
	return 0, false, fr.End()
}

// readAhead is ReadAhead's vectored read: p, then for each FPDU j (the current one is 0)
// its pad and CRC and the next one's length and header (scratch j), then the next one's
// payload, and after the last CRC the Reader's buffer.
func (fr *Reader) readAhead(p []byte, ahead []Ahead) (done int, started bool, err error) {
	s := aheadScratches.Get().(*aheadScratch)
	defer func() {
		clear(s.vec[:]) // keep no reference to the caller's memory
		aheadScratches.Put(s)
	}()
	// scratch j: the pad of FPDU j (ULPDU length ul), its CRC, then (j < k) the next
	// FPDU's length and header
	var spans [MaxAhead + 1][2]int // scratch j = s.b[spans[j][0]:spans[j][1]]
	off, ul := 0, fr.ulpLen
	vec := s.vec[:0]
	vec = append(vec, p)
	for j := 0; j <= len(ahead); j++ {
		n := PadLen(ul) + CRCLen
		if j < len(ahead) {
			n += LengthLen + len(ahead[j].Header)
		}
		spans[j] = [2]int{off, off + n}
		vec = append(vec, s.b[off:off+n])
		off += n
		if j < len(ahead) {
			vec = append(vec, ahead[j].Payload)
			ul = len(ahead[j].Header) + len(ahead[j].Payload)
		}
	}
	fr.refillBuffer()
	vec = append(vec, fr.buf)
	m, rerr := fr.vr.ReadVectored(vec)
	fr.lastFill = 0
	if m <= 0 {
		if rerr == nil {
			rerr = ErrShortULPDU
		}
		return 0, false, fr.fail(rerr)
	}
	// the current payload
	if m < len(p) {
		fr.account(p[:m])
		fr.remain -= m
		if err := fr.ReadFull(p[m:]); err != nil {
			return 0, false, err
		}
		return 0, false, fr.End()
	}
	fr.account(p)
	fr.remain = 0
	m -= len(p)
	for j := 0; ; j++ {
		sc := s.b[spans[j][0]:spans[j][1]]
		got := min(m, len(sc))
		m -= got
		if got < len(sc) {
			// The read ended inside scratch j: read the rest of it now (through the
			// buffer, which then holds what follows; m is 0 from here on).
			if err := fr.rawFull(sc[got:], false); err != nil {
				return 0, false, fr.fail(err)
			}
		}
		// end FPDU j: its pad counts for the CRC, then the CRC field
		pad := PadLen(fr.ulpLen)
		if fr.crcOn {
			fr.crc = fastcrc.Castagnoli(fr.crc, sc[:pad])
		}
		if fr.crcOn && GetCRC(sc[pad:]) != fr.crc {
			fr.in = false
			fr.err = errCRC
			return 0, false, errCRC
		}
		fr.pos += uint32(pad + CRCLen)
		fr.in = false
		if j == len(ahead) { // the last expected FPDU ended; what followed is in the buffer
			if m > 0 {
				fr.rp, fr.wp = 0, m
			}
			return j, false, nil
		}
		a := ahead[j]
		hdr := sc[pad+CRCLen:]
		ulp := len(a.Header) + len(a.Payload)
		if int(binary.BigEndian.Uint16(hdr)) != ulp || !bytes.Equal(hdr[LengthLen:], a.Header) {
			// not the FPDU expected: keep what was read from its length on for Next
			fr.spill(hdr, vec[2*j+2:], m)
			return j, false, nil
		}
		// FPDU j+1 starts: its length and header are consumed
		fr.fpduStart = fr.pos
		fr.crc = 0
		if fr.crcOn {
			fr.crc = fastcrc.Castagnoli(0, hdr)
		}
		fr.pos += uint32(len(hdr))
		fr.ulpLen, fr.lastULP, fr.in = ulp, ulp, true
		fr.badMarker = false
		got = min(m, len(a.Payload))
		m -= got
		fr.account(a.Payload[:got])
		fr.remain = len(a.Payload) - got
		if fr.remain > 0 {
			return j, true, nil
		}
	}
}

// account counts octets read straight into the caller's memory: the stream position and,
// with CRC, the FPDU's CRC.
func (fr *Reader) account(b []byte) {
	if fr.crcOn {
		fr.crc = fastcrc.Castagnoli(fr.crc, b)
	}
	fr.pos += uint32(len(b))
}

// spill keeps the octets a ReadAhead read past the last FPDU it took: first (the length
// and header that did not match), then m more octets from the vectors after it (payloads,
// scratches, the buffer), then anything already buffered (when a scratch was completed
// through the buffer), in a pooled buffer that Next and the reads after it consume like
// the Reader's own; refillBuffer gives it back once it is drained.
func (fr *Reader) spill(first []byte, rest [][]byte, m int) {
	pending := fr.buf[fr.rp:fr.wp]
	size := spillSize(len(fr.buf))
	sp := readBufPool(size).Get().(*[]byte)
	b := (*sp)[:size]
	k := copy(b, first)
	for _, v := range rest {
		if m == 0 {
			break
		}
		c := copy(b[k:], v[:min(m, len(v))])
		k += c
		m -= c
	}
	k += copy(b[k:], pending)
	fr.spilled = sp
	fr.buf, fr.rp, fr.wp = b, 0, k
}

// spillSize is the most spill can hold: a length and header, every payload and scratch of
// a ReadAhead, and a buffer of bufLen octets.
func spillSize(bufLen int) int {
	return LengthLen + maxAheadHeader + MaxAheadBytes + len(aheadScratch{}.b) + bufLen
}

// unspill gives a drained spill buffer back and returns to the Reader's own buffer.
func (fr *Reader) unspill() {
	if fr.spilled == nil {
		return
	}
	readBufPool(len(*fr.spilled)).Put(fr.spilled)
	fr.spilled = nil
	if fr.big != nil {
		fr.buf = *fr.big
	} else {
		fr.buf = fr.small[:min(smallBuffer, fr.size)]
	}
	fr.rp, fr.wp = 0, 0
}
