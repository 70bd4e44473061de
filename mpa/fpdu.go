package mpa

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32c returns the CRC32c (Castagnoli, RFC 3720 §12.1) of b as MPA uses it
// (RFC 5044 §4.4). On the wire it goes least-significant byte first; use
// PutCRC.
func CRC32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC32c continues crc over b, so scattered pieces can be covered
// without copying.
func UpdateCRC32c(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

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

// Writer frames ULPDUs into FPDUs on an io.Writer (RFC 5044 §4): length,
// ULPDU, pad, CRC32c and, when enabled, Markers every 512 octets of the
// stream. Each FPDU is written with a single net.Buffers WriteTo (writev on
// a *net.TCPConn) straight from the caller's slices: no copy of the payload
// and no allocation. A Writer is not safe for concurrent use.
type Writer struct {
	w         io.Writer
	opt       FramingOptions
	pos       uint32 // stream position of the next octet, relative to SeqStart
	fpduStart uint32
	crc       uint32
	nmark     int
	store     [][]byte
	vec       net.Buffers
	fixed     [8]byte // length field, pad
	crcField  [CRCLen]byte
	marks     [maxMarkersPerFPDU * MarkerLen]byte
}

// NewWriter returns a Writer framing onto w with opt.
func NewWriter(w io.Writer, opt FramingOptions) *Writer {
	fw := &Writer{store: make([][]byte, 0, 16)}
	fw.Reset(w, opt)
	return fw
}

// Reset makes fw frame onto w with opt, keeping its buffers.
func (fw *Writer) Reset(w io.Writer, opt FramingOptions) {
	fw.w, fw.opt = w, opt
	fw.pos = opt.StreamOffset &^ 3
}

// StreamOffset returns the number of octets framed so far, counted as in
// FramingOptions.StreamOffset.
func (fw *Writer) StreamOffset() uint32 { return fw.pos }

func (fw *Writer) piece(b []byte) {
	if len(b) == 0 {
		return
	}
	fw.store = append(fw.store, b)
	if fw.opt.CRC {
		fw.crc = crc32.Update(fw.crc, castagnoli, b)
	}
	fw.pos += uint32(len(b))
}

// marker adds a Marker with FPDUPTR ptr at the current position.
func (fw *Writer) marker(ptr uint32) bool {
	if ptr > 0xFFFF || fw.nmark >= maxMarkersPerFPDU {
		return false
	}
	m := fw.marks[fw.nmark*MarkerLen : (fw.nmark+1)*MarkerLen : (fw.nmark+1)*MarkerLen]
	fw.nmark++
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
// pieces (RFC 5044 §4.1, §4.3, §4.4). It fails with ErrULPDUTooLong,
// writing nothing, if the ULPDU exceeds 65535 octets or (with Markers) a
// Marker pointer would not fit 16 bits. Write errors are returned as is.
func (fw *Writer) WriteFPDU(hdr []byte, payload [][]byte) error {
	n := len(hdr)
	for _, p := range payload {
		n += len(p)
	}
	if n > MaxULPDU {
		return ErrULPDUTooLong
	}
	pos0 := fw.pos
	fw.store = fw.store[:0]
	fw.crc, fw.nmark = 0, 0
	// A Marker falling between FPDUs belongs to this one and is 0 (§4.3).
	if fw.opt.Markers && fw.pos%MarkerInterval == 0 {
		fw.marker(0)
	}
	fw.fpduStart = fw.pos
	binary.BigEndian.PutUint16(fw.fixed[:2], uint16(n))
	fw.fixed[2], fw.fixed[3], fw.fixed[4] = 0, 0, 0
	ok := fw.data(fw.fixed[:2]) && fw.data(hdr)
	for _, p := range payload {
		ok = ok && fw.data(p)
	}
	ok = ok && fw.data(fw.fixed[2:2+PadLen(n)])
	// A Marker right after the pad is inside this FPDU and CRC'd (§4.4).
	if ok && fw.opt.Markers && fw.pos%MarkerInterval == 0 {
		ok = fw.marker(fw.pos - fw.fpduStart)
	}
	if !ok {
		fw.pos = pos0
		clear(fw.store)
		return ErrULPDUTooLong
	}
	PutCRC(fw.crcField[:], fw.crc)
	fw.store = append(fw.store, fw.crcField[:])
	fw.pos += CRCLen
	fw.vec = fw.store
	_, err := fw.vec.WriteTo(fw.w)
	clear(fw.store) // drop references to the caller's memory
	return err
}
