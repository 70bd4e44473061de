package mpa

import (
	"encoding/binary"
	"io"
	"net"
	"sync"

	"github.com/softrnic/softrnic/internal/fastcrc"
)

// FPDU framing constants (RFC 5044 §4).
const (
	LengthLen      = 2   // ULPDU_Length field (RFC 5044 §4.1)
	CRCLen         = 4   // CRC field (RFC 5044 §4.1)
	MarkerLen      = 4   // Marker (RFC 5044 §4.2)
	MarkerInterval = 512 // Marker period in the TCP octet stream (RFC 5044 §4.3)
	MaxULPDU       = 0xFFFF
	// MinMULPDU is the floor of MULPDU (RFC 5044 §4.5).
	MinMULPDU = 128
	// FPDUOverhead is the per-FPDU overhead without pad and Markers.
	FPDUOverhead = LengthLen + CRCLen
)

// CRC32c returns the CRC32c (Castagnoli, RFC 3720 §12.1) of b as MPA uses it
// (RFC 5044 §4.4). On the wire it goes least-significant byte first; use
// PutCRC.
func CRC32c(b []byte) uint32 { return fastcrc.Castagnoli(0, b) }

// UpdateCRC32c continues crc over b, so scattered pieces can be covered
// without copying.
func UpdateCRC32c(crc uint32, b []byte) uint32 { return fastcrc.Castagnoli(crc, b) }

// PutCRC stores crc in the 4-byte MPA CRC field b in wire order
// (little-endian of the value, as RFC 5044 Figure 5 and Linux siw do).
func PutCRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetCRC reads the 4-byte MPA CRC field b (see PutCRC).
func GetCRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// PadLen returns the pad length after a ULPDU of n octets: FPDUs are a
// multiple of 4 octets (RFC 5044 §4.1).
func PadLen(n int) int { return (4 - (LengthLen+n)&3) & 3 }

// FPDULen returns the FPDU size without Markers for a ULPDU of n octets:
// length field, ULPDU, pad and CRC (RFC 5044 §4.1).
func FPDULen(n int) int { return LengthLen + n + PadLen(n) + CRCLen }

// MULPDU returns the largest ULPDU that fits one FPDU in an empty TCP
// segment of emss octets (RFC 5044 §4.5, used by §5.1 senders):
//
//	without Markers: MULPDU = EMSS - (6 + EMSS mod 4)
//	with Markers:    MULPDU = EMSS - (6 + 4*ceil(EMSS/512) + EMSS mod 4)
//
// never below 128 (MinMULPDU) and never above 65535. E.g. EMSS 1460 gives
// 1454 without and 1442 with Markers.
func MULPDU(emss int, markers bool) int {
	if emss < 0 {
		emss = 0
	}
	over := FPDUOverhead + emss%4
	if markers {
		over += MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	m := emss - over
	if m < MinMULPDU {
		m = MinMULPDU
	}
	if m > MaxULPDU {
		m = MaxULPDU
	}
	return m
}

// AppendFPDU appends to dst one FPDU without Markers carrying the ULPDU made
// of parts (RFC 5044 §4.1): length, ULPDU, zero pad, and the CRC32c (or a
// zero CRC field when crc is false, as siw sends). It is meant for tests
// and small frames; it panics if the ULPDU exceeds MaxULPDU.
func AppendFPDU(dst []byte, crc bool, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxULPDU {
		panic("mpa: AppendFPDU: ULPDU too long")
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	for _, p := range parts {
		dst = append(dst, p...)
	}
	dst = append(dst, make([]byte, PadLen(n))...)
	var c uint32
	if crc {
		c = CRC32c(dst[start:])
	}
	return binary.LittleEndian.AppendUint32(dst, c)
}

// FramingOptions selects the FPDU format of one direction of a connection
// (RFC 5044 §4, negotiated by §7.1; see Params.TxFraming/RxFraming).
type FramingOptions struct {
	CRC     bool // generate (Writer) or check (Reader) CRC32c; else the field is 0 / ignored
	Markers bool // insert (Writer) or strip and check (Reader) Markers (RFC 5044 §4.3)
	// StreamOffset is the number of octets of this direction's FPDU stream
	// already sent or received, counted from the first FPDU's position (the
	// SeqStart of RFC 5044 §4.3, where the first Marker goes). It is 0 for a
	// new connection; it only matters with Markers and must be a multiple of
	// 4 (its low 2 bits are ignored).
	StreamOffset uint32
	// ReadBuffer is the Reader's buffer size for small reads (default
	// 4096, minimum 64). Reads of at least 512 bytes (or ReadBuffer, if
	// smaller) into an empty buffer go straight into the caller's slice.
	ReadBuffer int
}

// maxMarkersPerFPDU bounds the Markers one FPDU can hold: at most
// (2+65535+3+4)/508+2 Markers.
const maxMarkersPerFPDU = (LengthLen+MaxULPDU+3+CRCLen)/(MarkerInterval-MarkerLen) + 2

// Writer batch capacities: iovec entries (Linux IOV_MAX is 1024) and octets of
// framing (length fields, DDP headers, pads, Markers, CRCs) held between
// flushes. An FPDU that does not fit flushes the batch first.
const (
	writerIOV   = 384 // a 64 KiB FPDU with Markers needs about 270
	writerArena = 8 << 10
)

// writerBuf is a Writer's batch memory, taken from writerBufs while FPDUs are queued
// and given back when the batch has been written, so an idle Writer holds none.
type writerBuf struct {
	store [][]byte
	arena []byte
	flat  [flatMax]byte // a small batch copied whole (flatten)
	one   [1][]byte
}

// flatMax is the largest batch written as one buffer: a small FPDU is three or more
// pieces (header, payload, pad and CRC), and on a socket one write(2) of its copy costs
// less than writev(2) of the pieces. BenchmarkSmallFlush compares the two for an 88-octet
// FPDU on loopback TCP (on the 2-core development VM, 4 runs each: 4.7–5.5 µs per flush
// as one buffer, 5.0–6.4 µs as pieces).
const flatMax = 256

var writerBufs = sync.Pool{New: func() any {
	return &writerBuf{store: make([][]byte, 0, writerIOV), arena: make([]byte, writerArena)}
}}

// Writer frames ULPDUs into FPDUs on an io.Writer (RFC 5044 §4): length,
// ULPDU, pad, CRC32c and, when enabled, Markers every 512 octets of the
// stream. FPDUs are gathered into a batch of slices (the framing octets in
// the Writer's own arena, the payload as the caller's slices, not copied)
// and written with a single net.Buffers WriteTo (writev on a *net.TCPConn), or
// one WriteVectored when the io.Writer is a VectoredWriter (FlushOwned copies a small
// batch into one buffer and writes that instead):
// WriteFPDU writes one FPDU at once; QueueFPDU adds one to the batch and
// Flush writes the batch, so many FPDUs cost one system call. It does not
// allocate. A Writer is not safe for concurrent use.
type Writer struct {
	w         io.Writer
	vw        VectoredWriter // w, when it is one (asserted once, at Reset)
	opt       FramingOptions
	pos       uint32 // stream position of the next octet, relative to SeqStart
	fpduStart uint32
	crc       uint32
	wb        *writerBuf // the batch memory while FPDUs are queued, else nil
	store     [][]byte   // the batch's iovecs (wb's)
	vec       net.Buffers
	arena     []byte // wb's
	used      int    // octets of arena in the batch
	bytes     int    // octets in the batch
}

// NewWriter returns a Writer framing onto w with opt.
func NewWriter(w io.Writer, opt FramingOptions) *Writer {
	fw := &Writer{}
	fw.Reset(w, opt)
	return fw
}

// acquire takes batch memory from the pool.
func (fw *Writer) acquire() {
	fw.wb = writerBufs.Get().(*writerBuf)
	fw.store, fw.arena = fw.wb.store[:0], fw.wb.arena
}

// release gives the (empty) batch memory back, with any growth QueueFPDU made.
func (fw *Writer) release() {
	if fw.wb == nil {
		return
	}
	fw.wb.store, fw.wb.arena = fw.store[:0], fw.arena
	writerBufs.Put(fw.wb)
	fw.wb, fw.store, fw.arena = nil, nil, nil
}

// Reset makes fw frame onto w with opt, dropping any queued FPDUs but
// keeping its buffers.
func (fw *Writer) Reset(w io.Writer, opt FramingOptions) {
	fw.w, fw.opt = w, opt
	fw.vw, _ = w.(VectoredWriter)
	fw.pos = opt.StreamOffset &^ 3
	fw.drop(0, 0, 0)
	fw.release()
}

// StreamOffset returns the number of octets framed so far (queued ones
// included), counted as in FramingOptions.StreamOffset.
func (fw *Writer) StreamOffset() uint32 { return fw.pos }

// Buffered returns the number of octets queued and not yet written.
func (fw *Writer) Buffered() int { return fw.bytes }

// drop truncates the batch to n iovecs, used arena octets and bytes.
func (fw *Writer) drop(n, used, bytes int) {
	clear(fw.store[n:len(fw.store)]) // drop references to the caller's memory
	fw.store = fw.store[:n]
	fw.used, fw.bytes = used, bytes
}

// take returns n octets of the arena.
func (fw *Writer) take(n int) []byte {
	b := fw.arena[fw.used : fw.used+n : fw.used+n]
	fw.used += n
	return b
}

func (fw *Writer) piece(b []byte) {
	if len(b) == 0 {
		return
	}
	fw.store = append(fw.store, b)
	if fw.opt.CRC {
		fw.crc = fastcrc.Castagnoli(fw.crc, b)
	}
	fw.pos += uint32(len(b))
	fw.bytes += len(b)
}

// marker adds a Marker with FPDUPTR ptr at the current position.
func (fw *Writer) marker(ptr uint32) bool {
	if ptr > 0xFFFF {
		return false
	}
	m := fw.take(MarkerLen)
	binary.BigEndian.PutUint32(m, ptr)
	fw.piece(m)
	return true
}

// data adds ULPDU-area octets, splitting them at Marker positions.
func (fw *Writer) data(b []byte) bool {
	for len(b) > 0 {
		n := len(b)
		if fw.opt.Markers {
			off := fw.pos % MarkerInterval
			if off == 0 {
				if !fw.marker(fw.pos - fw.fpduStart) {
					return false
				}
				continue
			}
			if room := int(MarkerInterval - off); n > room {
				n = room
			}
		}
		fw.piece(b[:n])
		b = b[n:]
	}
	return true
}

// WriteFPDU writes one FPDU whose ULPDU is hdr followed by the payload
// pieces (RFC 5044 §4.1, §4.3, §4.4), after any queued ones, with one
// vectored write. It fails with ErrULPDUTooLong, writing nothing, if the
// ULPDU exceeds 65535 octets or (with Markers) a Marker pointer would not fit
// 16 bits. Write errors are returned as is.
func (fw *Writer) WriteFPDU(hdr []byte, payload [][]byte) error {
	if err := fw.QueueFPDU(hdr, payload); err != nil {
		return err
	}
	return fw.Flush()
}

// QueueFPDU frames one FPDU as WriteFPDU does but adds it to the batch; the
// payload slices must stay unchanged until the batch is written (hdr is
// copied). When the batch has no room for it, the batch is written first
// (a write error is returned and the FPDU is not queued). Errors as
// WriteFPDU; ErrULPDUTooLong leaves the batch as it was.
func (fw *Writer) QueueFPDU(hdr []byte, payload [][]byte) error {
	n := len(hdr)
	for _, p := range payload {
		n += len(p)
	}
	if n > MaxULPDU {
		return ErrULPDUTooLong
	}
	if fw.wb == nil {
		fw.acquire()
	}
	// Worst case: length and header, pad, CRC and Markers in the arena; the
	// header, each payload piece, pad and CRC, and two more per Marker (one
	// for it, one for the piece it splits) in the iovecs.
	arena, iov := LengthLen+len(hdr)+3+CRCLen, len(payload)+3
	if fw.opt.Markers {
		mk := (LengthLen+n+3+CRCLen)/(MarkerInterval-MarkerLen) + 2
		arena += mk * MarkerLen
		iov += 2 * mk
	}
	if fw.used+arena > len(fw.arena) || len(fw.store)+iov > cap(fw.store) {
		if err := fw.flush(false); err != nil {
			return err
		}
		if iov > cap(fw.store) { // a payload of very many pieces (not on a hot path)
			fw.store = make([][]byte, 0, iov)
		}
		if arena > len(fw.arena) {
			fw.arena = make([]byte, arena)
		}
	}
	pos0, n0, used0, bytes0 := fw.pos, len(fw.store), fw.used, fw.bytes
	fw.crc = 0
	// A Marker falling between FPDUs belongs to this one and is 0 (§4.3).
	if fw.opt.Markers && fw.pos%MarkerInterval == 0 {
		fw.marker(0)
	}
	fw.fpduStart = fw.pos
	h := fw.take(LengthLen + len(hdr))
	binary.BigEndian.PutUint16(h, uint16(n))
	copy(h[LengthLen:], hdr)
	ok := fw.data(h)
	for _, p := range payload {
		ok = ok && fw.data(p)
	}
	pad := fw.take(PadLen(n))
	clear(pad)
	ok = ok && fw.data(pad)
	// A Marker right after the pad is inside this FPDU and CRC'd (§4.4).
	if ok && fw.opt.Markers && fw.pos%MarkerInterval == 0 {
		ok = fw.marker(fw.pos - fw.fpduStart)
	}
	if !ok {
		fw.pos = pos0
		fw.drop(n0, used0, bytes0)
		return ErrULPDUTooLong
	}
	c := fw.take(CRCLen)
	PutCRC(c, fw.crc)
	fw.store = append(fw.store, c)
	fw.pos += CRCLen
	fw.bytes += CRCLen
	return nil
}

// Flush writes the queued FPDUs with one vectored write and empties the
// batch (also on error: the stream is then broken anyway).
func (fw *Writer) Flush() error {
	err := fw.flush(false)
	fw.release()
	return err
}

// FlushOwned is Flush for a caller that owns the memory of every payload in the batch
// (nobody writes it meanwhile): a batch of several pieces and at most flatMax octets is
// copied into one buffer and written as that one. The copy reads the payloads in user
// space, where a concurrent writer of that memory races with it; Flush leaves reading
// them to the kernel (a Read Response's source, say, is the responder's application's).
func (fw *Writer) FlushOwned() error {
	err := fw.flush(true)
	fw.release()
	return err
}

// flush writes the batch, keeping its memory; flat: as FlushOwned.
func (fw *Writer) flush(flat bool) error {
	if len(fw.store) == 0 {
		return nil
	}
	var err error
	bufs := fw.store
	if flat {
		if b := fw.flatten(); b != nil {
			fw.wb.one[0] = b
			bufs = fw.wb.one[:]
		}
	}
	if fw.vw != nil {
		_, err = fw.vw.WriteVectored(bufs)
	} else if len(bufs) == 1 {
		_, err = fw.w.Write(bufs[0])
	} else {
		fw.vec = fw.store
		_, err = fw.vec.WriteTo(fw.w)
		fw.vec = nil
	}
	fw.wb.one[0] = nil
	fw.drop(0, 0, 0)
	return err
}

// TryFlush writes the queued FPDUs with one call of write, a vectored write that does not
// wait (it returns how many octets it wrote, which may be fewer than it was given, or 0
// when the connection takes none now), and reports whether the batch is empty. Octets
// it did not write stay queued in order for the next TryFlush or Flush, ahead of FPDUs
// queued meanwhile, so a caller that must not block (a receiver answering a request, say)
// leaves the rest to a goroutine that may. After an error the batch is emptied as by
// Flush.
func (fw *Writer) TryFlush(write func(bufs [][]byte) (int, error)) (bool, error) {
	if len(fw.store) == 0 {
		fw.release()
		return true, nil
	}
	n, err := write(fw.store)
	if err != nil || n >= fw.bytes {
		fw.drop(0, 0, 0)
		fw.release()
		return err == nil, err
	}
	fw.consume(n)
	return false, nil
}

// flatten copies a batch of several pieces and at most flatMax octets into one buffer
// and returns it; nil for any other batch.
func (fw *Writer) flatten() []byte {
	if len(fw.store) < 2 || fw.bytes > flatMax {
		return nil
	}
	b := fw.wb.flat[:0]
	for _, p := range fw.store {
		b = append(b, p...)
	}
	return b
}

// consume removes the first n (fewer than fw.bytes) octets of the batch.
func (fw *Writer) consume(n int) {
	fw.bytes -= n
	k := 0
	for n >= len(fw.store[k]) {
		n -= len(fw.store[k])
		k++
	}
	fw.store[k] = fw.store[k][n:]
	m := copy(fw.store, fw.store[k:])
	clear(fw.store[m:]) // drop references to the caller's memory
	fw.store = fw.store[:m]
}
