package roce

import "encoding/binary"

var be = binary.BigEndian

// Header sizes in bytes (include/rdma/ib_pack.h, rxe_hdr.h).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	RDETHLen        = 4
	FETHLen         = 4
	ICRCLen         = 4
	// CNPReservedLen is the number of reserved zero bytes after the BTH of a
	// RoCEv2 CNP (Annex A17.9.3).
	CNPReservedLen = 16
	// MaxHeaderLen is the longest BTH+ETH sequence of any supported opcode.
	MaxHeaderLen = BTHLen + DETHLen + ImmDtLen + RETHLen + AtomicETHLen
)

// Well-known values.
const (
	UDPPort        = 4791       // RoCEv2 UDP destination port (ROCE_V2_UDP_DPORT)
	DefaultPKey    = 0xFFFF     // default partition key (BTH_DEF_PKEY)
	GSIQKey        = 0x80010000 // Q_Key of QP1 (GSI), used for CM MADs
	QKeyControlled = 0x80000000 // Q_Key high bit: controlled Q_Key
	BTHTVer        = 0          // the only defined transport header version
)

// BTH is a view of the 12-byte Base Transport Header (IBTA Vol.1 §9.2).
//
//	byte 0      OpCode
//	byte 1      SE(7) M(6) PadCnt(5-4) TVer(3-0)
//	byte 2-3    P_Key
//	byte 4      FECN(7) BECN(6) Resv6a(5-0)
//	byte 5-7    DestQP
//	byte 8      AckReq(7) Resv7(6-0)
//	byte 9-11   PSN
type BTH []byte

// BTH byte offsets and bit masks.
const (
	BTHOffOpcode = 0
	BTHOffFlags  = 1
	BTHOffPKey   = 2
	BTHOffECN    = 4
	BTHOffDestQP = 4 // 32-bit word whose low 24 bits are DestQP
	BTHOffAckReq = 8
	BTHOffPSN    = 8 // 32-bit word whose low 24 bits are the PSN

	BTHSEMask     = 0x80
	BTHMigMask    = 0x40
	BTHPadMask    = 0x30
	BTHTVerMask   = 0x0F
	BTHFECNMask   = 0x80
	BTHBECNMask   = 0x40
	BTHResv6aMask = 0x3F
	BTHAckMask    = 0x80
	BTHResv7Mask  = 0x7F
	QPNMask       = 0x00FFFFFF
)

// IsValid reports whether b is long enough to hold a BTH.
func (b BTH) IsValid() bool { return len(b) >= BTHLen }

func (b BTH) Opcode() Opcode      { return Opcode(b[0]) }
func (b BTH) SE() bool            { return b[1]&BTHSEMask != 0 }
func (b BTH) MigReq() bool        { return b[1]&BTHMigMask != 0 }
func (b BTH) PadCnt() int         { return int(b[1]&BTHPadMask) >> 4 }
func (b BTH) TVer() uint8         { return b[1] & BTHTVerMask }
func (b BTH) PKey() uint16        { return be.Uint16(b[2:]) }
func (b BTH) FECN() bool          { return b[4]&BTHFECNMask != 0 }
func (b BTH) BECN() bool          { return b[4]&BTHBECNMask != 0 }
func (b BTH) Resv6a() uint8       { return b[4] & BTHResv6aMask }
func (b BTH) DestQP() uint32      { return be.Uint32(b[4:]) & QPNMask }
func (b BTH) AckReq() bool        { return b[8]&BTHAckMask != 0 }
func (b BTH) Resv7() uint8        { return b[8] & BTHResv7Mask }
func (b BTH) PSN() PSN            { return PSN(be.Uint32(b[8:]) & PSNMask) }
func (b BTH) SetOpcode(o Opcode)  { b[0] = byte(o) }
func (b BTH) SetSE(v bool)        { setBit(&b[1], BTHSEMask, v) }
func (b BTH) SetMigReq(v bool)    { setBit(&b[1], BTHMigMask, v) }
func (b BTH) SetPadCnt(n int)     { b[1] = b[1]&^BTHPadMask | byte(n&3)<<4 }
func (b BTH) SetTVer(v uint8)     { b[1] = b[1]&^BTHTVerMask | v&BTHTVerMask }
func (b BTH) SetPKey(k uint16)    { be.PutUint16(b[2:], k) }
func (b BTH) SetFECN(v bool)      { setBit(&b[4], BTHFECNMask, v) }
func (b BTH) SetBECN(v bool)      { setBit(&b[4], BTHBECNMask, v) }
func (b BTH) SetDestQP(qp uint32) { put24(b[5:], qp) }
func (b BTH) SetAckReq(v bool)    { setBit(&b[8], BTHAckMask, v) }
func (b BTH) SetPSN(p PSN)        { put24(b[9:], uint32(p)) }

// RETH is a view of the 16-byte RDMA Extended Transport Header:
// VA u64 | R_Key u32 | DMA Length u32 (IBTA Vol.1 §9.3.3).
type RETH []byte

const (
	RETHOffVA     = 0
	RETHOffRKey   = 8
	RETHOffDMALen = 12
)

func (b RETH) IsValid() bool      { return len(b) >= RETHLen }
func (b RETH) VA() uint64         { return be.Uint64(b[RETHOffVA:]) }
func (b RETH) RKey() uint32       { return be.Uint32(b[RETHOffRKey:]) }
func (b RETH) DMALen() uint32     { return be.Uint32(b[RETHOffDMALen:]) }
func (b RETH) SetVA(v uint64)     { be.PutUint64(b[RETHOffVA:], v) }
func (b RETH) SetRKey(v uint32)   { be.PutUint32(b[RETHOffRKey:], v) }
func (b RETH) SetDMALen(v uint32) { be.PutUint32(b[RETHOffDMALen:], v) }

// AETH is a view of the 4-byte ACK Extended Transport Header:
// Syndrome u8 | MSN u24 (IBTA Vol.1 §9.3.5).
type AETH []byte

const (
	AETHOffSyndrome = 0
	AETHOffMSN      = 0 // 32-bit word whose low 24 bits are the MSN
	MSNMask         = 0x00FFFFFF
)

func (b AETH) IsValid() bool          { return len(b) >= AETHLen }
func (b AETH) Syndrome() Syndrome     { return Syndrome(b[0]) }
func (b AETH) MSN() uint32            { return be.Uint32(b) & MSNMask }
func (b AETH) SetSyndrome(s Syndrome) { b[0] = byte(s) }
func (b AETH) SetMSN(m uint32)        { put24(b[1:], m) }

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header:
// VA u64 | R_Key u32 | Swap/Add Data u64 | Compare Data u64 (IBTA Vol.1 §9.3.4).
// The 64-bit fields are only 4-byte aligned.
type AtomicETH []byte

const (
	AtomicETHOffVA      = 0
	AtomicETHOffRKey    = 8
	AtomicETHOffSwapAdd = 12
	AtomicETHOffCompare = 20
)

func (b AtomicETH) IsValid() bool       { return len(b) >= AtomicETHLen }
func (b AtomicETH) VA() uint64          { return be.Uint64(b[AtomicETHOffVA:]) }
func (b AtomicETH) RKey() uint32        { return be.Uint32(b[AtomicETHOffRKey:]) }
func (b AtomicETH) SwapAdd() uint64     { return be.Uint64(b[AtomicETHOffSwapAdd:]) }
func (b AtomicETH) Compare() uint64     { return be.Uint64(b[AtomicETHOffCompare:]) }
func (b AtomicETH) SetVA(v uint64)      { be.PutUint64(b[AtomicETHOffVA:], v) }
func (b AtomicETH) SetRKey(v uint32)    { be.PutUint32(b[AtomicETHOffRKey:], v) }
func (b AtomicETH) SetSwapAdd(v uint64) { be.PutUint64(b[AtomicETHOffSwapAdd:], v) }
func (b AtomicETH) SetCompare(v uint64) { be.PutUint64(b[AtomicETHOffCompare:], v) }

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header:
// the original remote data (IBTA Vol.1 §9.3.6).
type AtomicAckETH []byte

func (b AtomicAckETH) IsValid() bool        { return len(b) >= AtomicAckETHLen }
func (b AtomicAckETH) OrigData() uint64     { return be.Uint64(b) }
func (b AtomicAckETH) SetOrigData(v uint64) { be.PutUint64(b, v) }

// ImmDt is a view of the 4-byte Immediate Data header. The value is opaque;
// Imm returns it as a big-endian integer (the verbs API keeps it in network
// order, so put it back with SetImm to preserve the bytes).
type ImmDt []byte

func (b ImmDt) IsValid() bool   { return len(b) >= ImmDtLen }
func (b ImmDt) Imm() uint32     { return be.Uint32(b) }
func (b ImmDt) SetImm(v uint32) { be.PutUint32(b, v) }

// IETH is a view of the 4-byte Invalidate Extended Transport Header: the
// R_Key to invalidate (IBTA Vol.1 §9.3.8).
type IETH []byte

func (b IETH) IsValid() bool    { return len(b) >= IETHLen }
func (b IETH) RKey() uint32     { return be.Uint32(b) }
func (b IETH) SetRKey(v uint32) { be.PutUint32(b, v) }

// DETH is a view of the 8-byte Datagram Extended Transport Header:
// Q_Key u32 | Resv8 | Source QP u24 (IBTA Vol.1 §9.3.2).
type DETH []byte

const (
	DETHOffQKey  = 0
	DETHOffSrcQP = 4 // 32-bit word whose low 24 bits are the source QP
)

func (b DETH) IsValid() bool     { return len(b) >= DETHLen }
func (b DETH) QKey() uint32      { return be.Uint32(b[DETHOffQKey:]) }
func (b DETH) SrcQP() uint32     { return be.Uint32(b[DETHOffSrcQP:]) & QPNMask }
func (b DETH) SetQKey(v uint32)  { be.PutUint32(b[DETHOffQKey:], v) }
func (b DETH) SetSrcQP(v uint32) { put24(b[5:], v) }

// FETH is a view of the 4-byte Flush Extended Transport Header (IBTA 1.5):
// bits 5-4 of the last byte are the selectivity level, bits 3-0 the
// placement type.
type FETH []byte

func (b FETH) IsValid() bool               { return len(b) >= FETHLen }
func (b FETH) PlacementType() uint8        { return b[3] & 0x0F }
func (b FETH) SelectivityLevel() uint8     { return b[3] >> 4 & 0x03 }
func (b FETH) SetPlacementType(v uint8)    { b[3] = b[3]&^0x0F | v&0x0F }
func (b FETH) SetSelectivityLevel(v uint8) { b[3] = b[3]&^0x30 | (v&3)<<4 }

func setBit(p *byte, m byte, v bool) {
	if v {
		*p |= m
	} else {
		*p &^= m
	}
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
