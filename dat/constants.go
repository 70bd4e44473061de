package dat

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Timeout is a DAT_TIMEOUT expressed as a Go duration (the C API counts
// microseconds). TimeoutInfinite waits without bound.
type Timeout = time.Duration

// TimeoutInfinite is DAT_TIMEOUT_INFINITE.
const TimeoutInfinite Timeout = math.MaxInt64

// Count values with special meaning (Appendix A.4).
const (
	WatermarkInfinite = -1 // DAT_WATERMARK_INFINITE ((DAT_COUNT)~0)
	HWDefault         = WatermarkInfinite
	SRQLWDefault      = 0  // DAT_SRQ_LW_DEFAULT
	ValueUnknown      = -2 // DAT_VALUE_UNKNOWN (((DAT_COUNT)~0)-1)
)

// DAT API version implemented (spec §8.3).
const (
	VersionMajor = 2
	VersionMinor = 0
)

func flagString(v uint32, names []flagName) string {
	if v == 0 {
		for _, n := range names {
			if n.v == 0 {
				return n.s
			}
		}
		return "0"
	}
	var parts []string
	rest := v
	for _, n := range names {
		if n.v != 0 && rest&n.v == n.v {
			parts = append(parts, n.s)
			rest &^= n.v
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", rest))
	}
	return strings.Join(parts, "|")
}

type flagName struct {
	v uint32
	s string
}

// CompletionFlags is DAT_COMPLETION_FLAGS: per-post and per-EP completion
// control (Appendix A.4, spec §6.8.1).
type CompletionFlags uint32

const (
	CompletionDefault            CompletionFlags = 0x00
	CompletionSuppress           CompletionFlags = 0x01
	CompletionSolicitedWait      CompletionFlags = 0x02
	CompletionUnsignalled        CompletionFlags = 0x04
	CompletionBarrierFence       CompletionFlags = 0x08
	CompletionEVDThreshold       CompletionFlags = 0x10
	CompletionLMRInvalidateFence CompletionFlags = 0x20
)

var completionNames = []flagName{
	{0, "DAT_COMPLETION_DEFAULT_FLAG"}, {0x01, "DAT_COMPLETION_SUPPRESS_FLAG"},
	{0x02, "DAT_COMPLETION_SOLICITED_WAIT_FLAG"}, {0x04, "DAT_COMPLETION_UNSIGNALLED_FLAG"},
	{0x08, "DAT_COMPLETION_BARRIER_FENCE_FLAG"}, {0x10, "DAT_COMPLETION_EVD_THRESHOLD_FLAG"},
	{0x20, "DAT_COMPLETION_LMR_INVALIDATE_FENCE_FLAG"},
}

func (f CompletionFlags) String() string { return flagString(uint32(f), completionNames) }

// DTOOp is DAT_DTOS, the operation reported in a DTO completion.
type DTOOp uint32

const (
	DTOSend DTOOp = iota
	DTORDMAWrite
	DTORDMARead
	DTOReceive
	DTOReceiveWithInvalidate
	DTOLMRFMR
	DTOLMRInvalidate
	// DTOExtensionBase is DAT_DTO_EXTENSION_BASE; the iWARP extension
	// operations below (RFC 7306 atomics, immediate data) follow it.
	DTOExtensionBase
	DTOExtRDMAWriteImmed = DTOExtensionBase + iota - 7
	DTOExtRecvImmed
	DTOExtFetchAdd
	DTOExtCompareSwap
)

var dtoNames = map[DTOOp]string{
	DTOSend: "DAT_DTO_SEND", DTORDMAWrite: "DAT_DTO_RDMA_WRITE", DTORDMARead: "DAT_DTO_RDMA_READ",
	DTOReceive: "DAT_DTO_RECEIVE", DTOReceiveWithInvalidate: "DAT_DTO_RECEIVE_WITH_INVALIDATE",
	DTOLMRFMR: "DAT_DTO_LMR_FMR", DTOLMRInvalidate: "DAT_DTO_LMR_INVALIDATE", DTOExtensionBase: "DAT_DTO_EXTENSION_BASE",
	DTOExtFetchAdd: "DAT_IW_FETCH_AND_ADD", DTOExtCompareSwap: "DAT_IW_CMP_AND_SWAP",
	DTOExtRDMAWriteImmed: "DAT_IW_RDMA_WRITE_IMMED", DTOExtRecvImmed: "DAT_IW_RECV_IMMED",
}

func (o DTOOp) String() string {
	if s, ok := dtoNames[o]; ok {
		return s
	}
	return fmt.Sprintf("DAT_DTOS(%d)", uint32(o))
}

// QoS is DAT_QOS.
type QoS uint32

const (
	QoSBestEffort     QoS = 0x00
	QoSHighThroughput QoS = 0x01
	QoSLowLatency     QoS = 0x02
	QoSEconomy        QoS = 0x04
	QoSPremium        QoS = 0x08
)

var qosNames = []flagName{{0, "DAT_QOS_BEST_EFFORT"}, {1, "DAT_QOS_HIGH_THROUGHPUT"},
	{2, "DAT_QOS_LOW_LATENCY"}, {4, "DAT_QOS_ECONOMY"}, {8, "DAT_QOS_PREMIUM"}}

func (q QoS) String() string { return flagString(uint32(q), qosNames) }

// ConnectFlags is DAT_CONNECT_FLAGS.
type ConnectFlags uint32

const (
	ConnectDefault            ConnectFlags = 0x00
	ConnectMultipathRequested ConnectFlags = 0x01
	ConnectMultipathRequired  ConnectFlags = 0x02
)

var connectNames = []flagName{{0, "DAT_CONNECT_DEFAULT_FLAG"}, {1, "DAT_CONNECT_MULTIPATH_REQUESTED_FLAG"},
	{2, "DAT_CONNECT_MULTIPATH_REQUIRED_FLAG"}}

func (f ConnectFlags) String() string { return flagString(uint32(f), connectNames) }

// CloseFlags is DAT_CLOSE_FLAGS, used by IA close and EP disconnect.
type CloseFlags uint32

const (
	CloseAbrupt   CloseFlags = 0x00
	CloseGraceful CloseFlags = 0x01
)

func (f CloseFlags) String() string {
	switch f {
	case CloseAbrupt:
		return "DAT_CLOSE_ABRUPT_FLAG"
	case CloseGraceful:
		return "DAT_CLOSE_GRACEFUL_FLAG"
	}
	return fmt.Sprintf("DAT_CLOSE_FLAGS(%d)", uint32(f))
}

// EVDFlags is DAT_EVD_FLAGS: which event streams may feed an EVD.
type EVDFlags uint32

const (
	EVDSoftware   EVDFlags = 0x001
	EVDCR         EVDFlags = 0x010
	EVDDTO        EVDFlags = 0x020
	EVDConnection EVDFlags = 0x040
	EVDRMRBind    EVDFlags = 0x080
	EVDAsync      EVDFlags = 0x100
	EVDDefault    EVDFlags = 0x1F0
	EVDExtension  EVDFlags = 0x200
	evdAllFlags            = EVDSoftware | EVDDefault | EVDExtension
)

var evdFlagNames = []flagName{{0x1F0, "DAT_EVD_DEFAULT_FLAG"}, {1, "DAT_EVD_SOFTWARE_FLAG"}, {0x10, "DAT_EVD_CR_FLAG"},
	{0x20, "DAT_EVD_DTO_FLAG"}, {0x40, "DAT_EVD_CONNECTION_FLAG"}, {0x80, "DAT_EVD_RMR_BIND_FLAG"},
	{0x100, "DAT_EVD_ASYNC_FLAG"}, {0x200, "DAT_EVD_EXTENSION_FLAG"}}

func (f EVDFlags) String() string { return flagString(uint32(f), evdFlagNames) }

// EVDState is DAT_EVD_STATE as reported by EVD.Query (three orthogonal bands).
type EVDState uint32

const (
	EVDStateEnabled         EVDState = 0x01
	EVDStateDisabled        EVDState = 0x02
	EVDStateWaitable        EVDState = 0x04
	EVDStateUnwaitable      EVDState = 0x08
	EVDStateConfigNotify    EVDState = 0x10
	EVDStateConfigSolicited EVDState = 0x20
	EVDStateConfigThreshold EVDState = 0x30
)

func (s EVDState) String() string {
	var p []string
	if s&EVDStateEnabled != 0 {
		p = append(p, "ENABLED")
	}
	if s&EVDStateDisabled != 0 {
		p = append(p, "DISABLED")
	}
	if s&EVDStateWaitable != 0 {
		p = append(p, "WAITABLE")
	}
	if s&EVDStateUnwaitable != 0 {
		p = append(p, "UNWAITABLE")
	}
	switch s & 0x30 {
	case EVDStateConfigNotify:
		p = append(p, "CONFIG_NOTIFY")
	case EVDStateConfigSolicited:
		p = append(p, "CONFIG_SOLICITED")
	case EVDStateConfigThreshold:
		p = append(p, "CONFIG_THRESHOLD")
	}
	return "DAT_EVD_STATE_" + strings.Join(p, "|")
}

// PSPFlags is DAT_PSP_FLAGS: who creates the EP for a Connection Request.
type PSPFlags uint32

const (
	PSPConsumer PSPFlags = 0x00
	PSPProvider PSPFlags = 0x01
)

func (f PSPFlags) String() string {
	switch f {
	case PSPConsumer:
		return "DAT_PSP_CONSUMER_FLAG"
	case PSPProvider:
		return "DAT_PSP_PROVIDER_FLAG"
	}
	return fmt.Sprintf("DAT_PSP_FLAGS(%d)", uint32(f))
}

// MemPriv is DAT_MEM_PRIV_FLAGS.
type MemPriv uint32

const (
	MemPrivNone        MemPriv = 0x00
	MemPrivLocalRead   MemPriv = 0x01
	MemPrivRemoteRead  MemPriv = 0x02
	MemPrivLocalWrite  MemPriv = 0x10
	MemPrivRemoteWrite MemPriv = 0x20
	MemPrivAll         MemPriv = 0x33
	// MemPrivRemoteAtomic is the iWARP extension privilege for RFC 7306 atomics.
	MemPrivRemoteAtomic MemPriv = 0x40
	memPrivValid                = MemPrivAll | MemPrivRemoteAtomic
)

var memPrivNames = []flagName{{0, "DAT_MEM_PRIV_NONE_FLAG"}, {0x33, "DAT_MEM_PRIV_ALL_FLAG"},
	{1, "DAT_MEM_PRIV_LOCAL_READ_FLAG"}, {2, "DAT_MEM_PRIV_REMOTE_READ_FLAG"},
	{0x10, "DAT_MEM_PRIV_LOCAL_WRITE_FLAG"}, {0x20, "DAT_MEM_PRIV_REMOTE_WRITE_FLAG"},
	{0x40, "DAT_MEM_PRIV_REMOTE_ATOMIC"}}

func (p MemPriv) String() string { return flagString(uint32(p), memPrivNames) }

// VAType is DAT_VA_TYPE: virtual-address or zero-based addressing of a region.
type VAType uint32

const (
	VATypeVA VAType = 0
	VATypeZB VAType = 1
)

func (t VAType) String() string {
	if t == VATypeZB {
		return "DAT_VA_TYPE_ZB"
	}
	if t == VATypeVA {
		return "DAT_VA_TYPE_VA"
	}
	return fmt.Sprintf("DAT_VA_TYPE(%d)", uint32(t))
}

// MemType is DAT_MEM_TYPE.
type MemType uint32

const (
	MemTypeVirtual       MemType = 0x00
	MemTypeLMR           MemType = 0x01
	MemTypeSharedVirtual MemType = 0x02
)

func (t MemType) String() string {
	switch t {
	case MemTypeVirtual:
		return "DAT_MEM_TYPE_VIRTUAL"
	case MemTypeLMR:
		return "DAT_MEM_TYPE_LMR"
	case MemTypeSharedVirtual:
		return "DAT_MEM_TYPE_SHARED_VIRTUAL"
	}
	return fmt.Sprintf("DAT_MEM_TYPE(%d)", uint32(t))
}

// RMRScope is DAT_RMR_SCOPE.
type RMRScope uint32

const (
	RMRScopeEP RMRScope = iota
	RMRScopePZ
	RMRScopeAny
)

func (s RMRScope) String() string {
	switch s {
	case RMRScopeEP:
		return "DAT_RMR_SCOPE_EP"
	case RMRScopePZ:
		return "DAT_RMR_SCOPE_PZ"
	case RMRScopeAny:
		return "DAT_RMR_SCOPE_ANY"
	}
	return fmt.Sprintf("DAT_RMR_SCOPE(%d)", uint32(s))
}

// EPState is DAT_EP_STATE (spec §6.6.7).
type EPState uint32

const (
	EPStateUnconnected EPState = iota
	EPStateUnconfiguredUnconnected
	EPStateReserved
	EPStateUnconfiguredReserved
	EPStatePassiveConnectionPending
	EPStateUnconfiguredPassive
	EPStateActiveConnectionPending
	EPStateTentativeConnectionPending
	EPStateUnconfiguredTentative
	EPStateConnected
	EPStateDisconnectPending
	EPStateDisconnected
	EPStateCompletionPending
	EPStateConnectedSinglePath
	EPStateConnectedMultiPath
)

var epStateNames = [...]string{
	"DAT_EP_STATE_UNCONNECTED", "DAT_EP_STATE_UNCONFIGURED_UNCONNECTED", "DAT_EP_STATE_RESERVED",
	"DAT_EP_STATE_UNCONFIGURED_RESERVED", "DAT_EP_STATE_PASSIVE_CONNECTION_PENDING",
	"DAT_EP_STATE_UNCONFIGURED_PASSIVE", "DAT_EP_STATE_ACTIVE_CONNECTION_PENDING",
	"DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING", "DAT_EP_STATE_UNCONFIGURED_TENTATIVE",
	"DAT_EP_STATE_CONNECTED", "DAT_EP_STATE_DISCONNECT_PENDING", "DAT_EP_STATE_DISCONNECTED",
	"DAT_EP_STATE_COMPLETION_PENDING", "DAT_EP_STATE_CONNECTED_SINGLE_PATH",
	"DAT_EP_STATE_CONNECTED_MULTI_PATH",
}

func (s EPState) String() string {
	if int(s) < len(epStateNames) {
		return epStateNames[s]
	}
	return fmt.Sprintf("DAT_EP_STATE(%d)", uint32(s))
}

// invalidStateSub maps an EP state to the DAT_INVALID_STATE subtype naming it.
func (s EPState) invalidStateSub() Subtype {
	switch s {
	case EPStateUnconnected:
		return SubInvalidStateEPUnconnected
	case EPStateActiveConnectionPending:
		return SubInvalidStateEPActConnPending
	case EPStatePassiveConnectionPending:
		return SubInvalidStateEPPassConnPending
	case EPStateTentativeConnectionPending:
		return SubInvalidStateEPTentConnPending
	case EPStateConnected, EPStateConnectedSinglePath, EPStateConnectedMultiPath:
		return SubInvalidStateEPConnected
	case EPStateDisconnected:
		return SubInvalidStateEPDisconnected
	case EPStateReserved:
		return SubInvalidStateEPReserved
	case EPStateCompletionPending:
		return SubInvalidStateEPComplPending
	case EPStateDisconnectPending:
		return SubInvalidStateEPDiscPending
	case EPStateUnconfiguredUnconnected:
		return SubInvalidStateEPUnconfigured
	case EPStateUnconfiguredReserved:
		return SubInvalidStateEPUnconfReserved
	case EPStateUnconfiguredPassive:
		return SubInvalidStateEPUnconfPassive
	case EPStateUnconfiguredTentative:
		return SubInvalidStateEPUnconfTentative
	}
	return SubNone
}

// SRQState is DAT_SRQ_STATE (spec §6.5.2).
type SRQState uint32

const (
	SRQStateOperational SRQState = iota
	SRQStateError
)

func (s SRQState) String() string {
	switch s {
	case SRQStateOperational:
		return "DAT_SRQ_STATE_OPERATIONAL"
	case SRQStateError:
		return "DAT_SRQ_STATE_ERROR"
	}
	return fmt.Sprintf("DAT_SRQ_STATE(%d)", uint32(s))
}

// DTOStatus is DAT_DTO_COMPLETION_STATUS (spec §6.8.2).
type DTOStatus uint32

const (
	DTOSuccess DTOStatus = iota
	DTOErrFlushed
	DTOErrLocalLength
	DTOErrLocalEP
	DTOErrLocalProtection
	DTOErrBadResponse
	DTOErrRemoteAccess
	DTOErrRemoteResponder
	DTOErrTransport
	DTOErrReceiverNotReady
	DTOErrPartialPacket
	RMROperationFailed
	DTOErrLocalMMError
)

var dtoStatusNames = [...]string{
	"DAT_DTO_SUCCESS", "DAT_DTO_ERR_FLUSHED", "DAT_DTO_ERR_LOCAL_LENGTH", "DAT_DTO_ERR_LOCAL_EP",
	"DAT_DTO_ERR_LOCAL_PROTECTION", "DAT_DTO_ERR_BAD_RESPONSE", "DAT_DTO_ERR_REMOTE_ACCESS",
	"DAT_DTO_ERR_REMOTE_RESPONDER", "DAT_DTO_ERR_TRANSPORT", "DAT_DTO_ERR_RECEIVER_NOT_READY",
	"DAT_DTO_ERR_PARTIAL_PACKET", "DAT_RMR_OPERATION_FAILED", "DAT_DTO_ERR_LOCAL_MM_ERROR",
}

func (s DTOStatus) String() string {
	if int(s) < len(dtoStatusNames) {
		return dtoStatusNames[s]
	}
	return fmt.Sprintf("DAT_DTO_COMPLETION_STATUS(%d)", uint32(s))
}

// EventNumber is DAT_EVENT_NUMBER.
type EventNumber uint32

const (
	DTOCompletionEvent                   EventNumber = 0x00001
	RMRBindCompletionEvent               EventNumber = 0x01001
	ConnectionRequestEvent               EventNumber = 0x02001
	ConnectionEventEstablished           EventNumber = 0x04001
	ConnectionEventPeerRejected          EventNumber = 0x04002
	ConnectionEventNonPeerRejected       EventNumber = 0x04003
	ConnectionEventAcceptCompletionError EventNumber = 0x04004
	ConnectionEventDisconnected          EventNumber = 0x04005
	ConnectionEventBroken                EventNumber = 0x04006
	ConnectionEventTimedOut              EventNumber = 0x04007
	ConnectionEventUnreachable           EventNumber = 0x04008
	AsyncErrorEVDOverflow                EventNumber = 0x08001
	AsyncErrorIACatastrophic             EventNumber = 0x08002
	AsyncErrorEPBroken                   EventNumber = 0x08003
	AsyncErrorTimedOut                   EventNumber = 0x08004
	AsyncErrorProviderInternalError      EventNumber = 0x08005
	HADownTo1                            EventNumber = 0x08101
	HAUpToMultiPath                      EventNumber = 0x08102
	SoftwareEvent                        EventNumber = 0x10001
	ExtensionEvent                       EventNumber = 0x20000
	IBExtensionRangeBase                 EventNumber = 0x40000
	IWExtensionRangeBase                 EventNumber = 0x80000
	// IWExtensionDTOEvent reports completion of an iWARP extension DTO
	// (fetch-add, compare-swap, RDMA write with immediate).
	IWExtensionDTOEvent = IWExtensionRangeBase + 1
)

var eventNames = map[EventNumber]string{
	DTOCompletionEvent: "DAT_DTO_COMPLETION_EVENT", RMRBindCompletionEvent: "DAT_RMR_BIND_COMPLETION_EVENT",
	ConnectionRequestEvent:               "DAT_CONNECTION_REQUEST_EVENT",
	ConnectionEventEstablished:           "DAT_CONNECTION_EVENT_ESTABLISHED",
	ConnectionEventPeerRejected:          "DAT_CONNECTION_EVENT_PEER_REJECTED",
	ConnectionEventNonPeerRejected:       "DAT_CONNECTION_EVENT_NON_PEER_REJECTED",
	ConnectionEventAcceptCompletionError: "DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR",
	ConnectionEventDisconnected:          "DAT_CONNECTION_EVENT_DISCONNECTED",
	ConnectionEventBroken:                "DAT_CONNECTION_EVENT_BROKEN",
	ConnectionEventTimedOut:              "DAT_CONNECTION_EVENT_TIMED_OUT",
	ConnectionEventUnreachable:           "DAT_CONNECTION_EVENT_UNREACHABLE",
	AsyncErrorEVDOverflow:                "DAT_ASYNC_ERROR_EVD_OVERFLOW",
	AsyncErrorIACatastrophic:             "DAT_ASYNC_ERROR_IA_CATASTROPHIC",
	AsyncErrorEPBroken:                   "DAT_ASYNC_ERROR_EP_BROKEN",
	AsyncErrorTimedOut:                   "DAT_ASYNC_ERROR_TIMED_OUT",
	AsyncErrorProviderInternalError:      "DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR",
	HADownTo1:                            "DAT_HA_DOWN_TO_1", HAUpToMultiPath: "DAT_HA_UP_TO_MULTI_PATH",
	SoftwareEvent: "DAT_SOFTWARE_EVENT", ExtensionEvent: "DAT_EXTENSION_EVENT",
	IBExtensionRangeBase: "DAT_IB_EXTENSION_RANGE_BASE", IWExtensionRangeBase: "DAT_IW_EXTENSION_RANGE_BASE",
	IWExtensionDTOEvent: "DAT_IW_DTO_EVENT",
}

func (n EventNumber) String() string {
	if s, ok := eventNames[n]; ok {
		return s
	}
	return fmt.Sprintf("DAT_EVENT_NUMBER(%#x)", uint32(n))
}

// stream returns the EVD flag of the event stream an event number belongs to.
func (n EventNumber) stream() EVDFlags {
	switch {
	case n == DTOCompletionEvent:
		return EVDDTO
	case n == RMRBindCompletionEvent:
		return EVDRMRBind
	case n == ConnectionRequestEvent:
		return EVDCR
	case n&0xFF000 == 0x04000:
		return EVDConnection
	case n&0xFF000 == 0x08000:
		return EVDAsync
	case n == SoftwareEvent:
		return EVDSoftware
	}
	return EVDExtension
}

// Async error reasons (DAT_*_ASYNC_ERROR_REASON), object specific.
const (
	IACatastrophicError = 0
	IAOtherError        = 1

	EPTransferToError            = 0
	EPOtherError                 = 1
	SRQSoftHighWatermarkEvent    = 2
	EVDOverflowError             = 0
	EVDOtherError                = 1
	SRQTransferToError           = 0
	SRQOtherError                = 1
	SRQLowWatermarkReason        = 2
	LMROtherError, RMROtherError = 0, 0
	PZOtherError                 = 0
)

// HandleType is DAT_HANDLE_TYPE.
type HandleType uint32

const (
	HandleTypeCR HandleType = iota
	HandleTypeEP
	HandleTypeEVD
	HandleTypeIA
	HandleTypeLMR
	HandleTypePSP
	HandleTypePZ
	HandleTypeRMR
	HandleTypeRSP
	HandleTypeCNO
	HandleTypeSRQ
	HandleTypeCSP
	HandleTypeExtensionBase
)

var handleTypeNames = [...]string{"DAT_HANDLE_TYPE_CR", "DAT_HANDLE_TYPE_EP", "DAT_HANDLE_TYPE_EVD",
	"DAT_HANDLE_TYPE_IA", "DAT_HANDLE_TYPE_LMR", "DAT_HANDLE_TYPE_PSP", "DAT_HANDLE_TYPE_PZ",
	"DAT_HANDLE_TYPE_RMR", "DAT_HANDLE_TYPE_RSP", "DAT_HANDLE_TYPE_CNO", "DAT_HANDLE_TYPE_SRQ",
	"DAT_HANDLE_TYPE_CSP", "DAT_HANDLE_TYPE_EXTENSION_BASE"}

func (t HandleType) String() string {
	if int(t) < len(handleTypeNames) {
		return handleTypeNames[t]
	}
	return fmt.Sprintf("DAT_HANDLE_TYPE(%d)", uint32(t))
}

// invalidSub is the DAT_INVALID_HANDLE subtype naming the handle type.
func (t HandleType) invalidSub() Subtype {
	switch t {
	case HandleTypeCR:
		return SubInvalidHandleCR
	case HandleTypeEP:
		return SubInvalidHandleEP
	case HandleTypeIA:
		return SubInvalidHandleIA
	case HandleTypeLMR:
		return SubInvalidHandleLMR
	case HandleTypePSP:
		return SubInvalidHandlePSP
	case HandleTypePZ:
		return SubInvalidHandlePZ
	case HandleTypeRMR:
		return SubInvalidHandleRMR
	case HandleTypeRSP:
		return SubInvalidHandleRSP
	case HandleTypeCNO:
		return SubInvalidHandleCNO
	case HandleTypeSRQ:
		return SubInvalidHandleSRQ
	case HandleTypeCSP:
		return SubInvalidHandleCSP
	}
	return SubNone
}

// HARelationship is DAT_HA_RELATIONSHIP (spec §8.2.2.2).
type HARelationship uint32

const (
	HAFalse HARelationship = iota
	HATrue
	HAUnknown
	HAConflicting
)

func (r HARelationship) String() string {
	switch r {
	case HAFalse:
		return "DAT_HA_FALSE"
	case HATrue:
		return "DAT_HA_TRUE"
	case HAUnknown:
		return "DAT_HA_UNKNOWN"
	case HAConflicting:
		return "DAT_HA_CONFLICTING"
	}
	return fmt.Sprintf("DAT_HA_RELATIONSHIP(%d)", uint32(r))
}

// ServiceType is DAT_SERVICE_TYPE; only reliable connections exist.
type ServiceType uint32

// ServiceTypeRC is DAT_SERVICE_TYPE_RC.
const ServiceTypeRC ServiceType = 0

func (s ServiceType) String() string {
	if s == ServiceTypeRC {
		return "DAT_SERVICE_TYPE_RC"
	}
	return fmt.Sprintf("DAT_SERVICE_TYPE(%d)", uint32(s))
}
