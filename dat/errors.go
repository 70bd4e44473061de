package dat

import (
	"errors"
	"fmt"
)

// ReturnType is the DAT_TYPE_STATUS part (bits 29..16) of a DAT_RETURN value
// (Appendix A.5, dat_error.h). Values are the unshifted header constants.
type ReturnType uint32

// DAT_RETURN types (Appendix A.5).
const (
	TypeSuccess                   ReturnType = 0x00000000
	TypeAbort                     ReturnType = 0x00010000
	TypeConnQualInUse             ReturnType = 0x00020000
	TypeInsufficientResources     ReturnType = 0x00030000
	TypeInternalError             ReturnType = 0x00040000
	TypeInvalidHandle             ReturnType = 0x00050000
	TypeInvalidParameter          ReturnType = 0x00060000
	TypeInvalidState              ReturnType = 0x00070000
	TypeLengthError               ReturnType = 0x00080000
	TypeModelNotSupported         ReturnType = 0x00090000
	TypeProviderNotFound          ReturnType = 0x000A0000
	TypePrivilegesViolation       ReturnType = 0x000B0000
	TypeProtectionViolation       ReturnType = 0x000C0000
	TypeQueueEmpty                ReturnType = 0x000D0000
	TypeQueueFull                 ReturnType = 0x000E0000
	TypeTimeoutExpired            ReturnType = 0x000F0000
	TypeProviderAlreadyRegistered ReturnType = 0x00100000
	TypeProviderInUse             ReturnType = 0x00110000
	TypeInvalidAddress            ReturnType = 0x00120000
	TypeInterruptedCall           ReturnType = 0x00130000
	TypeConnQualUnavailable       ReturnType = 0x00140000
	TypePortInUse                 ReturnType = 0x00160000
	TypeCommNotSupported          ReturnType = 0x00170000
	TypeExtensionBase             ReturnType = 0x10000000
	TypeNotImplemented            ReturnType = 0x3FFF0000
)

// Class bits and masks of a DAT_RETURN (Appendix A.5).
const (
	ClassError   uint32 = 0x80000000
	ClassWarning uint32 = 0x40000000
	ClassSuccess uint32 = 0x00000000
	TypeMask     uint32 = 0x3fff0000
	SubtypeMask  uint32 = 0x0000ffff
)

var typeNames = map[ReturnType]string{
	TypeSuccess:                   "DAT_SUCCESS",
	TypeAbort:                     "DAT_ABORT",
	TypeConnQualInUse:             "DAT_CONN_QUAL_IN_USE",
	TypeInsufficientResources:     "DAT_INSUFFICIENT_RESOURCES",
	TypeInternalError:             "DAT_INTERNAL_ERROR",
	TypeInvalidHandle:             "DAT_INVALID_HANDLE",
	TypeInvalidParameter:          "DAT_INVALID_PARAMETER",
	TypeInvalidState:              "DAT_INVALID_STATE",
	TypeLengthError:               "DAT_LENGTH_ERROR",
	TypeModelNotSupported:         "DAT_MODEL_NOT_SUPPORTED",
	TypeProviderNotFound:          "DAT_PROVIDER_NOT_FOUND",
	TypePrivilegesViolation:       "DAT_PRIVILEGES_VIOLATION",
	TypeProtectionViolation:       "DAT_PROTECTION_VIOLATION",
	TypeQueueEmpty:                "DAT_QUEUE_EMPTY",
	TypeQueueFull:                 "DAT_QUEUE_FULL",
	TypeTimeoutExpired:            "DAT_TIMEOUT_EXPIRED",
	TypeProviderAlreadyRegistered: "DAT_PROVIDER_ALREADY_REGISTERED",
	TypeProviderInUse:             "DAT_PROVIDER_IN_USE",
	TypeInvalidAddress:            "DAT_INVALID_ADDRESS",
	TypeInterruptedCall:           "DAT_INTERRUPTED_CALL",
	TypeConnQualUnavailable:       "DAT_CONN_QUAL_UNAVAILABLE",
	TypePortInUse:                 "DAT_PORT_IN_USE",
	TypeCommNotSupported:          "DAT_COMM_NOT_SUPPORTED",
	TypeExtensionBase:             "DAT_EXTENSION_BASE",
	TypeNotImplemented:            "DAT_NOT_IMPLEMENTED",
}

func (t ReturnType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("DAT_RETURN_TYPE(%#x)", uint32(t))
}

// Valid reports whether t is a type listed in Appendix A.5.
func (t ReturnType) Valid() bool { _, ok := typeNames[t]; return ok }

// Subtype is the DAT_SUBTYPE_STATUS part (bits 15..0) of a DAT_RETURN value.
// The numbering follows the DAT_RETURN_SUBTYPE enumeration of Appendix A.5.
type Subtype uint16

// DAT_RETURN subtypes, in enumeration order (Appendix A.5).
const (
	SubNone Subtype = iota // DAT_NO_SUBTYPE
	SubInterrupted
	// DAT_INSUFFICIENT_RESOURCES subtypes.
	SubResourceMemory
	SubResourceDevice
	SubResourceTEP
	SubResourceTEVD
	SubResourceProtectionDomain
	SubResourceMemoryRegion
	SubResourceErrorHandler
	SubResourceCredits
	SubResourceSRQ
	// DAT_INVALID_HANDLE subtypes.
	SubInvalidHandleIA
	SubInvalidHandleEP
	SubInvalidHandleLMR
	SubInvalidHandleRMR
	SubInvalidHandlePZ
	SubInvalidHandlePSP
	SubInvalidHandleRSP
	SubInvalidHandleCR
	SubInvalidHandleCNO
	SubInvalidHandleEVDCR
	SubInvalidHandleEVDRequest
	SubInvalidHandleEVDRecv
	SubInvalidHandleEVDConn
	SubInvalidHandleEVDAsync
	SubInvalidHandleSRQ
	SubInvalidHandleCSP
	SubInvalidHandle1
	SubInvalidHandle2
	SubInvalidHandle3
	SubInvalidHandle4
	SubInvalidHandle5
	SubInvalidHandle6
	SubInvalidHandle7
	SubInvalidHandle8
	SubInvalidHandle9
	SubInvalidHandle10
	// DAT_INVALID_PARAMETER subtypes.
	SubInvalidArg1
	SubInvalidArg2
	SubInvalidArg3
	SubInvalidArg4
	SubInvalidArg5
	SubInvalidArg6
	SubInvalidArg7
	SubInvalidArg8
	SubInvalidArg9
	SubInvalidArg10
	// DAT_INVALID_STATE subtypes.
	SubInvalidStateEPUnconnected
	SubInvalidStateEPActConnPending
	SubInvalidStateEPPassConnPending
	SubInvalidStateEPTentConnPending
	SubInvalidStateEPConnected
	SubInvalidStateEPDisconnected
	SubInvalidStateEPReserved
	SubInvalidStateEPComplPending
	SubInvalidStateEPDiscPending
	SubInvalidStateEPProviderControl
	SubInvalidStateEPNotReady
	SubInvalidStateEPRecvWatermark
	SubInvalidStateEPPZ
	SubInvalidStateEPEVDRequest
	SubInvalidStateEPEVDRecv
	SubInvalidStateEPEVDConnect
	SubInvalidStateEPUnconfigured
	SubInvalidStateEPUnconfReserved
	SubInvalidStateEPUnconfPassive
	SubInvalidStateEPUnconfTentative
	SubInvalidStateCNOInUse
	SubInvalidStateCNODead
	SubInvalidStateEVDOpen
	SubInvalidStateEVDEnabled
	SubInvalidStateEVDDisabled
	SubInvalidStateEVDWaitable
	SubInvalidStateEVDUnwaitable
	SubInvalidStateEVDInUse
	SubInvalidStateEVDConfigNotify
	SubInvalidStateEVDConfigSolicited
	SubInvalidStateEVDConfigThreshold
	SubInvalidStateEVDWaiter
	SubInvalidStateEVDAsync
	SubInvalidStateIAInUse
	SubInvalidStateLMRInUse
	SubInvalidStateLMRFree
	SubInvalidStatePZInUse
	SubInvalidStatePZFree
	SubInvalidStateSRQOperational
	SubInvalidStateSRQError
	SubInvalidStateSRQInUse
	// SubInvalidStateSRQShutdown is in OFA DAPL's dat_error.h (libdat2, the
	// DAT 2.0 C ABI) though not in the spec's Appendix A listing; it keeps
	// the values of the subtypes after it equal to the C ones.
	SubInvalidStateSRQShutdown
	// DAT_PRIVILEGES_VIOLATION subtypes.
	SubPrivilegesRead
	SubPrivilegesWrite
	SubPrivilegesRDMARead
	SubPrivilegesRDMAWrite
	// DAT_PROTECTION_VIOLATION subtypes.
	SubProtectionRead
	SubProtectionWrite
	SubProtectionRDMARead
	SubProtectionRDMAWrite
	// DAT_INVALID_ADDRESS subtypes.
	SubInvalidAddressUnsupported
	SubInvalidAddressUnreachable
	SubInvalidAddressMalformed
	// DAT_PROVIDER_NOT_FOUND subtypes.
	SubNameNotRegistered
	SubMajorNotFound
	SubMinorNotFound
	SubThreadSafetyNotFound

	subtypeCount
)

var subtypeNames = [...]string{
	"DAT_NO_SUBTYPE", "DAT_SUB_INTERRUPTED",
	"DAT_RESOURCE_MEMORY", "DAT_RESOURCE_DEVICE", "DAT_RESOURCE_TEP", "DAT_RESOURCE_TEVD",
	"DAT_RESOURCE_PROTECTION_DOMAIN", "DAT_RESOURCE_MEMORY_REGION", "DAT_RESOURCE_ERROR_HANDLER",
	"DAT_RESOURCE_CREDITS", "DAT_RESOURCE_SRQ",
	"DAT_INVALID_HANDLE_IA", "DAT_INVALID_HANDLE_EP", "DAT_INVALID_HANDLE_LMR", "DAT_INVALID_HANDLE_RMR",
	"DAT_INVALID_HANDLE_PZ", "DAT_INVALID_HANDLE_PSP", "DAT_INVALID_HANDLE_RSP", "DAT_INVALID_HANDLE_CR",
	"DAT_INVALID_HANDLE_CNO", "DAT_INVALID_HANDLE_EVD_CR", "DAT_INVALID_HANDLE_EVD_REQUEST",
	"DAT_INVALID_HANDLE_EVD_RECV", "DAT_INVALID_HANDLE_EVD_CONN", "DAT_INVALID_HANDLE_EVD_ASYNC",
	"DAT_INVALID_HANDLE_SRQ", "DAT_INVALID_HANDLE_CSP",
	"DAT_INVALID_HANDLE1", "DAT_INVALID_HANDLE2", "DAT_INVALID_HANDLE3", "DAT_INVALID_HANDLE4",
	"DAT_INVALID_HANDLE5", "DAT_INVALID_HANDLE6", "DAT_INVALID_HANDLE7", "DAT_INVALID_HANDLE8",
	"DAT_INVALID_HANDLE9", "DAT_INVALID_HANDLE10",
	"DAT_INVALID_ARG1", "DAT_INVALID_ARG2", "DAT_INVALID_ARG3", "DAT_INVALID_ARG4", "DAT_INVALID_ARG5",
	"DAT_INVALID_ARG6", "DAT_INVALID_ARG7", "DAT_INVALID_ARG8", "DAT_INVALID_ARG9", "DAT_INVALID_ARG10",
	"DAT_INVALID_STATE_EP_UNCONNECTED", "DAT_INVALID_STATE_EP_ACTCONNPENDING",
	"DAT_INVALID_STATE_EP_PASSCONNPENDING", "DAT_INVALID_STATE_EP_TENTCONNPENDING",
	"DAT_INVALID_STATE_EP_CONNECTED", "DAT_INVALID_STATE_EP_DISCONNECTED",
	"DAT_INVALID_STATE_EP_RESERVED", "DAT_INVALID_STATE_EP_COMPLPENDING",
	"DAT_INVALID_STATE_EP_DISCPENDING", "DAT_INVALID_STATE_EP_PROVIDERCONTROL",
	"DAT_INVALID_STATE_EP_NOTREADY", "DAT_INVALID_STATE_EP_RECV_WATERMARK",
	"DAT_INVALID_STATE_EP_PZ", "DAT_INVALID_STATE_EP_EVD_REQUEST", "DAT_INVALID_STATE_EP_EVD_RECV",
	"DAT_INVALID_STATE_EP_EVD_CONNECT", "DAT_INVALID_STATE_EP_UNCONFIGURED",
	"DAT_INVALID_STATE_EP_UNCONFRESERVED", "DAT_INVALID_STATE_EP_UNCONFPASSIVE",
	"DAT_INVALID_STATE_EP_UNCONFTENTATIVE", "DAT_INVALID_STATE_CNO_IN_USE",
	"DAT_INVALID_STATE_CNO_DEAD", "DAT_INVALID_STATE_EVD_OPEN", "DAT_INVALID_STATE_EVD_ENABLED",
	"DAT_INVALID_STATE_EVD_DISABLED", "DAT_INVALID_STATE_EVD_WAITABLE",
	"DAT_INVALID_STATE_EVD_UNWAITABLE", "DAT_INVALID_STATE_EVD_IN_USE",
	"DAT_INVALID_STATE_EVD_CONFIG_NOTIFY", "DAT_INVALID_STATE_EVD_CONFIG_SOLICITED",
	"DAT_INVALID_STATE_EVD_CONFIG_THRESHOLD", "DAT_INVALID_STATE_EVD_WAITER",
	"DAT_INVALID_STATE_EVD_ASYNC", "DAT_INVALID_STATE_IA_IN_USE", "DAT_INVALID_STATE_LMR_IN_USE",
	"DAT_INVALID_STATE_LMR_FREE", "DAT_INVALID_STATE_PZ_IN_USE", "DAT_INVALID_STATE_PZ_FREE",
	"DAT_INVALID_STATE_SRQ_OPERATIONAL", "DAT_INVALID_STATE_SRQ_ERROR", "DAT_INVALID_STATE_SRQ_IN_USE",
	"DAT_INVALID_STATE_SRQ_SHUTDOWN",
	"DAT_PRIVILEGES_READ", "DAT_PRIVILEGES_WRITE", "DAT_PRIVILEGES_RDMA_READ", "DAT_PRIVILEGES_RDMA_WRITE",
	"DAT_PROTECTION_READ", "DAT_PROTECTION_WRITE", "DAT_PROTECTION_RDMA_READ", "DAT_PROTECTION_RDMA_WRITE",
	"DAT_INVALID_ADDRESS_UNSUPPORTED", "DAT_INVALID_ADDRESS_UNREACHABLE", "DAT_INVALID_ADDRESS_MALFORMED",
	"DAT_NAME_NOT_REGISTERED", "DAT_MAJOR_NOT_FOUND", "DAT_MINOR_NOT_FOUND", "DAT_THREAD_SAFETY_NOT_FOUND",
}

var _ = [1]struct{}{}[len(subtypeNames)-int(subtypeCount)] // the tables must match

func (s Subtype) String() string {
	if s < subtypeCount {
		return subtypeNames[s]
	}
	return fmt.Sprintf("DAT_RETURN_SUBTYPE(%d)", uint16(s))
}

// Error is a failed DAT_RETURN: a type and an optional subtype. It is
// comparable, and errors.Is(err, Error{Type: T}) matches any subtype of T,
// while errors.Is(err, Error{Type: T, Subtype: S}) matches exactly.
type Error struct {
	Type    ReturnType
	Subtype Subtype
}

func (e Error) Error() string {
	if e.Subtype == SubNone {
		return "dat: " + e.Type.String()
	}
	return "dat: " + e.Type.String() + " (" + e.Subtype.String() + ")"
}

// Is implements errors.Is matching: same Type, and either the target has no
// subtype or the subtypes are equal.
func (e Error) Is(target error) bool {
	var t Error
	switch v := target.(type) {
	case Error:
		t = v
	case *Error:
		if v == nil {
			return false
		}
		t = *v
	default:
		return false
	}
	return e.Type == t.Type && (t.Subtype == SubNone || t.Subtype == e.Subtype)
}

// Code returns the 32-bit DAT_RETURN value, with the error class bit set.
func (e Error) Code() uint32 {
	return ClassError | uint32(e.Type)&TypeMask | uint32(e.Subtype)
}

// FromCode converts a DAT_RETURN value into an error: nil for DAT_SUCCESS,
// otherwise an Error. The class bits are ignored.
func FromCode(code uint32) error {
	t := ReturnType(code & TypeMask)
	if t == TypeSuccess {
		return nil
	}
	return Error{Type: t, Subtype: Subtype(code & SubtypeMask)}
}

// CodeOf returns the DAT_RETURN value of err: 0 for nil, Code() for an Error
// anywhere in err's chain, and DAT_INTERNAL_ERROR for any other error.
func CodeOf(err error) uint32 {
	if err == nil {
		return 0
	}
	var e Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return Error{Type: TypeInternalError}.Code()
}

// StrError converts a DAT_RETURN value into its major (type) and minor
// (subtype) messages (spec §7.1 dat_strerror). An undefined value yields
// DAT_INVALID_PARAMETER.
func StrError(code uint32) (major, minor string, err error) {
	t := ReturnType(code & TypeMask)
	s := Subtype(code & SubtypeMask)
	if !t.Valid() || s >= subtypeCount {
		return "", "", ErrInvalidParameter
	}
	if t == TypeSuccess && s != SubNone {
		return "", "", ErrInvalidParameter
	}
	return t.String(), s.String(), nil
}

func errType(t ReturnType) Error           { return Error{Type: t} }
func errSub(t ReturnType, s Subtype) Error { return Error{Type: t, Subtype: s} }
func notImplemented(what string) error     { return fmt.Errorf("dat: %s: %w", what, ErrNotImplemented) }
func invalidArg(n int) Error {
	return Error{Type: TypeInvalidParameter, Subtype: SubInvalidArg1 + Subtype(n-1)}
}
func invalidHandle(s Subtype) Error { return Error{Type: TypeInvalidHandle, Subtype: s} }
func invalidState(s Subtype) Error  { return Error{Type: TypeInvalidState, Subtype: s} }

// Sentinels for every DAT_RETURN type: errors.Is(err, ErrX) matches any subtype.
var (
	ErrAbort                     = errType(TypeAbort)
	ErrConnQualInUse             = errType(TypeConnQualInUse)
	ErrInsufficientResources     = errType(TypeInsufficientResources)
	ErrInternalError             = errType(TypeInternalError)
	ErrInvalidHandle             = errType(TypeInvalidHandle)
	ErrInvalidParameter          = errType(TypeInvalidParameter)
	ErrInvalidState              = errType(TypeInvalidState)
	ErrLengthError               = errType(TypeLengthError)
	ErrModelNotSupported         = errType(TypeModelNotSupported)
	ErrProviderNotFound          = errType(TypeProviderNotFound)
	ErrPrivilegesViolation       = errType(TypePrivilegesViolation)
	ErrProtectionViolation       = errType(TypeProtectionViolation)
	ErrQueueEmpty                = errType(TypeQueueEmpty)
	ErrQueueFull                 = errType(TypeQueueFull)
	ErrTimeoutExpired            = errType(TypeTimeoutExpired)
	ErrProviderAlreadyRegistered = errType(TypeProviderAlreadyRegistered)
	ErrProviderInUse             = errType(TypeProviderInUse)
	ErrInvalidAddress            = errType(TypeInvalidAddress)
	ErrInterruptedCall           = errType(TypeInterruptedCall)
	ErrConnQualUnavailable       = errType(TypeConnQualUnavailable)
	ErrPortInUse                 = errType(TypePortInUse)
	ErrCommNotSupported          = errType(TypeCommNotSupported)
	ErrNotImplemented            = errType(TypeNotImplemented)
)

// Sentinels for type+subtype pairs (matched exactly by errors.Is).
var (
	ErrAbortInterrupted = errSub(TypeAbort, SubInterrupted)

	ErrResourceMemory           = errSub(TypeInsufficientResources, SubResourceMemory)
	ErrResourceDevice           = errSub(TypeInsufficientResources, SubResourceDevice)
	ErrResourceTEP              = errSub(TypeInsufficientResources, SubResourceTEP)
	ErrResourceTEVD             = errSub(TypeInsufficientResources, SubResourceTEVD)
	ErrResourceProtectionDomain = errSub(TypeInsufficientResources, SubResourceProtectionDomain)
	ErrResourceMemoryRegion     = errSub(TypeInsufficientResources, SubResourceMemoryRegion)
	ErrResourceCredits          = errSub(TypeInsufficientResources, SubResourceCredits)
	ErrResourceSRQ              = errSub(TypeInsufficientResources, SubResourceSRQ)

	ErrInvalidHandleIA         = invalidHandle(SubInvalidHandleIA)
	ErrInvalidHandleEP         = invalidHandle(SubInvalidHandleEP)
	ErrInvalidHandleLMR        = invalidHandle(SubInvalidHandleLMR)
	ErrInvalidHandleRMR        = invalidHandle(SubInvalidHandleRMR)
	ErrInvalidHandlePZ         = invalidHandle(SubInvalidHandlePZ)
	ErrInvalidHandlePSP        = invalidHandle(SubInvalidHandlePSP)
	ErrInvalidHandleRSP        = invalidHandle(SubInvalidHandleRSP)
	ErrInvalidHandleCR         = invalidHandle(SubInvalidHandleCR)
	ErrInvalidHandleCNO        = invalidHandle(SubInvalidHandleCNO)
	ErrInvalidHandleEVDCR      = invalidHandle(SubInvalidHandleEVDCR)
	ErrInvalidHandleEVDRequest = invalidHandle(SubInvalidHandleEVDRequest)
	ErrInvalidHandleEVDRecv    = invalidHandle(SubInvalidHandleEVDRecv)
	ErrInvalidHandleEVDConn    = invalidHandle(SubInvalidHandleEVDConn)
	ErrInvalidHandleEVDAsync   = invalidHandle(SubInvalidHandleEVDAsync)
	ErrInvalidHandleSRQ        = invalidHandle(SubInvalidHandleSRQ)
	ErrInvalidHandleCSP        = invalidHandle(SubInvalidHandleCSP)

	ErrInvalidStateEPUnconnected  = invalidState(SubInvalidStateEPUnconnected)
	ErrInvalidStateEPConnected    = invalidState(SubInvalidStateEPConnected)
	ErrInvalidStateEPDisconnected = invalidState(SubInvalidStateEPDisconnected)
	ErrInvalidStateEPNotReady     = invalidState(SubInvalidStateEPNotReady)
	ErrInvalidStateCNOInUse       = invalidState(SubInvalidStateCNOInUse)
	ErrInvalidStateEVDInUse       = invalidState(SubInvalidStateEVDInUse)
	ErrInvalidStateEVDWaiter      = invalidState(SubInvalidStateEVDWaiter)
	ErrInvalidStateEVDUnwaitable  = invalidState(SubInvalidStateEVDUnwaitable)
	ErrInvalidStateEVDAsync       = invalidState(SubInvalidStateEVDAsync)
	ErrInvalidStateIAInUse        = invalidState(SubInvalidStateIAInUse)
	ErrInvalidStateLMRInUse       = invalidState(SubInvalidStateLMRInUse)
	ErrInvalidStatePZInUse        = invalidState(SubInvalidStatePZInUse)
	ErrInvalidStateSRQInUse       = invalidState(SubInvalidStateSRQInUse)
	ErrInvalidStateSRQError       = invalidState(SubInvalidStateSRQError)

	ErrPrivilegesRead      = errSub(TypePrivilegesViolation, SubPrivilegesRead)
	ErrPrivilegesWrite     = errSub(TypePrivilegesViolation, SubPrivilegesWrite)
	ErrPrivilegesRDMARead  = errSub(TypePrivilegesViolation, SubPrivilegesRDMARead)
	ErrPrivilegesRDMAWrite = errSub(TypePrivilegesViolation, SubPrivilegesRDMAWrite)
	ErrProtectionRead      = errSub(TypeProtectionViolation, SubProtectionRead)
	ErrProtectionWrite     = errSub(TypeProtectionViolation, SubProtectionWrite)

	ErrInvalidAddressUnsupported = errSub(TypeInvalidAddress, SubInvalidAddressUnsupported)
	ErrInvalidAddressUnreachable = errSub(TypeInvalidAddress, SubInvalidAddressUnreachable)
	ErrInvalidAddressMalformed   = errSub(TypeInvalidAddress, SubInvalidAddressMalformed)

	ErrNameNotRegistered    = errSub(TypeProviderNotFound, SubNameNotRegistered)
	ErrMajorNotFound        = errSub(TypeProviderNotFound, SubMajorNotFound)
	ErrMinorNotFound        = errSub(TypeProviderNotFound, SubMinorNotFound)
	ErrThreadSafetyNotFound = errSub(TypeProviderNotFound, SubThreadSafetyNotFound)
)

// interruptError is DAT_INTERRUPTED_CALL caused by a cancelled context; it
// matches both ErrInterruptedCall and the context's error.
type interruptError struct{ cause error }

func (i interruptError) Error() string {
	return ErrInterruptedCall.Error() + ": " + i.cause.Error()
}
func (i interruptError) Unwrap() []error { return []error{ErrInterruptedCall, i.cause} }

func interrupted(cause error) error { return interruptError{cause} }
