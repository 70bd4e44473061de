package mpa

import (
	"encoding/binary"
	"io"
	"sync"

	"github.com/softrnic/softrnic/internal/fastcrc"
	"github.com/softrnic/softrnic/internal/memcopy"
)

const (
	defaultReadBuffer = 4096
	minReadBuffer     = 64
	directRead        = 512
	// smallBuffer is the Reader's own buffer, used while traffic is light (every
	// refill fits it); the ReadBuffer-sized buffer is taken from a pool shared by all
	// Readers when a refill fills the small one, and given back when a refill finds
	// little data, so an idle connection holds no large receive buffer.
	smallBuffer = 512
)

// readBufs pools the large Reader buffers by size (a *sync.Pool per size).
var readBufs sync.Map

func readBufPool(size int) *sync.Pool {
	if p, ok := readBufs.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := readBufs.LoadOrStore(size, &sync.Pool{New: func() any { b := make([]byte, size); return &b }})
	return p.(*sync.Pool)
}

// VectoredReader is an optional interface of the io.Reader given to a Reader:
// ReadVectored reads into bufs in order with one call (readv(2) on a socket),
// returning the total count; like Read it returns n > 0 or an error. A
// transport implements it over its connection (e.g. syscall.RawConn); mpa
// itself does no I/O of its own.
type VectoredReader interface {
	ReadVectored(bufs [][]byte) (int, error)
}

// VectoredWriter is an optional interface of the io.Writer given to a
// Writer: WriteVectored writes all of bufs, in order, with one call, or
// fails. A connection with no writev of its own (a user-space TCP stack)
// implements it so a batch of FPDUs is one write rather than one per piece;
// net.Buffers' WriteTo is used otherwise (writev on a *net.TCPConn).
type VectoredWriter interface {
	WriteVectored(bufs [][]byte) (int64, error)
}

// Reader deframes FPDUs from an io.Reader (RFC 5044 §4, §6) without an
// intermediate copy of the payload: Next starts an FPDU and returns its
// ULPDU length; Read, ReadFull and Discard consume the ULPDU (Markers are
// stripped, checked and CRC'd on the way); End consumes pad, Markers and
// CRC and verifies them. Small reads are served from an internal buffer;
// a read of at least 512 bytes into an empty buffer goes directly from the
// underlying reader into the caller's slice, so the payload is copied once,
// kernel to destination. If the io.Reader is also a VectoredReader, such a
// direct read also refills the internal buffer in the same call (with what
// follows: the pad, CRC and next FPDU's header), so an FPDU costs one system
// call. With Markers the ULPDU is interrupted every 508
// octets, so those spans are read through the buffer (one extra copy)
// rather than with one read(2) per span. Placed data must be treated as
// tentative until End returns nil (RFC 5044 §6).
//
// After any error the Reader is stuck on it (RFC 5044 §8: no FPDU is
// delivered after an error). Errors: *Error with CodeCRC or CodeMarker from
// End (a bad Marker is reported only if the CRC is good, §8 code 3); I/O
// errors as returned by the underlying reader, io.EOF from Next at a clean
// FPDU boundary and io.ErrUnexpectedEOF inside an FPDU (both are MPA
// CodeTCPClosed). A Reader is not safe for concurrent use.
type Reader struct {
	r         io.Reader
	vr        VectoredReader // r, if it implements it
	vec       [2][]byte
	crcOn     bool
	markers   bool
	buf       []byte // the buffer in use: small, or big while traffic is heavy
	rp, wp    int
	size      int     // the large buffer's size (FramingOptions.ReadBuffer)
	big       *[]byte // the large buffer, from readBufPool(size), or nil
	spilled   *[]byte // buf while it holds what a ReadAhead read past its FPDUs (spill)
	small     [smallBuffer]byte
	lastFill  int // octets the last refill of buf brought in
	lastULP   int // ULPDU_Length of the last FPDU started
	direct    int
	pos       uint32 // stream position of the next unread octet
	fpduStart uint32
	crc       uint32
	ulpLen    int
	remain    int
	in        bool
	badMarker bool
	err       error
	tiny      [CRCLen]byte
	lbuf      [LengthLen]byte
}

// NewReader returns a Reader deframing from r with opt.
func NewReader(r io.Reader, opt FramingOptions) *Reader {
	fr := new(Reader)
	fr.Reset(r, opt)
	return fr
}

// Reset makes fr deframe from r with opt, dropping buffered data and any
// error.
func (fr *Reader) Reset(r io.Reader, opt FramingOptions) {
	size := opt.ReadBuffer
	if size <= 0 {
		size = defaultReadBuffer
	}
	if size < minReadBuffer {
		size = minReadBuffer
	}
	fr.Release()
	vr, _ := r.(VectoredReader)
	*fr = Reader{
		r:       r,
		vr:      vr,
		crcOn:   opt.CRC,
		markers: opt.Markers,
		size:    size,
		direct:  min(directRead, size),
		pos:     opt.StreamOffset &^ 3,
	}
	fr.buf = fr.small[:min(smallBuffer, size)]
}

// Release gives the large buffer back to the pool if the Reader holds one and has
// nothing buffered in it (a Reader that will not be read again should call it; a
// later read takes a buffer again as needed).
func (fr *Reader) Release() {
	if fr.rp != fr.wp {
		return
	}
	fr.unspill()
	if fr.big == nil {
		return
	}
	readBufPool(fr.size).Put(fr.big)
	fr.big = nil
	fr.buf = fr.small[:min(smallBuffer, fr.size)]
	fr.rp, fr.wp = 0, 0
}

// refillBuffer picks the buffer for a refill of the empty buffer: the large one
// after a refill that filled the small one or after an FPDU larger than the small one
// that the large one holds whole (the next one is likely alike: one read then takes it
// all, where the small one would take its start and a second, direct read the rest), the
// small one again after a refill that brought less than the small one holds.
func (fr *Reader) refillBuffer() {
	fr.unspill()
	fr.rp, fr.wp = 0, 0
	medium := fr.lastULP > len(fr.small) && FPDULen(fr.lastULP) <= fr.size
	switch {
	case fr.big == nil && (fr.lastFill == len(fr.small) || medium) && fr.size > len(fr.small):
		fr.big = readBufPool(fr.size).Get().(*[]byte)
		fr.buf = *fr.big
	case fr.big != nil && fr.lastFill < len(fr.small) && !medium:
		fr.Release()
	}
}

// InBuffered returns how many received octets are already buffered, so a
// caller can tell whether the next read will block.
func (fr *Reader) InBuffered() int { return fr.wp - fr.rp }

// FPDUBuffered reports whether the buffer holds the whole next FPDU (the Reader is between
// FPDUs; not with Markers), so that reading it will not wait for the stream.
func (fr *Reader) FPDUBuffered() bool {
	if fr.in || fr.markers || fr.err != nil || fr.wp-fr.rp < LengthLen {
		return false
	}
	return fr.wp-fr.rp >= FPDULen(int(binary.BigEndian.Uint16(fr.buf[fr.rp:])))
}

// StreamOffset returns the number of octets consumed so far, counted as in
// FramingOptions.StreamOffset.
func (fr *Reader) StreamOffset() uint32 { return fr.pos }

// Remaining returns the ULPDU octets of the current FPDU not yet read.
func (fr *Reader) Remaining() int { return fr.remain }

func (fr *Reader) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	fr.err = err
	return err
}

// raw reads up to len(p) octets with no Marker or CRC processing; p == nil
// means skip up to n octets. It returns at least one octet or an error.
func (fr *Reader) raw(p []byte, n int) (int, error) {
	if fr.rp == fr.wp {
		if p != nil && n >= fr.direct {
			m, err := fr.readDirect(p[:n])
			if m > 0 {
				if fr.crcOn {
					fr.crc = fastcrc.Castagnoli(fr.crc, p[:m])
				}
				fr.pos += uint32(m)
				return m, nil
			}
			if err == nil {
				err = io.ErrNoProgress
			}
			return 0, err
		}
		fr.refillBuffer()
		for fr.wp == 0 {
			m, err := fr.r.Read(fr.buf)
			if m > 0 {
				fr.wp = m
				fr.lastFill = m
				break
			}
			if err == nil {
				err = io.ErrNoProgress
			}
			return 0, err
		}
	}
	m := min(n, fr.wp-fr.rp)
	b := fr.buf[fr.rp : fr.rp+m]
	if p != nil {
		memcopy.Copy(p, b)
	}
	if fr.crcOn {
		fr.crc = fastcrc.Castagnoli(fr.crc, b)
	}
	fr.rp += m
	fr.pos += uint32(m)
	return m, nil
}

// readDirect reads into p, which the buffer (empty) cannot serve; with a
// VectoredReader the octets after p land in the buffer in the same call.
func (fr *Reader) readDirect(p []byte) (int, error) {
	if fr.vr == nil {
		return fr.r.Read(p)
	}
	fr.refillBuffer()
	fr.vec[0], fr.vec[1] = p, fr.buf
	m, err := fr.vr.ReadVectored(fr.vec[:])
	fr.vec[0], fr.vec[1] = nil, nil // keep no reference to the caller's memory
	fr.lastFill = 0
	if m > len(p) {
		fr.rp, fr.wp = 0, min(m, len(p)+len(fr.buf))-len(p)
		// What follows a large payload is its trailer and the next FPDU's header,
		// which the small buffer holds; a full small buffer here is the start of the
		// next large payload, which a large buffer would only copy more of.
		fr.lastFill = min(fr.wp, len(fr.small)-1)
		m = len(p)
	}
	return m, err
}

// rawFull reads exactly len(p) octets, CRC'd when crc is set.
func (fr *Reader) rawFull(p []byte, crc bool) error {
	on := fr.crcOn
	fr.crcOn = on && crc
	var err error
	for k, m := 0, 0; k < len(p); k += m {
		if m, err = fr.raw(p[k:], len(p)-k); err != nil {
			break
		}
	}
	fr.crcOn = on
	return err
}

// marker consumes and checks the Marker at the current position, which
// lies inside the current FPDU (RFC 5044 §4.3).
func (fr *Reader) marker() error {
	at := fr.pos
	if err := fr.rawFull(fr.tiny[:MarkerLen], true); err != nil {
		return err
	}
	ptr := binary.BigEndian.Uint32(fr.tiny[:]) & 0xFFFC // reserved half and low 2 bits ignored
	if ptr != at-fr.fpduStart {
		fr.badMarker = true
	}
	return nil
}

// data reads up to n ULPDU-area octets into p (p == nil: skip), stripping
// a Marker that lies at the current position.
func (fr *Reader) data(p []byte, n int) (int, error) {
	if fr.markers {
		off := fr.pos % MarkerInterval
		if off == 0 {
			if err := fr.marker(); err != nil {
				return 0, err
			}
			off = fr.pos % MarkerInterval
		}
		if room := int(MarkerInterval - off); n > room {
			n = room
		}
	}
	if p != nil {
		p = p[:n]
	}
	return fr.raw(p, n)
}

func (fr *Reader) dataFull(p []byte, n int) error {
	for n > 0 {
		m, err := fr.data(p, n)
		if err != nil {
			return err
		}
		if p != nil {
			p = p[m:]
		}
		n -= m
	}
	return nil
}

// Next starts the next FPDU and returns its ULPDU_Length (RFC 5044 §4.1,
// §6). A Marker preceding the FPDU must be 0 (§4.3). It returns io.EOF if
// the stream ends cleanly before the FPDU and ErrFPDUInProgress if the
// previous FPDU was not ended.
func (fr *Reader) Next() (int, error) {
	if fr.err != nil {
		return 0, fr.err
	}
	if fr.in {
		return 0, ErrFPDUInProgress
	}
	fr.crc, fr.badMarker = 0, false
	first := true
	if fr.markers && fr.pos%MarkerInterval == 0 {
		if _, err := fr.raw(fr.tiny[:1], 1); err != nil {
			fr.err = err // io.EOF stays io.EOF at a boundary
			return 0, err
		}
		first = false
		if err := fr.rawFull(fr.tiny[1:MarkerLen], true); err != nil {
			return 0, fr.fail(err)
		}
		if binary.BigEndian.Uint32(fr.tiny[:])&0xFFFC != 0 {
			fr.badMarker = true
		}
	}
	fr.fpduStart = fr.pos
	l := fr.lbuf[:]
	if first {
		if _, err := fr.raw(l[:1], 1); err != nil {
			fr.err = err
			return 0, err
		}
		if err := fr.rawFull(l[1:], true); err != nil {
			return 0, fr.fail(err)
		}
	} else if err := fr.dataFull(l, LengthLen); err != nil {
		return 0, fr.fail(err)
	}
	fr.ulpLen = int(binary.BigEndian.Uint16(l))
	fr.lastULP = fr.ulpLen
	fr.remain = fr.ulpLen
	fr.in = true
	return fr.ulpLen, nil
}

// Read reads up to len(p) octets of the current ULPDU into p. It returns
// io.EOF at the end of the ULPDU and ErrNotInFPDU outside an FPDU.
func (fr *Reader) Read(p []byte) (int, error) {
	if fr.err != nil {
		return 0, fr.err
	}
	if !fr.in {
		return 0, ErrNotInFPDU
	}
	if len(p) == 0 {
		return 0, nil
	}
	if fr.remain == 0 {
		return 0, io.EOF
	}
	m, err := fr.data(p, min(len(p), fr.remain))
	if err != nil {
		return 0, fr.fail(err)
	}
	fr.remain -= m
	return m, nil
}

// ReadFull fills p with the next len(p) octets of the current ULPDU; it
// fails with ErrShortULPDU, consuming nothing, if fewer remain.
func (fr *Reader) ReadFull(p []byte) error {
	if fr.err != nil {
		return fr.err
	}
	if !fr.in {
		return ErrNotInFPDU
	}
	if len(p) > fr.remain {
		return ErrShortULPDU
	}
	if err := fr.dataFull(p, len(p)); err != nil {
		return fr.fail(err)
	}
	fr.remain -= len(p)
	return nil
}

// Discard skips the next n octets of the current ULPDU (they still count
// for the CRC); it fails with ErrShortULPDU if fewer remain.
func (fr *Reader) Discard(n int) error {
	if fr.err != nil {
		return fr.err
	}
	if !fr.in {
		return ErrNotInFPDU
	}
	if n > fr.remain || n < 0 {
		return ErrShortULPDU
	}
	if err := fr.dataFull(nil, n); err != nil {
		return fr.fail(err)
	}
	fr.remain -= n
	return nil
}

// End finishes the current FPDU: it discards any unread ULPDU octets, then
// consumes the pad, any Marker before the CRC field and the CRC, and checks
// them (RFC 5044 §4.4, §6). It returns *Error CodeCRC on a CRC mismatch
// (only when CRC is enabled) and otherwise *Error CodeMarker if a Marker did
// not point at the FPDU start (RFC 5044 §8).
func (fr *Reader) End() error {
	if fr.err != nil {
		return fr.err
	}
	if !fr.in {
		return ErrNotInFPDU
	}
	if err := fr.dataFull(nil, fr.remain+PadLen(fr.ulpLen)); err != nil {
		return fr.fail(err)
	}
	fr.remain = 0
	if fr.markers && fr.pos%MarkerInterval == 0 {
		if err := fr.marker(); err != nil {
			return fr.fail(err)
		}
	}
	if err := fr.rawFull(fr.tiny[:CRCLen], false); err != nil {
		return fr.fail(err)
	}
	fr.in = false
	if fr.crcOn && GetCRC(fr.tiny[:]) != fr.crc {
		fr.err = errCRC
		return errCRC
	}
	if fr.badMarker {
		fr.err = errMarker
		return errMarker
	}
	return nil
}
