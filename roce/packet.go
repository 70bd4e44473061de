package roce

import "encoding/binary"

// Packet is a parsed RoCEv2 packet: views into the buffer given to
// ParsePacket (nothing is copied). Views of headers the opcode does not
// carry are nil.
type Packet struct {
	BTH          BTH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	Payload      []byte // the message payload (for a CNP, its 16 reserved bytes)
	Pad          []byte // 0-3 pad bytes (BTH.PadCnt)
	ICRC         []byte // the 4 ICRC bytes as sent (little-endian CRC value)
	Raw          []byte // the whole packet, BTH through ICRC
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// ICRCValue returns the CRC value carried in the ICRC field.
func (p *Packet) ICRCValue() uint32 { return binary.LittleEndian.Uint32(p.ICRC) }

// Covered returns the bytes the ICRC covers after the UDP header: BTH,
// extended headers, payload and pad.
func (p *Packet) Covered() []byte { return p.Raw[:len(p.Raw)-ICRCLen] }

// ParsePacket splits b, the UDP payload of a RoCEv2 datagram (BTH through
// ICRC), into views. It checks that the opcode is a supported RC, UC, UD or
// CNP opcode, that TVer is 0, that the length fits the opcode's headers, the
// pad and the ICRC, that payload+pad is a multiple of 4, and that opcodes
// without payload carry none. It does not check the ICRC (that needs the IP
// header; see ICRC*), nor P_Key, QPN or PSN, which are transport state.
// It never allocates.
func ParsePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < BTHLen+ICRCLen {
		return p, ErrShort
	}
	bth := BTH(b[:BTHLen])
	info := &opTable[bth.Opcode()]
	if !info.Valid {
		return p, ErrBadOpcode
	}
	if bth.TVer() != BTHTVer {
		return p, ErrBadVersion
	}
	end := len(b) - ICRCLen
	if end < info.HdrLen {
		return p, ErrShort
	}
	p.BTH = bth
	h := info.Headers
	if h != 0 {
		if h&HasDETH != 0 {
			p.DETH = DETH(eth(b, info, 1))
		}
		if h&HasFETH != 0 {
			p.FETH = FETH(eth(b, info, 2))
		}
		if h&HasRETH != 0 {
			p.RETH = RETH(eth(b, info, 3))
		}
		if h&HasAETH != 0 {
			p.AETH = AETH(eth(b, info, 4))
		}
		if h&HasAtomicETH != 0 {
			p.AtomicETH = AtomicETH(eth(b, info, 5))
		}
		if h&HasAtomicAckETH != 0 {
			p.AtomicAckETH = AtomicAckETH(eth(b, info, 6))
		}
		if h&HasImmDt != 0 {
			p.ImmDt = ImmDt(eth(b, info, 7))
		}
		if h&HasIETH != 0 {
			p.IETH = IETH(eth(b, info, 8))
		}
	}
	rest := end - info.HdrLen // payload + pad
	if rest&3 != 0 {
		return Packet{}, ErrBadLength
	}
	pad := bth.PadCnt()
	if pad > rest {
		return Packet{}, ErrBadPad
	}
	plen := rest - pad
	if info.FixedPayload >= 0 && (plen != info.FixedPayload || (info.FixedPayload == 0 && pad != 0)) {
		return Packet{}, ErrPayload
	}
	p.Payload = b[info.HdrLen : info.HdrLen+plen : info.HdrLen+plen]
	p.Pad = b[info.HdrLen+plen : end : end]
	p.ICRC = b[end:len(b):len(b)]
	p.Raw = b
	return p, nil
}

func eth(b []byte, info *OpInfo, n int) []byte {
	o := int(info.off[n])
	e := o + int(ethLens[n])
	return b[o:e:e]
}

// PadLen returns the number of pad bytes needed after a payload of n bytes.
func PadLen(n int) int { return -n & 3 }

// Header holds every field a packet's BTH and extended headers can carry;
// Append writes those of Opcode in wire order. Fields of headers the opcode
// does not carry are ignored. Reserved fields are written as zero.
type Header struct {
	// BTH
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32
	AckReq bool
	PSN    PSN

	// DETH
	QKey  uint32
	SrcQP uint32

	// FETH
	PlacementType    uint8
	SelectivityLevel uint8

	// RETH (also the VA and R_Key of an AtomicETH)
	VA     uint64
	RKey   uint32
	DMALen uint32

	// AETH
	Syndrome Syndrome
	MSN      MSN

	// AtomicETH (VA and RKey above)
	SwapAdd uint64
	Compare uint64

	// AtomicAckETH
	OrigData uint64

	// ImmDt
	Imm uint32

	// IETH
	InvRKey uint32
}

// Append appends the BTH and extended headers of h.Opcode to b, with the
// BTH pad count set for a payload of payloadLen bytes. The caller then
// appends the payload, AppendPad and the ICRC. It never allocates when b has
// room for h.Opcode.HeaderLen() more bytes.
func (h *Header) Append(b []byte, payloadLen int) []byte {
	info := &opTable[h.Opcode]
	n := len(b)
	b = grow(b, info.HdrLen)
	w := b[n:]
	clear(w)
	bth := BTH(w)
	bth.SetOpcode(h.Opcode)
	bth.SetSE(h.SE)
	bth.SetMigReq(h.MigReq)
	bth.SetPadCnt(PadLen(payloadLen))
	bth.SetPKey(h.PKey)
	bth.SetFECN(h.FECN)
	bth.SetBECN(h.BECN)
	bth.SetDestQP(h.DestQP)
	bth.SetAckReq(h.AckReq)
	bth.SetPSN(h.PSN)
	hs := info.Headers
	if hs == 0 {
		return b
	}
	if hs&HasDETH != 0 {
		d := DETH(w[info.off[1]:])
		d.SetQKey(h.QKey)
		d.SetSrcQP(h.SrcQP)
	}
	if hs&HasFETH != 0 {
		f := FETH(w[info.off[2]:])
		f.SetPlacementType(h.PlacementType)
		f.SetSelectivityLevel(h.SelectivityLevel)
	}
	if hs&HasRETH != 0 {
		r := RETH(w[info.off[3]:])
		r.SetVA(h.VA)
		r.SetRKey(h.RKey)
		r.SetDMALen(h.DMALen)
	}
	if hs&HasAETH != 0 {
		a := AETH(w[info.off[4]:])
		a.SetSyndrome(h.Syndrome)
		a.SetMSN(h.MSN)
	}
	if hs&HasAtomicETH != 0 {
		a := AtomicETH(w[info.off[5]:])
		a.SetVA(h.VA)
		a.SetRKey(h.RKey)
		a.SetSwapAdd(h.SwapAdd)
		a.SetCompare(h.Compare)
	}
	if hs&HasAtomicAckETH != 0 {
		AtomicAckETH(w[info.off[6]:]).SetOrigData(h.OrigData)
	}
	if hs&HasImmDt != 0 {
		ImmDt(w[info.off[7]:]).SetImm(h.Imm)
	}
	if hs&HasIETH != 0 {
		IETH(w[info.off[8]:]).SetRKey(h.InvRKey)
	}
	return b
}

// Header returns the fields of p as a Header, so that
// h.Append + payload + pad rebuilds p with reserved fields and pad bytes zeroed.
func (p *Packet) Header() Header {
	b := p.BTH
	h := Header{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PKey: b.PKey(),
		FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
	if p.DETH != nil {
		h.QKey, h.SrcQP = p.DETH.QKey(), p.DETH.SrcQP()
	}
	if p.FETH != nil {
		h.PlacementType, h.SelectivityLevel = p.FETH.PlacementType(), p.FETH.SelectivityLevel()
	}
	if p.RETH != nil {
		h.VA, h.RKey, h.DMALen = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	}
	if p.AETH != nil {
		h.Syndrome, h.MSN = p.AETH.Syndrome(), p.AETH.MSN()
	}
	if p.AtomicETH != nil {
		h.VA, h.RKey = p.AtomicETH.VA(), p.AtomicETH.RKey()
		h.SwapAdd, h.Compare = p.AtomicETH.SwapAdd(), p.AtomicETH.Compare()
	}
	if p.AtomicAckETH != nil {
		h.OrigData = p.AtomicAckETH.OrigData()
	}
	if p.ImmDt != nil {
		h.Imm = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		h.InvRKey = p.IETH.RKey()
	}
	return h
}

// Append appends the packet's bytes (BTH through ICRC) to b unchanged.
func (p *Packet) Append(b []byte) []byte { return append(b, p.Raw...) }

// Len returns the packet length, BTH through ICRC.
func (p *Packet) Len() int { return len(p.Raw) }

// AppendPad appends the zero pad bytes for a payload of payloadLen bytes.
func AppendPad(b []byte, payloadLen int) []byte {
	return append(b, zeros[:PadLen(payloadLen)]...)
}

var zeros [CNPReservedLen]byte

// AppendICRC appends the ICRC field for CRC value crc (least significant
// byte first, as rxe sends it).
func AppendICRC(b []byte, crc uint32) []byte { return binary.LittleEndian.AppendUint32(b, crc) }

// AppendCNP appends a complete RoCEv2 CNP body without its ICRC: BTH with
// opcode 0x81, BECN set, the given destination QP, P_Key 0xFFFF, PSN 0, and
// 16 reserved zero bytes (Annex A17.9.3).
func AppendCNP(b []byte, destQP uint32) []byte {
	h := Header{Opcode: CNP, PKey: DefaultPKey, BECN: true, DestQP: destQP}
	b = h.Append(b, CNPReservedLen)
	return append(b, zeros[:]...)
}

func grow(b []byte, n int) []byte {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:l+n]
}
