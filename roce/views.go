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

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[1]&BTHSEMask != 0 }

// MigReq returns the MigReq (APM migration state) bit.
func (b BTH) MigReq() bool { return b[1]&BTHMigMask != 0 }

// PadCnt returns the pad count (0-3).
func (b BTH) PadCnt() int { return int(b[1]&BTHPadMask) >> 4 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[1] & BTHTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return be.Uint16(b[2:]) }

// FECN returns the forward ECN bit.
func (b BTH) FECN() bool { return b[4]&BTHFECNMask != 0 }

// BECN returns the backward ECN bit.
func (b BTH) BECN() bool { return b[4]&BTHBECNMask != 0 }

// Resv6a returns the reserved bits 5-0 of byte 4.
func (b BTH) Resv6a() uint8 { return b[4] & BTHResv6aMask }

// DestQP returns the 24-bit destination QP.
func (b BTH) DestQP() uint32 { return be.Uint32(b[4:]) & QPNMask }

// AckReq returns the acknowledge-request bit.
func (b BTH) AckReq() bool { return b[8]&BTHAckMask != 0 }

// Resv7 returns the reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[8] & BTHResv7Mask }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() PSN { return PSN(be.Uint32(b[8:]) & PSNMask) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SetSE sets the solicited event bit.
func (b BTH) SetSE(v bool) { setBit(&b[1], BTHSEMask, v) }

// SetMigReq sets the MigReq (APM migration state) bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[1], BTHMigMask, v) }

// SetPadCnt sets the pad count (0-3).
func (b BTH) SetPadCnt(n int) { b[1] = b[1]&^BTHPadMask | byte(n&3)<<4 }

// SetTVer sets the transport header version.
func (b BTH) SetTVer(v uint8) { b[1] = b[1]&^BTHTVerMask | v&BTHTVerMask }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { be.PutUint16(b[2:], k) }

// SetFECN sets the forward ECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[4], BTHFECNMask, v) }

// SetBECN sets the backward ECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[4], BTHBECNMask, v) }

// SetDestQP sets the 24-bit destination QP.
func (b BTH) SetDestQP(qp uint32) { put24(b[5:], qp) }

// SetAckReq sets the acknowledge-request bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[8], BTHAckMask, v) }

// SetPSN sets the 24-bit packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)) }

// RETH is a view of the 16-byte RDMA Extended Transport Header:
// VA u64 | R_Key u32 | DMA Length u32 (IBTA Vol.1 §9.3.3).
type RETH []byte

const (
	RETHOffVA     = 0
	RETHOffRKey   = 8
	RETHOffDMALen = 12
)

// IsValid reports whether b is long enough for a RETH.
func (b RETH) IsValid() bool { return len(b) >= RETHLen }

// VA returns the virtual address.
func (b RETH) VA() uint64 { return be.Uint64(b[RETHOffVA:]) }

// RKey returns the R_Key.
func (b RETH) RKey() uint32 { return be.Uint32(b[RETHOffRKey:]) }

// DMALen returns the DMA length.
func (b RETH) DMALen() uint32 { return be.Uint32(b[RETHOffDMALen:]) }

// SetVA sets the virtual address.
func (b RETH) SetVA(v uint64) { be.PutUint64(b[RETHOffVA:], v) }

// SetRKey sets the R_Key.
func (b RETH) SetRKey(v uint32) { be.PutUint32(b[RETHOffRKey:], v) }

// SetDMALen sets the DMA length.
func (b RETH) SetDMALen(v uint32) { be.PutUint32(b[RETHOffDMALen:], v) }

// AETH is a view of the 4-byte ACK Extended Transport Header:
// Syndrome u8 | MSN u24 (IBTA Vol.1 §9.3.5).
type AETH []byte

const (
	AETHOffSyndrome = 0
	AETHOffMSN      = 0 // 32-bit word whose low 24 bits are the MSN
	MSNMask         = 0x00FFFFFF
)

// IsValid reports whether b is long enough for a AETH.
func (b AETH) IsValid() bool { return len(b) >= AETHLen }

// Syndrome returns the syndrome.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() MSN { return MSN(be.Uint32(b) & MSNMask) }

// SetSyndrome sets the syndrome.
func (b AETH) SetSyndrome(s Syndrome) { b[0] = byte(s) }

// SetMSN sets the 24-bit message sequence number.
func (b AETH) SetMSN(m MSN) { put24(b[1:], uint32(m)) }

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

// IsValid reports whether b is long enough for a AtomicETH.
func (b AtomicETH) IsValid() bool { return len(b) >= AtomicETHLen }

// VA returns the virtual address.
func (b AtomicETH) VA() uint64 { return be.Uint64(b[AtomicETHOffVA:]) }

// RKey returns the R_Key.
func (b AtomicETH) RKey() uint32 { return be.Uint32(b[AtomicETHOffRKey:]) }

// SwapAdd returns the swap (or add) data.
func (b AtomicETH) SwapAdd() uint64 { return be.Uint64(b[AtomicETHOffSwapAdd:]) }

// Compare returns the compare data.
func (b AtomicETH) Compare() uint64 { return be.Uint64(b[AtomicETHOffCompare:]) }

// SetVA sets the virtual address.
func (b AtomicETH) SetVA(v uint64) { be.PutUint64(b[AtomicETHOffVA:], v) }

// SetRKey sets the R_Key.
func (b AtomicETH) SetRKey(v uint32) { be.PutUint32(b[AtomicETHOffRKey:], v) }

// SetSwapAdd sets the swap (or add) data.
func (b AtomicETH) SetSwapAdd(v uint64) { be.PutUint64(b[AtomicETHOffSwapAdd:], v) }

// SetCompare sets the compare data.
func (b AtomicETH) SetCompare(v uint64) { be.PutUint64(b[AtomicETHOffCompare:], v) }

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header:
// the original remote data (IBTA Vol.1 §9.3.6).
type AtomicAckETH []byte

// IsValid reports whether b is long enough for a AtomicAckETH.
func (b AtomicAckETH) IsValid() bool { return len(b) >= AtomicAckETHLen }

// OrigData returns the original remote data.
func (b AtomicAckETH) OrigData() uint64 { return be.Uint64(b) }

// SetOrigData sets the original remote data.
func (b AtomicAckETH) SetOrigData(v uint64) { be.PutUint64(b, v) }

// ImmDt is a view of the 4-byte Immediate Data header. The value is opaque;
// Imm returns it as a big-endian integer (the verbs API keeps it in network
// order, so put it back with SetImm to preserve the bytes).
type ImmDt []byte

// IsValid reports whether b is long enough for a ImmDt.
func (b ImmDt) IsValid() bool { return len(b) >= ImmDtLen }

// Imm returns the immediate data.
func (b ImmDt) Imm() uint32 { return be.Uint32(b) }

// SetImm sets the immediate data.
func (b ImmDt) SetImm(v uint32) { be.PutUint32(b, v) }

// IETH is a view of the 4-byte Invalidate Extended Transport Header: the
// R_Key to invalidate (IBTA Vol.1 §9.3.8).
type IETH []byte

// IsValid reports whether b is long enough for a IETH.
func (b IETH) IsValid() bool { return len(b) >= IETHLen }

// RKey returns the R_Key.
func (b IETH) RKey() uint32 { return be.Uint32(b) }

// SetRKey sets the R_Key.
func (b IETH) SetRKey(v uint32) { be.PutUint32(b, v) }

// DETH is a view of the 8-byte Datagram Extended Transport Header:
// Q_Key u32 | Resv8 | Source QP u24 (IBTA Vol.1 §9.3.2).
type DETH []byte

const (
	DETHOffQKey  = 0
	DETHOffSrcQP = 4 // 32-bit word whose low 24 bits are the source QP
)

// IsValid reports whether b is long enough for a DETH.
func (b DETH) IsValid() bool { return len(b) >= DETHLen }

// QKey returns the Q_Key.
func (b DETH) QKey() uint32 { return be.Uint32(b[DETHOffQKey:]) }

// SrcQP returns the 24-bit source QP.
func (b DETH) SrcQP() uint32 { return be.Uint32(b[DETHOffSrcQP:]) & QPNMask }

// SetQKey sets the Q_Key.
func (b DETH) SetQKey(v uint32) { be.PutUint32(b[DETHOffQKey:], v) }

// SetSrcQP sets the 24-bit source QP.
func (b DETH) SetSrcQP(v uint32) { put24(b[5:], v) }

// FETH is a view of the 4-byte Flush Extended Transport Header (IBTA 1.5):
// bits 5-4 of the last byte are the selectivity level, bits 3-0 the
// placement type.
type FETH []byte

// IsValid reports whether b is long enough for a FETH.
func (b FETH) IsValid() bool { return len(b) >= FETHLen }

// PlacementType returns the placement type.
func (b FETH) PlacementType() uint8 { return b[3] & 0x0F }

// SelectivityLevel returns the selectivity level.
func (b FETH) SelectivityLevel() uint8 { return b[3] >> 4 & 0x03 }

// SetPlacementType sets the placement type.
func (b FETH) SetPlacementType(v uint8) { b[3] = b[3]&^0x0F | v&0x0F }

// SetSelectivityLevel sets the selectivity level.
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
