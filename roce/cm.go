package roce

import (
	"net/netip"
	"strconv"
)

// IB CM MADs (IBTA Vol.1 chapter 12, include/rdma/ibta_vol1_c12.h): the
// 256-byte management datagram that RDMA-CM exchanges over QP1 (UD SEND_ONLY,
// DETH Q_Key GSIQKey, source QP 1) to set up RC connections.
//
// A MAD is a 24-byte MADHeader followed by 232 bytes of message data. Each
// CM message type has Parse…(data) taking the data part, Append(b) writing
// exactly CMDataLen bytes, and Len(). Reserved fields are dropped on parse
// and written as zero.

// MAD sizes.
const (
	MADLen       = 256
	MADHeaderLen = 24
	CMDataLen    = MADLen - MADHeaderLen // 232
)

// MAD header values used by the CM.
const (
	MADBaseVersion   = 1
	MgmtClassCM      = 0x07
	CMClassVersion   = 2
	MADMethodGet     = 0x01
	MADMethodSet     = 0x02
	MADMethodSend    = 0x03
	MADMethodTrap    = 0x05
	MADMethodGetResp = 0x81
)

// AttrID is the MAD AttributeID; for the CM class it names the message.
type AttrID uint16

const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ",
	AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return "ATTR_0x" + strconv.FormatUint(uint64(a), 16)
}

// MADHeader is the MAD common header (ib_mad.h struct ib_mad_hdr).
type MADHeader struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TransactionID uint64
	AttrID        AttrID
	Reserved      uint16
	AttrModifier  uint32
}

// NewCMHeader returns the header the CM sends: base version 1, class CM,
// class version 2, method SEND, the given transaction ID and attribute.
func NewCMHeader(tid uint64, attr AttrID) MADHeader {
	return MADHeader{BaseVersion: MADBaseVersion, MgmtClass: MgmtClassCM, ClassVersion: CMClassVersion,
		Method: MADMethodSend, TransactionID: tid, AttrID: attr}
}

// ParseMADHeader decodes the first 24 bytes of b.
func ParseMADHeader(b []byte) (MADHeader, error) {
	if len(b) < MADHeaderLen {
		return MADHeader{}, ErrShort
	}
	return MADHeader{
		BaseVersion: b[0], MgmtClass: b[1], ClassVersion: b[2], Method: b[3],
		Status: be.Uint16(b[4:]), ClassSpecific: be.Uint16(b[6:]), TransactionID: be.Uint64(b[8:]),
		AttrID: AttrID(be.Uint16(b[16:])), Reserved: be.Uint16(b[18:]), AttrModifier: be.Uint32(b[20:]),
	}, nil
}

// Len returns MADHeaderLen.
func (h MADHeader) Len() int { return MADHeaderLen }

// Append appends the 24-byte header.
func (h MADHeader) Append(b []byte) []byte {
	b = append(b, h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method)
	b = be.AppendUint16(b, h.Status)
	b = be.AppendUint16(b, h.ClassSpecific)
	b = be.AppendUint64(b, h.TransactionID)
	b = be.AppendUint16(b, uint16(h.AttrID))
	b = be.AppendUint16(b, h.Reserved)
	return be.AppendUint32(b, h.AttrModifier)
}

// IsCM reports whether h is a CM-class MAD of base version 1.
func (h MADHeader) IsCM() bool { return h.BaseVersion == MADBaseVersion && h.MgmtClass == MgmtClassCM }

// ParseMAD splits a 256-byte MAD (e.g. the payload of a QP1 UD packet) into
// its header and its 232 data bytes (a view). Bytes beyond 256 are ignored.
func ParseMAD(b []byte) (MADHeader, []byte, error) {
	if len(b) < MADLen {
		return MADHeader{}, nil, ErrShort
	}
	h, _ := ParseMADHeader(b)
	return h, b[MADHeaderLen:MADLen:MADLen], nil
}

// ---- bit-field helpers (big-endian, MSB-first as in ibta_vol1_c12.h) ----

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func app24(b []byte, v uint32) []byte { return append(b, byte(v>>16), byte(v>>8), byte(v)) }

func b2u8(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

func checkCM(data []byte) error {
	if len(data) < CMDataLen {
		return ErrShort
	}
	return nil
}

// CMPath is a REQ primary or alternate path (Table 106, bytes 52-95 and 96-139).
type CMPath struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5-bit exponent
}

// LocalAddr and RemoteAddr return the GIDs as IP addresses (RoCEv2 GIDs are
// IPv6 or IPv4-mapped IPv6 addresses); Unmap gives the IPv4 form.
func (p *CMPath) LocalAddr() netip.Addr  { return netip.AddrFrom16(p.LocalGID) }
func (p *CMPath) RemoteAddr() netip.Addr { return netip.AddrFrom16(p.RemoteGID) }

// GIDFromAddr returns the RoCEv2 GID of an address: IPv4 addresses are
// IPv4-mapped (::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) [16]byte { return a.As16() }

func parsePath(b []byte) CMPath {
	var p CMPath
	p.LocalLID = be.Uint16(b[0:])
	p.RemoteLID = be.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = be.Uint32(b[36:]) >> 12
	p.PacketRate = b[39] & 0x3F
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
	return p
}

// appendPath writes 44 bytes; extra is ORed into the low 3 bits of the last
// byte (the alternate path's SAP-supported bit lives there).
func (p *CMPath) append(b []byte, extra uint8) []byte {
	b = be.AppendUint16(b, p.LocalLID)
	b = be.AppendUint16(b, p.RemoteLID)
	b = append(b, p.LocalGID[:]...)
	b = append(b, p.RemoteGID[:]...)
	b = be.AppendUint32(b, (p.FlowLabel&0xFFFFF)<<12|uint32(p.PacketRate&0x3F))
	b = append(b, p.TrafficClass, p.HopLimit, p.SL<<4|b2u8(p.SubnetLocal)<<3)
	return append(b, p.LocalACKTimeout<<3|extra&7)
}

// Transport service types in a REQ.
const (
	CMTransportRC  = 0
	CMTransportUC  = 1
	CMTransportRD  = 2
	CMTransportXRC = 3 // with ExtTransportType 1
)

// REQ is the CM connection request (Table 106).
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32
	ResponderResources      uint8
	LocalEECN               uint32
	InitiatorDepth          uint8
	RemoteEECN              uint32
	RemoteCMResponseTimeout uint8 // 5-bit exponent
	TransportType           uint8 // 2 bits, CMTransport*
	EndToEndFlowControl     bool
	StartingPSN             PSN
	LocalCMResponseTimeout  uint8 // 5-bit exponent
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 MTU
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits, 7 = infinite
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	Primary                 CMPath
	Alternate               CMPath
	SAPSupported            bool
	PrivateData             [92]byte
}

// ParseREQ decodes REQ message data (the 232 bytes after the MAD header).
func ParseREQ(d []byte) (REQ, error) {
	var m REQ
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID = be.Uint32(d[0:])
	m.ServiceID = be.Uint64(d[8:])
	m.LocalCAGUID = be.Uint64(d[16:])
	m.LocalQKey = be.Uint32(d[28:])
	m.LocalQPN = get24(d[32:])
	m.ResponderResources = d[35]
	m.LocalEECN = get24(d[36:])
	m.InitiatorDepth = d[39]
	m.RemoteEECN = get24(d[40:])
	m.RemoteCMResponseTimeout = d[43] >> 3
	m.TransportType = d[43] >> 1 & 3
	m.EndToEndFlowControl = d[43]&1 != 0
	m.StartingPSN = PSN(get24(d[44:]))
	m.LocalCMResponseTimeout = d[47] >> 3
	m.RetryCount = d[47] & 7
	m.PKey = be.Uint16(d[48:])
	m.PathMTU = MTU(d[50] >> 4)
	m.RDCExists = d[50]&0x08 != 0
	m.RNRRetryCount = d[50] & 7
	m.MaxCMRetries = d[51] >> 4
	m.SRQ = d[51]&0x08 != 0
	m.ExtTransportType = d[51] & 7
	m.Primary = parsePath(d[52:96])
	m.Alternate = parsePath(d[96:140])
	m.SAPSupported = d[139]&0x04 != 0
	copy(m.PrivateData[:], d[140:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *REQ) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a REQ.
func (m *REQ) AttrID() AttrID { return AttrREQ }

// Append appends the 232 bytes of REQ message data.
func (m *REQ) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, 0)
	b = be.AppendUint64(b, m.ServiceID)
	b = be.AppendUint64(b, m.LocalCAGUID)
	b = be.AppendUint32(b, 0)
	b = be.AppendUint32(b, m.LocalQKey)
	b = app24(b, m.LocalQPN)
	b = append(b, m.ResponderResources)
	b = app24(b, m.LocalEECN)
	b = append(b, m.InitiatorDepth)
	b = app24(b, m.RemoteEECN)
	b = append(b, m.RemoteCMResponseTimeout<<3|(m.TransportType&3)<<1|b2u8(m.EndToEndFlowControl))
	b = app24(b, uint32(m.StartingPSN))
	b = append(b, m.LocalCMResponseTimeout<<3|m.RetryCount&7)
	b = be.AppendUint16(b, m.PKey)
	b = append(b, uint8(m.PathMTU)<<4|b2u8(m.RDCExists)<<3|m.RNRRetryCount&7)
	b = append(b, m.MaxCMRetries<<4|b2u8(m.SRQ)<<3|m.ExtTransportType&7)
	b = m.Primary.append(b, 0)
	b = m.Alternate.append(b, b2u8(m.SAPSupported)<<2)
	return append(b, m.PrivateData[:]...)
}

// REP is the CM connection reply (Table 110).
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32
	LocalEECN           uint32
	StartingPSN         PSN
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5-bit exponent
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [196]byte
}

// ParseREP decodes REP message data.
func ParseREP(d []byte) (REP, error) {
	var m REP
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID = be.Uint32(d[0:])
	m.RemoteCommID = be.Uint32(d[4:])
	m.LocalQKey = be.Uint32(d[8:])
	m.LocalQPN = get24(d[12:])
	m.LocalEECN = get24(d[16:])
	m.StartingPSN = PSN(get24(d[20:]))
	m.ResponderResources = d[24]
	m.InitiatorDepth = d[25]
	m.TargetACKDelay = d[26] >> 3
	m.FailoverAccepted = d[26] >> 1 & 3
	m.EndToEndFlowControl = d[26]&1 != 0
	m.RNRRetryCount = d[27] >> 5
	m.SRQ = d[27]&0x10 != 0
	m.LocalCAGUID = be.Uint64(d[28:])
	copy(m.PrivateData[:], d[36:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *REP) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a REP.
func (m *REP) AttrID() AttrID { return AttrREP }

// Append appends the 232 bytes of REP message data.
func (m *REP) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	b = be.AppendUint32(b, m.LocalQKey)
	b = app24(b, m.LocalQPN)
	b = append(b, 0)
	b = app24(b, m.LocalEECN)
	b = append(b, 0)
	b = app24(b, uint32(m.StartingPSN))
	b = append(b, 0, m.ResponderResources, m.InitiatorDepth,
		m.TargetACKDelay<<3|(m.FailoverAccepted&3)<<1|b2u8(m.EndToEndFlowControl),
		m.RNRRetryCount<<5|b2u8(m.SRQ)<<4)
	b = be.AppendUint64(b, m.LocalCAGUID)
	return append(b, m.PrivateData[:]...)
}

// RTU is the CM ready-to-use message (Table 111).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [224]byte
}

// ParseRTU decodes RTU message data.
func ParseRTU(d []byte) (RTU, error) {
	var m RTU
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(d[0:]), be.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *RTU) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a RTU.
func (m *RTU) AttrID() AttrID { return AttrRTU }

// Append appends the 232 bytes of RTU message data.
func (m *RTU) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	return append(b, m.PrivateData[:]...)
}

// CMMsgType says which message a REJ rejects or an MRA acknowledges (2 bits).
type CMMsgType uint8

const (
	CMMsgREQ   CMMsgType = 0
	CMMsgREP   CMMsgType = 1
	CMMsgOther CMMsgType = 2 // REJ: other; MRA: LAP
)

// RejectReason is the REJ reason code (ib_cm.h enum ib_cm_rej_reason).
type RejectReason uint16

const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejNames = [...]string{
	1: "NO_QP", 2: "NO_EEC", 3: "NO_RESOURCES", 4: "TIMEOUT", 5: "UNSUPPORTED",
	6: "INVALID_COMM_ID", 7: "INVALID_COMM_INSTANCE", 8: "INVALID_SERVICE_ID",
	9: "INVALID_TRANSPORT_TYPE", 10: "STALE_CONN", 11: "RDC_NOT_EXIST", 12: "INVALID_GID",
	13: "INVALID_LID", 14: "INVALID_SL", 15: "INVALID_TRAFFIC_CLASS", 16: "INVALID_HOP_LIMIT",
	17: "INVALID_PACKET_RATE", 18: "INVALID_ALT_GID", 19: "INVALID_ALT_LID", 20: "INVALID_ALT_SL",
	21: "INVALID_ALT_TRAFFIC_CLASS", 22: "INVALID_ALT_HOP_LIMIT", 23: "INVALID_ALT_PACKET_RATE",
	24: "PORT_CM_REDIRECT", 25: "PORT_REDIRECT", 26: "INVALID_MTU",
	27: "INSUFFICIENT_RESP_RESOURCES", 28: "CONSUMER_DEFINED", 29: "INVALID_RNR_RETRY",
	30: "DUPLICATE_LOCAL_COMM_ID", 31: "INVALID_CLASS_VERSION", 32: "INVALID_FLOW_LABEL",
	33: "INVALID_ALT_FLOW_LABEL", 35: "VENDOR_OPTION_NOT_SUPPORTED",
}

func (r RejectReason) String() string {
	if int(r) < len(rejNames) && rejNames[r] != "" {
		return rejNames[r]
	}
	return "REJ_REASON_" + strconv.Itoa(int(r))
}

// REJ is the CM reject message (Table 108).
type REJ struct {
	LocalCommID   uint32
	RemoteCommID  uint32
	MsgRejected   CMMsgType // 2 bits
	RejectInfoLen uint8     // 7 bits: valid bytes of ARI
	Reason        RejectReason
	ARI           [72]byte // additional reject information
	PrivateData   [148]byte
}

// ParseREJ decodes REJ message data.
func ParseREJ(d []byte) (REJ, error) {
	var m REJ
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(d[0:]), be.Uint32(d[4:])
	m.MsgRejected = CMMsgType(d[8] >> 6)
	m.RejectInfoLen = d[9] >> 1
	m.Reason = RejectReason(be.Uint16(d[10:]))
	copy(m.ARI[:], d[12:84])
	copy(m.PrivateData[:], d[84:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *REJ) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a REJ.
func (m *REJ) AttrID() AttrID { return AttrREJ }

// Append appends the 232 bytes of REJ message data.
func (m *REJ) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	b = append(b, uint8(m.MsgRejected&3)<<6, m.RejectInfoLen<<1)
	b = be.AppendUint16(b, uint16(m.Reason))
	b = append(b, m.ARI[:]...)
	return append(b, m.PrivateData[:]...)
}

// MRA is the CM message-receipt-acknowledgement (Table 107).
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MsgMRAed       CMMsgType // 2 bits
	ServiceTimeout uint8     // 5-bit exponent
	PrivateData    [222]byte
}

// ParseMRA decodes MRA message data.
func ParseMRA(d []byte) (MRA, error) {
	var m MRA
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(d[0:]), be.Uint32(d[4:])
	m.MsgMRAed = CMMsgType(d[8] >> 6)
	m.ServiceTimeout = d[9] >> 3
	copy(m.PrivateData[:], d[10:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *MRA) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a MRA.
func (m *MRA) AttrID() AttrID { return AttrMRA }

// Append appends the 232 bytes of MRA message data.
func (m *MRA) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	b = append(b, uint8(m.MsgMRAed&3)<<6, m.ServiceTimeout<<3)
	return append(b, m.PrivateData[:]...)
}

// DREQ is the CM disconnect request (Table 112).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // remote QPN/EECN, 24 bits
	PrivateData  [220]byte
}

// ParseDREQ decodes DREQ message data.
func ParseDREQ(d []byte) (DREQ, error) {
	var m DREQ
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(d[0:]), be.Uint32(d[4:])
	m.RemoteQPN = get24(d[8:])
	copy(m.PrivateData[:], d[12:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *DREQ) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a DREQ.
func (m *DREQ) AttrID() AttrID { return AttrDREQ }

// Append appends the 232 bytes of DREQ message data.
func (m *DREQ) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	b = app24(b, m.RemoteQPN)
	b = append(b, 0)
	return append(b, m.PrivateData[:]...)
}

// DREP is the CM disconnect reply (Table 113).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [224]byte
}

// ParseDREP decodes DREP message data.
func ParseDREP(d []byte) (DREP, error) {
	var m DREP
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(d[0:]), be.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *DREP) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a DREP.
func (m *DREP) AttrID() AttrID { return AttrDREP }

// Append appends the 232 bytes of DREP message data.
func (m *DREP) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.LocalCommID)
	b = be.AppendUint32(b, m.RemoteCommID)
	return append(b, m.PrivateData[:]...)
}

// SIDRREQ is the service ID resolution request (Table 119), used by RDMA-CM
// for UD QPs.
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [216]byte
}

// ParseSIDRREQ decodes SIDR_REQ message data.
func ParseSIDRREQ(d []byte) (SIDRREQ, error) {
	var m SIDRREQ
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.RequestID, m.PKey, m.ServiceID = be.Uint32(d[0:]), be.Uint16(d[4:]), be.Uint64(d[8:])
	copy(m.PrivateData[:], d[16:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *SIDRREQ) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a SIDRREQ.
func (m *SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

// Append appends the 232 bytes of SIDR_REQ message data.
func (m *SIDRREQ) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.RequestID)
	b = be.AppendUint16(b, m.PKey)
	b = append(b, 0, 0)
	b = be.AppendUint64(b, m.ServiceID)
	return append(b, m.PrivateData[:]...)
}

// SIDR_REP status values.
const (
	SIDRSuccess            = 0
	SIDRUnsupported        = 1
	SIDRReject             = 2
	SIDRNoQP               = 3
	SIDRRedirect           = 4
	SIDRUnsupportedVersion = 5
)

// SIDRREP is the service ID resolution reply (Table 120).
type SIDRREP struct {
	RequestID   uint32
	Status      uint8
	AddInfoLen  uint8
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	AddInfo     [72]byte
	PrivateData [136]byte
}

// ParseSIDRREP decodes SIDR_REP message data.
func ParseSIDRREP(d []byte) (SIDRREP, error) {
	var m SIDRREP
	if err := checkCM(d); err != nil {
		return m, err
	}
	m.RequestID, m.Status, m.AddInfoLen = be.Uint32(d[0:]), d[4], d[5]
	m.QPN = get24(d[8:])
	m.ServiceID, m.QKey = be.Uint64(d[12:]), be.Uint32(d[20:])
	copy(m.AddInfo[:], d[24:96])
	copy(m.PrivateData[:], d[96:232])
	return m, nil
}

// Len returns CMDataLen.
func (m *SIDRREP) Len() int { return CMDataLen }

// AttrID returns the MAD attribute of a SIDRREP.
func (m *SIDRREP) AttrID() AttrID { return AttrSIDRREP }

// Append appends the 232 bytes of SIDR_REP message data.
func (m *SIDRREP) Append(b []byte) []byte {
	b = be.AppendUint32(b, m.RequestID)
	b = append(b, m.Status, m.AddInfoLen, 0, 0)
	b = app24(b, m.QPN)
	b = append(b, 0)
	b = be.AppendUint64(b, m.ServiceID)
	b = be.AppendUint32(b, m.QKey)
	b = append(b, m.AddInfo[:]...)
	return append(b, m.PrivateData[:]...)
}

// CMMessage is implemented by *REQ, *REP, *RTU, *REJ, *MRA, *DREQ, *DREP,
// *SIDRREQ and *SIDRREP.
type CMMessage interface {
	AttrID() AttrID
	Len() int
	Append(b []byte) []byte
}

// AppendCMMAD appends a whole 256-byte CM MAD: NewCMHeader(tid, m.AttrID())
// followed by m.
func AppendCMMAD(b []byte, tid uint64, m CMMessage) []byte {
	return m.Append(NewCMHeader(tid, m.AttrID()).Append(b))
}
