package mpa

import "encoding/binary"

// Request/Reply frame constants (RFC 5044 §7.1.1, RFC 6581 §6, §9).
const (
	KeyRequest = "MPA ID Req Frame" // Key of an MPA Request Frame (RFC 5044 §7.1.1)
	KeyReply   = "MPA ID Rep Frame" // Key of an MPA Reply Frame (RFC 5044 §7.1.1)

	HeaderLen = 20 // Key (16) + bits (2) + PD_Length (2)
	// EnhancedLen is the size of the RFC 6581 §9 IRD/ORD word that starts the
	// private data when S is set.
	EnhancedLen = 4

	// MaxPrivateData is the RFC 5044 §7.1.1 limit on PD_Length.
	MaxPrivateData = 512
	// SiwMaxPrivateData is Linux siw's limit (MPA_MAX_PRIVDATA); siw drops
	// frames with a longer PD_Length.
	SiwMaxPrivateData = 256

	// MaxIRDORD is the largest 14-bit IRD/ORD value; it also means "no
	// automatic negotiation" (RFC 6581 §9.1).
	MaxIRDORD = 0x3FFF
)

// Bits of the 16-bit field after the Key (RFC 5044 §7.1.1, RFC 6581 §6).
const (
	BitM         = 0x8000 // Markers required by the sender of the frame
	BitC         = 0x4000 // CRC preferred
	BitR         = 0x2000 // connection rejected (Reply only)
	BitS         = 0x1000 // private data starts with the RFC 6581 §9 word
	ReservedMask = 0x0F00 // Res bits (siw uses 0x0800 as its private GSO bit)
	BitSiwGSO    = 0x0800 // Linux siw MPA_RR_FLAG_GSO_EXP, a reserved bit
	RevMask      = 0x00FF
)

// RFC 6581 §9 control flags in the IRD word (A, B) and the ORD word (C, D).
const (
	flagA      = 0x8000
	flagB      = 0x4000
	flagC      = 0x8000
	flagD      = 0x4000
	irdOrdMask = 0x3FFF
)

// RTRType is a set of RFC 6581 §9.2 Ready-To-Receive indication types.
type RTRType uint8

// RTR indication types (RFC 6581 §9.2 Control Flags B, C, D).
const (
	RTRSend  RTRType = 1 << iota // zero-length Send (flag B)
	RTRWrite                     // zero-length RDMA Write (flag C)
	RTRRead                      // zero-length RDMA Read (flag D)
)

// String lists the set's members, e.g. "write|read".
func (t RTRType) String() string {
	if t == 0 {
		return "none"
	}
	var b []byte
	add := func(s string) {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = append(b, s...)
	}
	if t&RTRSend != 0 {
		add("send")
	}
	if t&RTRWrite != 0 {
		add("write")
	}
	if t&RTRRead != 0 {
		add("read")
	}
	if t&^(RTRSend|RTRWrite|RTRRead) != 0 {
		add("?")
	}
	return string(b)
}

// Frame is a decoded MPA Request or Reply Frame (RFC 5044 §7.1.1) with the
// RFC 6581 §9 enhanced connection data split out when Enhanced (S) is set.
type Frame struct {
	Reply    bool   // Key is KeyReply (else KeyRequest)
	Markers  bool   // M: the sender requires Markers in FPDUs sent to it
	CRC      bool   // C: the sender prefers CRCs
	Reject   bool   // R: connection rejected (Reply)
	Enhanced bool   // S: PrivateData is preceded by the RFC 6581 IRD/ORD word
	Rev      uint8  // MPA revision (1 for RFC 5044, 2 for RFC 6581)
	Reserved uint16 // the Res bits in place (mask ReservedMask), preserved on round trip

	// RFC 6581 §9 fields, meaningful only when Enhanced.
	IRD, ORD uint16  // 14-bit values; MaxIRDORD means "not negotiated"
	P2P      bool    // Control Flag A: peer-to-peer model
	RTR      RTRType // Control Flags B, C, D (kept as received even when !P2P)

	// PrivateData is the ULP private data (after the 6581 word when
	// Enhanced). ParseFrame makes it alias its input.
	PrivateData []byte
}

// FrameLen returns the total size (HeaderLen + PD_Length) of the frame whose
// first HeaderLen bytes are hdr, checking the Key and the RFC 5044 §7.1.1
// private-data limit MaxPrivateData. A caller reading a socket reads
// HeaderLen bytes, calls FrameLen, then reads the rest.
func FrameLen(hdr []byte) (int, error) { return FrameLenMax(hdr, MaxPrivateData) }

// FrameLenMax is FrameLen with a private-data limit of max (for example
// SiwMaxPrivateData); max <= 0 means MaxPrivateData.
func FrameLenMax(hdr []byte, max int) (int, error) {
	if len(hdr) < HeaderLen {
		return 0, ErrShort
	}
	if k := string(hdr[:16]); k != KeyRequest && k != KeyReply {
		return 0, ErrBadKey
	}
	if max <= 0 {
		max = MaxPrivateData
	}
	pd := int(binary.BigEndian.Uint16(hdr[18:]))
	if pd > max {
		return 0, ErrPrivateDataTooLong
	}
	return HeaderLen + pd, nil
}

// ParseFrame decodes one complete MPA Request or Reply Frame (RFC 5044
// §7.1.1, RFC 6581 §6 and §9). b must hold exactly the frame: bytes beyond
// PD_Length give ErrTrailingData, as RFC 5044 §7.1.2 rule 9 and siw require.
// PrivateData aliases b. Semantic checks (revision, S with Rev < 2, ...) are
// left to Respond and Complete.
func ParseFrame(b []byte) (Frame, error) {
	n, err := FrameLen(b)
	if err != nil {
		return Frame{}, err
	}
	if len(b) < n {
		return Frame{}, ErrShort
	}
	if len(b) > n {
		return Frame{}, ErrTrailingData
	}
	bits := binary.BigEndian.Uint16(b[16:])
	f := Frame{
		Reply:    string(b[:16]) == KeyReply,
		Markers:  bits&BitM != 0,
		CRC:      bits&BitC != 0,
		Reject:   bits&BitR != 0,
		Enhanced: bits&BitS != 0,
		Rev:      uint8(bits & RevMask),
		Reserved: bits & ReservedMask,
	}
	pd := b[HeaderLen:n:n]
	if f.Enhanced {
		if len(pd) < EnhancedLen {
			return Frame{}, ErrShortEnhanced
		}
		ird := binary.BigEndian.Uint16(pd)
		ord := binary.BigEndian.Uint16(pd[2:])
		f.IRD = ird & irdOrdMask
		f.ORD = ord & irdOrdMask
		f.P2P = ird&flagA != 0
		if ird&flagB != 0 {
			f.RTR |= RTRSend
		}
		if ord&flagC != 0 {
			f.RTR |= RTRWrite
		}
		if ord&flagD != 0 {
			f.RTR |= RTRRead
		}
		pd = pd[EnhancedLen:]
	}
	if len(pd) > 0 {
		f.PrivateData = pd
	}
	return f, nil
}

// Len returns the encoded size of f: HeaderLen + PDLength().
func (f *Frame) Len() int { return HeaderLen + f.PDLength() }

// PDLength returns the PD_Length field of f: the ULP private data plus the
// 4-byte RFC 6581 word when Enhanced.
func (f *Frame) PDLength() int {
	n := len(f.PrivateData)
	if f.Enhanced {
		n += EnhancedLen
	}
	return n
}

// Bits returns the 16-bit M|C|R|S|Res|Rev field of f (RFC 6581 §6).
func (f *Frame) Bits() uint16 {
	bits := uint16(f.Rev) | f.Reserved&ReservedMask
	if f.Markers {
		bits |= BitM
	}
	if f.CRC {
		bits |= BitC
	}
	if f.Reject {
		bits |= BitR
	}
	if f.Enhanced {
		bits |= BitS
	}
	return bits
}

// Append appends the wire encoding of f to b (RFC 5044 §7.1.1, RFC 6581 §9)
// and returns the extended slice; it does not allocate when b has room for
// f.Len() more bytes. IRD and ORD are truncated to 14 bits. The caller keeps
// PDLength() within the limit its peer accepts (see Request, Respond).
func (f *Frame) Append(b []byte) []byte {
	if f.Reply {
		b = append(b, KeyReply...)
	} else {
		b = append(b, KeyRequest...)
	}
	b = binary.BigEndian.AppendUint16(b, f.Bits())
	b = binary.BigEndian.AppendUint16(b, uint16(f.PDLength()))
	if f.Enhanced {
		ird := f.IRD & irdOrdMask
		ord := f.ORD & irdOrdMask
		if f.P2P {
			ird |= flagA
		}
		if f.RTR&RTRSend != 0 {
			ird |= flagB
		}
		if f.RTR&RTRWrite != 0 {
			ord |= flagC
		}
		if f.RTR&RTRRead != 0 {
			ord |= flagD
		}
		b = binary.BigEndian.AppendUint16(b, ird)
		b = binary.BigEndian.AppendUint16(b, ord)
	}
	return append(b, f.PrivateData...)
}
