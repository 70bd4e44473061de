package roce

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA Vol.1 §9.7.5.1, table 43): bits
// 7-5 give the kind, bits 4-0 a credit count, an RNR timer code or a NAK code.
type Syndrome uint8

// SyndromeKind is bits 7-5 of a Syndrome.
type SyndromeKind uint8

const (
	KindACK      SyndromeKind = 0x00 // ACK, value = credit count
	KindRNRNAK   SyndromeKind = 0x20 // RNR NAK, value = RNR timer code
	KindReserved SyndromeKind = 0x40
	KindNAK      SyndromeKind = 0x60 // NAK, value = NAKCode
)

func (k SyndromeKind) String() string {
	switch k {
	case KindACK:
		return "ACK"
	case KindRNRNAK:
		return "RNR_NAK"
	case KindNAK:
		return "NAK"
	}
	return "RESERVED_0x" + strconv.FormatUint(uint64(k), 16)
}

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

const (
	NAKPSNSequenceError       NAKCode = 0 // a PSN was skipped: retransmit from the AETH PSN
	NAKInvalidRequest         NAKCode = 1 // unsupported or malformed request
	NAKRemoteAccessError      NAKCode = 2 // R_Key, bounds or rights violation
	NAKRemoteOperationalError NAKCode = 3 // responder could not complete the request
	NAKInvalidRDRequest       NAKCode = 4 // RD only
)

var nakNames = [...]string{"PSN_SEQUENCE_ERROR", "INVALID_REQUEST", "REMOTE_ACCESS_ERROR", "REMOTE_OPERATIONAL_ERROR", "INVALID_RD_REQUEST"}

func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "NAK_RESERVED_" + strconv.Itoa(int(c))
}

// CreditsUnlimited is the ACK credit count meaning "invalid/unlimited
// credits" (AETH_ACK_UNLIMITED); rxe sends it in all normal ACKs.
const CreditsUnlimited = 0x1F

// Syndrome constructors.
func ACKSyndrome(credits uint8) Syndrome     { return Syndrome(uint8(KindACK) | credits&0x1F) }
func RNRNAKSyndrome(timer RNRTimer) Syndrome { return Syndrome(uint8(KindRNRNAK) | uint8(timer)&0x1F) }
func NAKSyndrome(c NAKCode) Syndrome         { return Syndrome(uint8(KindNAK) | uint8(c)&0x1F) }

// Common syndromes.
const (
	SyndromeACK                    = Syndrome(KindACK) | CreditsUnlimited // 0x1F, what rxe sends
	SyndromePSNSequenceError       = Syndrome(KindNAK) | Syndrome(NAKPSNSequenceError)
	SyndromeInvalidRequest         = Syndrome(KindNAK) | Syndrome(NAKInvalidRequest)
	SyndromeRemoteAccessError      = Syndrome(KindNAK) | Syndrome(NAKRemoteAccessError)
	SyndromeRemoteOperationalError = Syndrome(KindNAK) | Syndrome(NAKRemoteOperationalError)
	SyndromeInvalidRDRequest       = Syndrome(KindNAK) | Syndrome(NAKInvalidRDRequest)
)

// Kind returns bits 7-5 of the syndrome.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s & 0xE0) }

// Value returns bits 4-0 of the syndrome.
func (s Syndrome) Value() uint8 { return uint8(s & 0x1F) }

// IsACK reports whether s is an ACK.
func (s Syndrome) IsACK() bool { return s.Kind() == KindACK }

// IsRNRNAK reports whether s is an RNR NAK.
func (s Syndrome) IsRNRNAK() bool { return s.Kind() == KindRNRNAK }

// IsNAK reports whether s is a NAK.
func (s Syndrome) IsNAK() bool { return s.Kind() == KindNAK }

// Credits returns the credit count of an ACK syndrome.
func (s Syndrome) Credits() uint8 { return s.Value() }

// RNRTimer returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s.Value()) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String renders e.g. "ACK(credits=31)", "RNR_NAK(0.64ms)", "NAK(REMOTE_ACCESS_ERROR)".
func (s Syndrome) String() string {
	switch s.Kind() {
	case KindACK:
		return "ACK(credits=" + strconv.Itoa(int(s.Value())) + ")"
	case KindRNRNAK:
		return "RNR_NAK(" + s.RNRTimer().String() + ")"
	case KindNAK:
		return "NAK(" + s.NAKCode().String() + ")"
	}
	return "RESERVED(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// RNRTimer is the 5-bit minimum RNR NAK timer code (IBTA Vol.1 table 45,
// enum ib_rnr_timeout).
type RNRTimer uint8

// rnrMicros[code] is the RNR delay in microseconds; code 0 is the longest.
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Micros returns the delay of the timer code in microseconds.
func (t RNRTimer) Micros() uint32 { return rnrMicros[t&0x1F] }

// Duration returns the delay of the timer code.
func (t RNRTimer) Duration() time.Duration { return time.Duration(t.Micros()) * time.Microsecond }

// String renders the delay in milliseconds, e.g. "0.64ms".
func (t RNRTimer) String() string {
	us := t.Micros()
	s := strconv.FormatUint(uint64(us/1000), 10)
	if f := us % 1000; f != 0 {
		fs := strconv.FormatUint(uint64(f+1000), 10)[1:] // 3 digits
		for fs[len(fs)-1] == '0' {
			fs = fs[:len(fs)-1]
		}
		s += "." + fs
	}
	return s + "ms"
}

// RNRTimerFor returns the smallest timer code whose delay is at least d
// (code 0, 655.36 ms, for anything longer than 491.52 ms).
func RNRTimerFor(d time.Duration) RNRTimer {
	for c := RNRTimer(1); c < 32; c++ {
		if c.Duration() >= d {
			return c
		}
	}
	return 0
}

// TimeoutExp converts a 5-bit IB timeout exponent (local ACK timeout, CM
// response timeout, target ACK delay) to a duration: 4.096 µs × 2^v.
// The local ACK timeout treats 0 as infinite; callers must check that.
func TimeoutExp(v uint8) time.Duration {
	return time.Duration(4096<<(v&0x1F)) * time.Nanosecond
}

// MTU is the IB path MTU enum (include/rdma/ib_verbs.h enum ib_mtu).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload bytes per packet, or 0 for an invalid enum.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five defined values.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

func (m MTU) String() string {
	if !m.Valid() {
		return "MTU_INVALID_" + strconv.Itoa(int(m))
	}
	return strconv.Itoa(m.Bytes())
}

// MTUFromBytes returns the enum for an exact payload size (256..4096), or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// RoCEOverhead is what Linux iboe_get_mtu subtracts from the netdev MTU
// before picking an IB MTU (40+8+12+4+28+4 = 96 bytes: GRH/IPv6, UDP, BTH,
// and room for the largest extended headers and the ICRC).
const RoCEOverhead = 40 + 8 + 12 + 4 + 28 + 4

// MTUForNetdev returns the largest IB MTU that fits a netdev (Ethernet)
// MTU, as Linux iboe_get_mtu does (1500 → 1024, 9000 → 4096), or 0 if none fits.
func MTUForNetdev(netdevMTU int) MTU {
	n := netdevMTU - RoCEOverhead
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// EntropyPortMin is the lowest UDP source port RoCEv2 senders use for ECMP
// entropy (Annex A17.3: the source port is a flow hash; Linux's
// rdma_flow_label_to_udp_sport yields 0xC000-0xFFFF, IB_ROCE_UDP_ENCAP_VALID_PORT_MIN,
// the IANA dynamic range). Such a sender listens on UDPPort.
const EntropyPortMin = 0xC000

// IsEntropyPort reports whether a UDP source port carries no listening port: 0, or a
// port in EntropyPortMin-0xFFFF. A RoCEv2 peer sending from one listens on UDPPort.
func IsEntropyPort(port uint16) bool { return port == 0 || port >= EntropyPortMin }

// FlowLabelToUDPSourcePort maps a 20-bit flow label to a RoCEv2 UDP source
// port in 0xC000-0xFFFF (rdma_flow_label_to_udp_sport).
func FlowLabelToUDPSourcePort(fl uint32) uint16 {
	fl &= 0xFFFFF
	return uint16((fl&0x3FFF)^((fl&0xFC000)>>14)) | EntropyPortMin
}

// CalcFlowLabel derives a 20-bit flow label from the local and remote QPNs
// (rdma_calc_flow_label). It is symmetric in its arguments, so both ends
// compute the same value.
func CalcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// UDPSourcePort returns the source port for a connection: from the flow
// label fl when it is non-zero, otherwise from CalcFlowLabel(lqpn, rqpn)
// (rdma_get_udp_sport). Receivers must not depend on it.
func UDPSourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl&0xFFFFF == 0 {
		fl = CalcFlowLabel(lqpn, rqpn)
	}
	return FlowLabelToUDPSourcePort(fl)
}
