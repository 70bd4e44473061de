package rnic

import (
	"errors"
	"fmt"
	"strconv"
)

// Errors returned by the verbs calls.
var (
	ErrClosed        = errors.New("rnic: device closed")
	ErrQPState       = errors.New("rnic: operation not allowed in the QP's state")
	ErrQueueFull     = errors.New("rnic: work queue full")
	ErrInvalidArg    = errors.New("rnic: invalid argument")
	ErrTooManySGE    = errors.New("rnic: too many SGEs")
	ErrInlineTooLong = errors.New("rnic: inline data too long")
	ErrResource      = errors.New("rnic: resource limit reached")
	ErrInUse         = errors.New("rnic: resource in use")
	ErrCQOverflow    = errors.New("rnic: completion queue overflowed")
	ErrNotSupported  = errors.New("rnic: operation not supported by this QP's transport or connection")
	ErrAttached      = errors.New("rnic: QP already attached to a transport")
)

// Status is the completion status of a work request; names mirror ibv_wc_status.
type Status uint8

// Completion statuses.
const (
	StatusSuccess        Status = iota
	StatusLocLenErr             // local length error: receive buffer too small, SGE too long
	StatusLocQPOpErr            // local QP operation error: malformed or unsupported WR
	StatusLocProtErr            // local protection error: bad lkey, PD or rights on an SGE
	StatusWRFlushErr            // flushed because the QP is in the Error state
	StatusMWBindErr             // memory window bind failed
	StatusBadRespErr            // unexpected response from the peer
	StatusLocAccessErr          // local access error
	StatusRemInvReqErr          // the peer found the request invalid (e.g. message too long)
	StatusRemAccessErr          // the peer refused access (bad STag, rights, bounds)
	StatusRemOpErr              // the peer could not complete the operation (e.g. no receive posted)
	StatusRetryExcErr           // transport retries exhausted / connection lost
	StatusRNRRetryExcErr        // receiver-not-ready retries exhausted (RoCE only)
	StatusRemAbortErr           // the peer aborted the operation
	StatusFatalErr              // fatal local error
	StatusGeneralErr            // anything else
)

var statusNames = [...]string{
	"Success", "LocLenErr", "LocQPOpErr", "LocProtErr", "WRFlushErr", "MWBindErr", "BadRespErr",
	"LocAccessErr", "RemInvReqErr", "RemAccessErr", "RemOpErr", "RetryExcErr", "RNRRetryExcErr",
	"RemAbortErr", "FatalErr", "GeneralErr",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Opcode is the operation of a send work request.
type Opcode uint8

// Send work request opcodes.
const (
	OpSend           Opcode = iota // Send (RFC 5040 §4.4)
	OpSendInv                      // Send with Invalidate of InvalidateSTag at the peer
	OpSendImm                      // Send with immediate data (RFC 7306 Immediate Data on iWARP: SGL must be empty)
	OpWrite                        // RDMA Write
	OpWriteImm                     // RDMA Write followed by immediate data (RFC 7306 §6)
	OpRead                         // RDMA Read into the SGL
	OpAtomicCmpSwap                // RFC 7306 CmpSwap: Compare, Swap; result into SGL[0] (8 bytes)
	OpAtomicFetchAdd               // RFC 7306 FetchAdd: Compare holds the add value; result into SGL[0]
	OpLocalInv                     // invalidate InvalidateSTag locally
	OpRegMR                        // fast-register Reg.MR over Reg.Buf
	OpBindMW                       // bind Bind.MW to a range of Bind.MR
)

var opNames = [...]string{"Send", "SendInv", "SendImm", "Write", "WriteImm", "Read",
	"AtomicCmpSwap", "AtomicFetchAdd", "LocalInv", "RegMR", "BindMW"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// WCOpcode is the operation a completion reports (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCCmpSwap
	WCFetchAdd
	WCLocalInv
	WCRegMR
	WCBindMW
	WCRecv            // a Send (or immediate data) arrived in a receive buffer
	WCRecvRDMAWithImm // an RDMA Write with immediate data arrived
)

var wcNames = [...]string{"Send", "Write", "Read", "CmpSwap", "FetchAdd", "LocalInv", "RegMR",
	"BindMW", "Recv", "RecvRDMAWithImm"}

func (o WCOpcode) String() string {
	if int(o) < len(wcNames) {
		return wcNames[o]
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCOpcode returns the completion opcode a send WR of this opcode produces.
func (o Opcode) WCOpcode() WCOpcode {
	switch o {
	case OpSend, OpSendInv, OpSendImm:
		return WCSend
	case OpWrite, OpWriteImm:
		return WCWrite
	case OpRead:
		return WCRead
	case OpAtomicCmpSwap:
		return WCCmpSwap
	case OpAtomicFetchAdd:
		return WCFetchAdd
	case OpLocalInv:
		return WCLocalInv
	case OpRegMR:
		return WCRegMR
	case OpBindMW:
		return WCBindMW
	}
	return WCSend
}

// WCFlags qualify a completion.
type WCFlags uint8

// Completion flags.
const (
	WCWithImm   WCFlags = 1 << iota // Imm is valid
	WCWithInv                       // InvalidatedSTag was invalidated by the peer's Send with Invalidate
	WCSolicited                     // the message carried the solicited-event bit
)

// SendFlags qualify a send work request.
type SendFlags uint8

// Send flags.
const (
	Signaled   SendFlags = 1 << iota // generate a completion on success (errors always complete)
	Solicited                        // set the solicited-event bit (Send, SendInv, SendImm, WriteImm)
	Fence                            // read fence: start only after all prior Reads/atomics completed
	LocalFence                       // local fence: start only after all prior WRs completed
	Inline                           // copy the SGL payload at post time; buffers may be reused at once
)

// Access are memory access rights.
type Access uint16

// Access rights (ibv_access_flags). Remote write and remote atomic imply local write.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
	AccessMWBind
)

func (a Access) String() string {
	s := ""
	for i, n := range []string{"LocalWrite", "RemoteWrite", "RemoteRead", "RemoteAtomic", "MWBind"} {
		if a&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "0"
	}
	return s
}

// QPState is the state of a queue pair; see the package documentation for transitions.
type QPState uint8

// QP states.
const (
	QPIdle QPState = iota
	QPRTS
	QPClosing
	QPTerminate
	QPError
)

func (s QPState) String() string {
	switch s {
	case QPIdle:
		return "Idle"
	case QPRTS:
		return "RTS"
	case QPClosing:
		return "Closing"
	case QPTerminate:
		return "Terminate"
	case QPError:
		return "Error"
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// EventType names an asynchronous event.
type EventType uint8

// Asynchronous events (ibv_event_type).
const (
	EventCommEstablished  EventType = iota // QP reached RTS
	EventQPFatal                           // QP went to Error because of a transport or protocol error
	EventQPAccessErr                       // QP went to Error because of a remote access violation
	EventQPReqErr                          // QP went to Error because of an invalid request
	EventDisconnected                      // the connection was closed (gracefully or by the peer)
	EventCQErr                             // a CQ overflowed; completions were lost
	EventSRQLimitReached                   // an SRQ fell below its limit (the limit is disarmed)
	EventQPLastWQEReached                  // a QP on an SRQ went to Error
)

func (t EventType) String() string {
	switch t {
	case EventCommEstablished:
		return "CommEstablished"
	case EventQPFatal:
		return "QPFatal"
	case EventQPAccessErr:
		return "QPAccessErr"
	case EventQPReqErr:
		return "QPReqErr"
	case EventDisconnected:
		return "Disconnected"
	case EventCQErr:
		return "CQErr"
	case EventSRQLimitReached:
		return "SRQLimitReached"
	case EventQPLastWQEReached:
		return "QPLastWQEReached"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// AsyncEvent is an asynchronous event delivered by [Device.Events].
type AsyncEvent struct {
	Type EventType
	QP   *QP   // for QP events
	CQ   *CQ   // for EventCQErr
	SRQ  *SRQ  // for EventSRQLimitReached
	Err  error // the cause, e.g. an iWARP Terminate error; may be nil
}

func (e AsyncEvent) String() string {
	s := e.Type.String()
	if e.QP != nil {
		s += fmt.Sprintf(" qp=%d", e.QP.Num())
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// SGE is a scatter/gather element: Length bytes at Addr in the region named by LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// RegInfo describes a fast-register (OpRegMR) work request.
type RegInfo struct {
	MR     *MR    // allocated with PD.AllocMR
	Buf    []byte // the memory to map; len(Buf) ≤ the MR's max length
	IOVA   uint64 // tagged offset of Buf[0]
	Access Access
	Key    uint8 // new 8-bit key of the STag
}

// BindInfo describes a memory-window bind (OpBindMW) work request.
type BindInfo struct {
	MW     *MW
	MR     *MR    // the region the window is bound into (needs AccessMWBind)
	Addr   uint64 // start, in the MR's IOVA space
	Length uint64 // 0 unbinds a type 1 window
	Access Access // remote rights of the window
	Key    uint8  // new 8-bit key (type 2 windows); type 1 keys advance automatically
}

// SendWR is a send-queue work request. The engine copies it at post time, SGL included.
type SendWR struct {
	WRID           uint64
	Opcode         Opcode
	Flags          SendFlags
	SGL            []SGE
	RemoteAddr     uint64 // Write/Read/atomics: tagged offset at the peer
	RKey           uint32 // Write/Read/atomics: STag at the peer
	Imm            uint32 // OpSendImm, OpWriteImm
	InvalidateSTag uint32 // OpSendInv (remote STag) and OpLocalInv (local STag)
	Compare        uint64 // OpAtomicCmpSwap compare value; OpAtomicFetchAdd add value
	Swap           uint64 // OpAtomicCmpSwap swap value
	Reg            RegInfo
	Bind           BindInfo
}

// RecvWR is a receive work request.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// Completion reports a finished work request (ibv_wc).
type Completion struct {
	WRID            uint64
	Status          Status
	Opcode          WCOpcode
	Flags           WCFlags
	ByteLen         uint32 // bytes received (receives) or transferred (Read, atomics)
	Imm             uint32
	InvalidatedSTag uint32
	QPNum           uint32
	SRQ             bool // the receive came from the QP's SRQ
}
