package roce

import "strconv"

// Opcode is the BTH OpCode: a transport service in bits 7-5 and an operation
// in bits 4-0 (IBTA Vol.1 §9.2, include/rdma/ib_pack.h).
type Opcode uint8

// Service is the transport service encoded in bits 7-5 of an Opcode.
type Service uint8

const (
	ServiceRC  Service = 0 // reliable connection, opcodes 0x00-0x1F
	ServiceUC  Service = 1 // unreliable connection, 0x20-0x3F
	ServiceRD  Service = 2 // reliable datagram, 0x40-0x5F (not supported)
	ServiceUD  Service = 3 // unreliable datagram, 0x60-0x7F
	ServiceCNP Service = 4 // congestion notification, 0x80-0x9F
	ServiceMfr Service = 7 // manufacturer specific, 0xE0-0xFF
)

var serviceNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "5", "6", "MFR"}

func (s Service) String() string { return serviceNames[s&7] }

// Operation codes (low 5 bits).
const (
	opSendFirst      = 0x00
	opSendMiddle     = 0x01
	opSendLast       = 0x02
	opSendLastImm    = 0x03
	opSendOnly       = 0x04
	opSendOnlyImm    = 0x05
	opWriteFirst     = 0x06
	opWriteMiddle    = 0x07
	opWriteLast      = 0x08
	opWriteLastImm   = 0x09
	opWriteOnly      = 0x0a
	opWriteOnlyImm   = 0x0b
	opReadRequest    = 0x0c
	opReadRespFirst  = 0x0d
	opReadRespMiddle = 0x0e
	opReadRespLast   = 0x0f
	opReadRespOnly   = 0x10
	opAck            = 0x11
	opAtomicAck      = 0x12
	opCompareSwap    = 0x13
	opFetchAdd       = 0x14
	opSendLastInv    = 0x16
	opSendOnlyInv    = 0x17
	opFlush          = 0x1c
	opAtomicWrite    = 0x1d
)

// Opcodes (include/rdma/ib_pack.h; FLUSH and ATOMIC_WRITE from IBTA 1.5).
const (
	RCSendFirst          Opcode = 0x00 | opSendFirst
	RCSendMiddle         Opcode = 0x00 | opSendMiddle
	RCSendLast           Opcode = 0x00 | opSendLast
	RCSendLastImm        Opcode = 0x00 | opSendLastImm
	RCSendOnly           Opcode = 0x00 | opSendOnly
	RCSendOnlyImm        Opcode = 0x00 | opSendOnlyImm
	RCWriteFirst         Opcode = 0x00 | opWriteFirst
	RCWriteMiddle        Opcode = 0x00 | opWriteMiddle
	RCWriteLast          Opcode = 0x00 | opWriteLast
	RCWriteLastImm       Opcode = 0x00 | opWriteLastImm
	RCWriteOnly          Opcode = 0x00 | opWriteOnly
	RCWriteOnlyImm       Opcode = 0x00 | opWriteOnlyImm
	RCReadRequest        Opcode = 0x00 | opReadRequest
	RCReadResponseFirst  Opcode = 0x00 | opReadRespFirst
	RCReadResponseMiddle Opcode = 0x00 | opReadRespMiddle
	RCReadResponseLast   Opcode = 0x00 | opReadRespLast
	RCReadResponseOnly   Opcode = 0x00 | opReadRespOnly
	RCAck                Opcode = 0x00 | opAck
	RCAtomicAck          Opcode = 0x00 | opAtomicAck
	RCCompareSwap        Opcode = 0x00 | opCompareSwap
	RCFetchAdd           Opcode = 0x00 | opFetchAdd
	RCSendLastInv        Opcode = 0x00 | opSendLastInv
	RCSendOnlyInv        Opcode = 0x00 | opSendOnlyInv
	RCFlush              Opcode = 0x00 | opFlush
	RCAtomicWrite        Opcode = 0x00 | opAtomicWrite

	UCSendFirst    Opcode = 0x20 | opSendFirst
	UCSendMiddle   Opcode = 0x20 | opSendMiddle
	UCSendLast     Opcode = 0x20 | opSendLast
	UCSendLastImm  Opcode = 0x20 | opSendLastImm
	UCSendOnly     Opcode = 0x20 | opSendOnly
	UCSendOnlyImm  Opcode = 0x20 | opSendOnlyImm
	UCWriteFirst   Opcode = 0x20 | opWriteFirst
	UCWriteMiddle  Opcode = 0x20 | opWriteMiddle
	UCWriteLast    Opcode = 0x20 | opWriteLast
	UCWriteLastImm Opcode = 0x20 | opWriteLastImm
	UCWriteOnly    Opcode = 0x20 | opWriteOnly
	UCWriteOnlyImm Opcode = 0x20 | opWriteOnlyImm

	UDSendOnly    Opcode = 0x60 | opSendOnly
	UDSendOnlyImm Opcode = 0x60 | opSendOnlyImm

	CNP Opcode = 0x81 // RoCEv2 congestion notification packet (Annex A17.9.3)
)

// HeaderSet is a set of extended transport headers. The wire order of the
// headers present in a packet is the order of the bits below
// (RDETH, DETH, FETH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH).
type HeaderSet uint16

const (
	HasRDETH HeaderSet = 1 << iota
	HasDETH
	HasFETH
	HasRETH
	HasAETH
	HasAtomicETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	numETH = iota
)

var ethLens = [numETH]uint8{RDETHLen, DETHLen, FETHLen, RETHLen, AETHLen, AtomicETHLen, AtomicAckETHLen, ImmDtLen, IETHLen}
var ethNames = [numETH]string{"RDETH", "DETH", "FETH", "RETH", "AETH", "AtomicETH", "AtomicAckETH", "ImmDt", "IETH"}

// String lists the headers in wire order, e.g. "RETH+ImmDt".
func (h HeaderSet) String() string {
	s := ""
	for i := 0; i < numETH; i++ {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += ethNames[i]
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// OpFlags describe what an opcode means (the rxe_opcode.c masks, in effect).
type OpFlags uint32

const (
	FlagFirst         OpFlags = 1 << iota // first packet of a multi-packet message
	FlagMiddle                            // middle packet
	FlagLast                              // last packet
	FlagOnly                              // single-packet message
	FlagPayload                           // carries a payload (possibly empty)
	FlagRequest                           // sent by the requester
	FlagResponse                          // sent by the responder (ACK, read response, atomic ACK)
	FlagSend                              // SEND family (consumes a receive WQE)
	FlagWrite                             // RDMA WRITE family
	FlagRead                              // RDMA READ request
	FlagReadResponse                      // RDMA READ response
	FlagAtomic                            // COMPARE_SWAP / FETCH_ADD
	FlagAck                               // ACKNOWLEDGE / ATOMIC_ACKNOWLEDGE
	FlagImm                               // carries immediate data
	FlagInv                               // carries an R_Key to invalidate
	FlagFlush                             // FLUSH
	FlagAtomicWrite                       // ATOMIC_WRITE (8-byte payload)
	FlagCNP                               // congestion notification
	FlagStartsMessage = FlagFirst | FlagOnly
	FlagEndsMessage   = FlagLast | FlagOnly
)

// OpInfo describes one opcode: its name, the extended headers that follow the
// BTH and where they start, and its role.
type OpInfo struct {
	Name    string    // e.g. "RC_SEND_ONLY"
	Valid   bool      // false for reserved/unsupported opcodes
	Headers HeaderSet // extended headers after the BTH
	HdrLen  int       // BTH + extended headers
	Flags   OpFlags
	// FixedPayload is the exact payload length the opcode requires (ATOMIC_WRITE 8,
	// CNP 16 reserved bytes), or -1 when any length is allowed. Opcodes
	// without FlagPayload require 0.
	FixedPayload int
	off          [numETH]uint8 // byte offset of each present header from the BTH start
}

// Offset returns the byte offset of header h (a single bit) from the start
// of the BTH, or -1 if the opcode does not carry it.
func (i *OpInfo) Offset(h HeaderSet) int {
	if i.Headers&h == 0 || h&(h-1) != 0 {
		return -1
	}
	for n := 0; n < numETH; n++ {
		if h == 1<<n {
			return int(i.off[n])
		}
	}
	return -1
}

var opTable [256]OpInfo

func init() {
	type ent struct {
		op    uint8
		name  string
		h     HeaderSet
		flags OpFlags
	}
	const (
		req  = FlagRequest
		pay  = FlagPayload
		resp = FlagResponse
	)
	ops := []ent{
		{opSendFirst, "SEND_FIRST", 0, req | pay | FlagSend | FlagFirst},
		{opSendMiddle, "SEND_MIDDLE", 0, req | pay | FlagSend | FlagMiddle},
		{opSendLast, "SEND_LAST", 0, req | pay | FlagSend | FlagLast},
		{opSendLastImm, "SEND_LAST_WITH_IMMEDIATE", HasImmDt, req | pay | FlagSend | FlagLast | FlagImm},
		{opSendOnly, "SEND_ONLY", 0, req | pay | FlagSend | FlagOnly},
		{opSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt, req | pay | FlagSend | FlagOnly | FlagImm},
		{opWriteFirst, "RDMA_WRITE_FIRST", HasRETH, req | pay | FlagWrite | FlagFirst},
		{opWriteMiddle, "RDMA_WRITE_MIDDLE", 0, req | pay | FlagWrite | FlagMiddle},
		{opWriteLast, "RDMA_WRITE_LAST", 0, req | pay | FlagWrite | FlagLast},
		{opWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, req | pay | FlagWrite | FlagLast | FlagImm},
		{opWriteOnly, "RDMA_WRITE_ONLY", HasRETH, req | pay | FlagWrite | FlagOnly},
		{opWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, req | pay | FlagWrite | FlagOnly | FlagImm},
		{opReadRequest, "RDMA_READ_REQUEST", HasRETH, req | FlagRead | FlagOnly},
		{opReadRespFirst, "RDMA_READ_RESPONSE_FIRST", HasAETH, resp | pay | FlagReadResponse | FlagFirst},
		{opReadRespMiddle, "RDMA_READ_RESPONSE_MIDDLE", 0, resp | pay | FlagReadResponse | FlagMiddle},
		{opReadRespLast, "RDMA_READ_RESPONSE_LAST", HasAETH, resp | pay | FlagReadResponse | FlagLast},
		{opReadRespOnly, "RDMA_READ_RESPONSE_ONLY", HasAETH, resp | pay | FlagReadResponse | FlagOnly},
		{opAck, "ACKNOWLEDGE", HasAETH, resp | FlagAck | FlagOnly},
		{opAtomicAck, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, resp | FlagAck | FlagAtomic | FlagOnly},
		{opCompareSwap, "COMPARE_SWAP", HasAtomicETH, req | FlagAtomic | FlagOnly},
		{opFetchAdd, "FETCH_ADD", HasAtomicETH, req | FlagAtomic | FlagOnly},
		{opSendLastInv, "SEND_LAST_WITH_INVALIDATE", HasIETH, req | pay | FlagSend | FlagLast | FlagInv},
		{opSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", HasIETH, req | pay | FlagSend | FlagOnly | FlagInv},
		{opFlush, "FLUSH", HasFETH | HasRETH, req | FlagFlush | FlagOnly},
		{opAtomicWrite, "ATOMIC_WRITE", HasRETH, req | pay | FlagAtomicWrite | FlagOnly},
	}
	add := func(op Opcode, name string, h HeaderSet, f OpFlags) {
		e := &opTable[op]
		*e = OpInfo{Name: name, Valid: true, Headers: h, Flags: f, FixedPayload: -1}
		off := BTHLen
		for n := 0; n < numETH; n++ {
			if h&(1<<n) != 0 {
				e.off[n] = uint8(off)
				off += int(ethLens[n])
			}
		}
		e.HdrLen = off
		switch {
		case f&FlagPayload == 0:
			e.FixedPayload = 0
		case f&FlagAtomicWrite != 0:
			e.FixedPayload = 8
		}
	}
	for _, o := range ops {
		add(Opcode(o.op), "RC_"+o.name, o.h, o.flags)
		// UC has only the SEND and RDMA WRITE operations (0x00-0x0b).
		if o.op <= opWriteOnlyImm {
			add(Opcode(0x20|o.op), "UC_"+o.name, o.h, o.flags)
		}
		if o.op == opSendOnly || o.op == opSendOnlyImm {
			add(Opcode(0x60|o.op), "UD_"+o.name, HasDETH|o.h, o.flags)
		}
	}
	add(CNP, "CNP", 0, FlagCNP|FlagPayload)
	opTable[CNP].FixedPayload = CNPReservedLen
	for i := range opTable {
		if !opTable[i].Valid {
			// Invalid opcodes: BTH only, so Header.Append still writes a BTH.
			opTable[i] = OpInfo{Name: "OPCODE_0x" + strconv.FormatUint(uint64(i), 16), HdrLen: BTHLen, FixedPayload: -1}
		}
	}
}

// Info returns the table entry of o. The pointer refers to a shared,
// read-only table; do not modify it.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// String returns the opcode name, e.g. "RC_RDMA_WRITE_FIRST".
func (o Opcode) String() string { return opTable[o].Name }

// Valid reports whether o is a supported RC, UC, UD or CNP opcode.
func (o Opcode) Valid() bool { return opTable[o].Valid }

// Service returns the transport service of o.
func (o Opcode) Service() Service { return Service(o >> 5) }

// Headers returns the extended headers that follow the BTH.
func (o Opcode) Headers() HeaderSet { return opTable[o].Headers }

// HeaderLen returns the length of the BTH plus the extended headers.
func (o Opcode) HeaderLen() int { return opTable[o].HdrLen }

// Has reports whether every flag in f is set for o.
func (o Opcode) Has(f OpFlags) bool { return opTable[o].Flags&f == f }

// HasAny reports whether any flag in f is set for o.
func (o Opcode) HasAny(f OpFlags) bool { return opTable[o].Flags&f != 0 }

// HasPayload reports whether o carries a payload.
func (o Opcode) HasPayload() bool { return opTable[o].Flags&FlagPayload != 0 }

// IsFirst, IsMiddle, IsLast and IsOnly give the packet's place in its message.
func (o Opcode) IsFirst() bool  { return opTable[o].Flags&FlagFirst != 0 }
func (o Opcode) IsMiddle() bool { return opTable[o].Flags&FlagMiddle != 0 }
func (o Opcode) IsLast() bool   { return opTable[o].Flags&FlagLast != 0 }
func (o Opcode) IsOnly() bool   { return opTable[o].Flags&FlagOnly != 0 }

// IsRequest reports whether o is sent by a requester; IsResponse whether it
// is sent by a responder.
func (o Opcode) IsRequest() bool  { return opTable[o].Flags&FlagRequest != 0 }
func (o Opcode) IsResponse() bool { return opTable[o].Flags&FlagResponse != 0 }

// RequiresAck reports whether the responder must acknowledge o: every RC
// request packet is covered by an ACK (explicit or coalesced), and a packet
// with BTH.AckReq set must be answered promptly.
func (o Opcode) RequiresAck() bool {
	return o.Service() == ServiceRC && opTable[o].Flags&FlagRequest != 0
}

// ExpectsResponseData reports whether the responder answers o with data
// (RDMA READ responses or an ATOMIC ACKNOWLEDGE) rather than a plain ACK.
func (o Opcode) ExpectsResponseData() bool {
	f := opTable[o].Flags
	return o.Service() == ServiceRC && f&FlagRequest != 0 && f&(FlagRead|FlagAtomic) != 0
}

// Operation returns o with the service bits cleared and the service
// replaced by s (e.g. RCSendOnly.WithService(ServiceUD) == UDSendOnly).
func (o Opcode) WithService(s Service) Opcode { return Opcode(s)<<5 | o&0x1F }
