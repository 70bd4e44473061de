package rdmap

import (
	"encoding/binary"

	"github.com/softrnic/softrnic/ddp"
)

// Terminate control word bits (RFC 5040 §4.8 Figure 8), in the first 32-bit
// word of the Terminate header.
const (
	TermFlagM        = 0x8000 // DDP Segment Length valid
	TermFlagD        = 0x4000 // DDP header included
	TermFlagR        = 0x2000 // RDMA (Read Request) header included
	TermReservedMask = 0x1FFF
)

// Terminate header sizes.
const (
	TerminateMinLen = 4  // control word only
	TermSegLenLen   = 2  // DDP Segment Length field
	TermRDMAHdrLen  = 28 // Terminated RDMA header = Read Request header (224 bits)
	TerminateMaxLen = TerminateMinLen + TermSegLenLen + ddp.UntaggedLen + TermRDMAHdrLen
)

// Terminate is the Terminate header that follows the untagged DDP header
// (QN 2) of a Terminate message (RFC 5040 §4.8 Figure 7):
//
//	Layer(4) EType(4) ECode(8) M D R Reserved(13)
//	[DDP Segment Length(16)]            when M or D
//	[Terminated DDP header (14 or 18)]  when D; length from its T bit
//	[Terminated RDMA header (28)]       when R
//
// This is the layout siw produces: the segment length and DDP header are the
// MPA length field and header of the offending FPDU, back to back.
type Terminate struct {
	Err TerminateError
	// M: the DDP Segment Length is valid.
	M bool
	// D: the terminated DDP header is included.
	D bool
	// R: the terminated RDMA (Read Request) header is included.
	R bool
	// SegLen is the DDP Segment Length; on the wire when M or D is set.
	SegLen uint16
	// DDPHeader is the terminated DDP header, written when D is set: 14 or
	// 18 bytes matching its T bit. From ParseTerminate it aliases the input.
	DDPHeader []byte
	// RDMAHeader is the terminated Read Request header, written when R is
	// set: 28 bytes. From ParseTerminate it aliases the input. It is nil
	// when a peer set R without the header (siw does so for Send with
	// Invalidate; see ParseTerminate).
	RDMAHeader []byte
}

// Len returns the encoded length of the Terminate header.
func (t Terminate) Len() int {
	n := TerminateMinLen
	if t.M || t.D {
		n += TermSegLenLen
	}
	if t.D {
		n += len(t.DDPHeader)
	}
	if t.R {
		n += len(t.RDMAHeader)
	}
	return n
}

// Control returns the 32-bit terminate control word.
func (t Terminate) Control() uint32 {
	w := uint32(t.Err.Word()) << 16
	if t.M {
		w |= TermFlagM
	}
	if t.D {
		w |= TermFlagD
	}
	if t.R {
		w |= TermFlagR
	}
	return w
}

// Append appends the encoded Terminate header to b; it does not allocate
// when b has capacity. The caller keeps DDPHeader at 14 or 18 bytes matching
// its T bit and RDMAHeader at 28 bytes (TerminateFor and ParseTerminate do).
func (t Terminate) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, t.Control())
	if t.M || t.D {
		b = binary.BigEndian.AppendUint16(b, t.SegLen)
	}
	if t.D {
		b = append(b, t.DDPHeader...)
	}
	if t.R {
		b = append(b, t.RDMAHeader...)
	}
	return b
}

// ParseTerminate decodes the Terminate header at the start of b (the bytes
// after the DDP header). Reserved bits are ignored. Errors: ErrShort when b
// ends inside the control word, the segment length, the DDP header or the
// RDMA header; ErrTrailing when bytes follow the last included header (the
// message has no other length field, so extra bytes mean a malformed
// message). One leniency for siw: with R and D set, an echoed DDP header that
// is not a Read Request and nothing after it parses with R set and a nil
// RDMAHeader (siw sets R on every remote protection error). The header
// slices alias b.
func ParseTerminate(b []byte) (Terminate, error) {
	var t Terminate
	if len(b) < TerminateMinLen {
		return t, ErrShort
	}
	w := binary.BigEndian.Uint32(b)
	t.Err = TerminateError{Layer(w >> 28), ErrorType(w >> 24 & 0xF), ErrorCode(w >> 16)}
	t.M, t.D, t.R = w&TermFlagM != 0, w&TermFlagD != 0, w&TermFlagR != 0
	p := b[TerminateMinLen:]
	if t.M || t.D {
		if len(p) < TermSegLenLen {
			return Terminate{}, ErrShort
		}
		t.SegLen = binary.BigEndian.Uint16(p)
		p = p[TermSegLenLen:]
	}
	if t.D {
		if len(p) < 2 {
			return Terminate{}, ErrShort
		}
		n := ddp.HeaderLen(p[0])
		if len(p) < n {
			return Terminate{}, ErrShort
		}
		t.DDPHeader, p = p[:n:n], p[n:]
	}
	if t.R {
		lenient := t.D && len(p) == 0 && ControlOpcode(t.DDPHeader[ddp.OffULPCtrl]) != OpReadRequest
		if !lenient {
			if len(p) < TermRDMAHdrLen {
				return Terminate{}, ErrShort
			}
			t.RDMAHeader, p = p[:TermRDMAHdrLen:TermRDMAHdrLen], p[TermRDMAHdrLen:]
		}
	}
	if len(p) != 0 {
		return Terminate{}, ErrTrailing
	}
	return t, nil
}

// DDPOpcode returns the RDMAP opcode of the terminated DDP header; ok is
// false without one.
func (t Terminate) DDPOpcode() (op Opcode, ok bool) {
	if !t.D || len(t.DDPHeader) < 2 {
		return 0, false
	}
	return ControlOpcode(t.DDPHeader[ddp.OffULPCtrl]), true
}

// IncludeHeaders applies RFC 5040 §4.8 Figure 10: whether a Terminate for
// error e caused by a message with opcode op carries the DDP segment length
// and header, and the RDMA (Read Request) header. "Yes, if possible" is yes,
// except, as in siw, when the header layout is unknown: RDMAP invalid
// version or unexpected opcode, and DDP invalid version.
func IncludeHeaders(e TerminateError, op Opcode) (ddpHdr, rdmaHdr bool) {
	switch e.Layer {
	case LayerRDMAP:
		switch e.Type {
		case TypeRemoteProtection:
			return true, op == OpReadRequest
		case TypeRemoteOperation:
			if e.Code == CodeInvalidVersion || e.Code == CodeUnexpectedOpcode {
				return false, false
			}
			return true, false
		}
		return false, false
	case LayerDDP:
		if e.Is(ddp.ErrVersion) {
			return false, false
		}
		return true, false
	}
	return false, false
}

// TerminateFor builds the Terminate for error e caused by the received
// segment whose DDP header starts hdr (nil when no segment is associated,
// e.g. a local error). segLen goes into the DDP Segment Length field; siw
// reports the segment's payload length there (ULPDU_Length minus the DDP and
// RDMAP headers). Per IncludeHeaders it sets M and D with the DDP header,
// and R with the first 28 bytes of rdma (the Read Request header as received
// or as advanced by ReadRequest.Advance) when the segment is a Read Request
// and e is a remote protection error. The header slices alias hdr and rdma.
func TerminateFor(e TerminateError, segLen uint16, hdr, rdma []byte) Terminate {
	t := Terminate{Err: e}
	if len(hdr) < 2 {
		return t
	}
	n := ddp.HeaderLen(hdr[0])
	if len(hdr) < n {
		return t
	}
	op := ControlOpcode(hdr[ddp.OffULPCtrl])
	wantDDP, wantRDMA := IncludeHeaders(e, op)
	if !wantDDP {
		return t
	}
	t.M, t.D, t.SegLen, t.DDPHeader = true, true, segLen, hdr[:n:n]
	if wantRDMA && n == ddp.UntaggedLen && len(rdma) >= TermRDMAHdrLen {
		t.R, t.RDMAHeader = true, rdma[:TermRDMAHdrLen:TermRDMAHdrLen]
	}
	return t
}

// AppendTerminateMessage appends a whole Terminate DDP segment (without the
// MPA length): the untagged DDP header (L set, Terminate opcode, QN 2, the
// given MSN, MO 0) followed by t's header.
func AppendTerminateMessage(b []byte, msn ddp.MSN, t *Terminate) []byte {
	n := len(b)
	b = append(b, make([]byte, ddp.UntaggedLen)...)
	ddp.Untagged(b[n:]).Init(true, Control(OpTerminate), 0, ddp.QNTerminate, msn, 0)
	return t.Append(b)
}
