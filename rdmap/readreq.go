package rdmap

import "encoding/binary"

// ReadRequestLen is the length of the RDMA Read Request header that follows
// the DDP header (RFC 5040 §4.4 Figure 6).
const ReadRequestLen = 28

// Read Request field offsets.
const (
	OffSinkSTag = 0
	OffSinkTO   = 4
	OffReadSize = 12
	OffSrcSTag  = 16
	OffSrcTO    = 20
)

// ReadRequest is a view of an RDMA Read Request header (RFC 5040 §4.4). The
// Sink is the requester's buffer (copied into the Read Response), the Source
// the responder's buffer.
type ReadRequest []byte

// ParseReadRequest returns the Read Request view at the start of b, which
// must hold at least ReadRequestLen bytes (ErrShort). Bytes after the header
// are not part of the view; a Read Request carries no payload.
func ParseReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return nil, ErrShort
	}
	return ReadRequest(b[:ReadRequestLen]), nil
}

// IsValid reports whether r is long enough to hold the header.
func (r ReadRequest) IsValid() bool { return len(r) >= ReadRequestLen }

// SinkSTag returns the Data Sink STag.
func (r ReadRequest) SinkSTag() uint32 { return binary.BigEndian.Uint32(r[OffSinkSTag:]) }

// SinkTO returns the Data Sink Tagged Offset.
func (r ReadRequest) SinkTO() uint64 { return binary.BigEndian.Uint64(r[OffSinkTO:]) }

// Size returns the RDMA Read Message Size.
func (r ReadRequest) Size() uint32 { return binary.BigEndian.Uint32(r[OffReadSize:]) }

// SrcSTag returns the Data Source STag.
func (r ReadRequest) SrcSTag() uint32 { return binary.BigEndian.Uint32(r[OffSrcSTag:]) }

// SrcTO returns the Data Source Tagged Offset.
func (r ReadRequest) SrcTO() uint64 { return binary.BigEndian.Uint64(r[OffSrcTO:]) }

// SetSinkSTag sets the Data Sink STag.
func (r ReadRequest) SetSinkSTag(v uint32) { binary.BigEndian.PutUint32(r[OffSinkSTag:], v) }

// SetSinkTO sets the Data Sink Tagged Offset.
func (r ReadRequest) SetSinkTO(v uint64) { binary.BigEndian.PutUint64(r[OffSinkTO:], v) }

// SetSize sets the RDMA Read Message Size.
func (r ReadRequest) SetSize(v uint32) { binary.BigEndian.PutUint32(r[OffReadSize:], v) }

// SetSrcSTag sets the Data Source STag.
func (r ReadRequest) SetSrcSTag(v uint32) { binary.BigEndian.PutUint32(r[OffSrcSTag:], v) }

// SetSrcTO sets the Data Source Tagged Offset.
func (r ReadRequest) SetSrcTO(v uint64) { binary.BigEndian.PutUint64(r[OffSrcTO:], v) }

// Init writes every field.
func (r ReadRequest) Init(sinkSTag uint32, sinkTO uint64, size uint32, srcSTag uint32, srcTO uint64) {
	r.SetSinkSTag(sinkSTag)
	r.SetSinkTO(sinkTO)
	r.SetSize(size)
	r.SetSrcSTag(srcSTag)
	r.SetSrcTO(srcTO)
}

// AppendReadRequest appends a Read Request header to b.
func AppendReadRequest(b []byte, sinkSTag uint32, sinkTO uint64, size uint32, srcSTag uint32, srcTO uint64) []byte {
	n := len(b)
	b = append(b, make([]byte, ReadRequestLen)...)
	ReadRequest(b[n:]).Init(sinkSTag, sinkTO, size, srcSTag, srcTO)
	return b
}

// Check applies the TO-wrap rule to both buffers (RFC 5040 §7.2, RFC 5041
// §7.1 check 5): SrcTO+Size and SinkTO+Size must not wrap 2^64. A wrap is
// TermTOWrap (remote protection error).
func (r ReadRequest) Check() error {
	sz := uint64(r.Size())
	if r.SrcTO()+sz < r.SrcTO() || r.SinkTO()+sz < r.SinkTO() {
		return TermTOWrap
	}
	return nil
}

// Advance returns the header updated after n octets of the read were sent,
// as echoed in a Terminate (RFC 5040 §4.8): both TOs move forward by n and
// the size shrinks by n (to zero at most). It writes into dst, which must be
// a valid ReadRequest, and returns dst.
func (r ReadRequest) Advance(dst ReadRequest, n uint32) ReadRequest {
	n = min(n, r.Size())
	dst.Init(r.SinkSTag(), r.SinkTO()+uint64(n), r.Size()-n, r.SrcSTag(), r.SrcTO()+uint64(n))
	return dst
}
