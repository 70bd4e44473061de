package rocev2

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softrnic/softrnic/rnic"
)

// PingpongDest is the QP address rdma-core's ibv_rc_pingpong exchanges over
// its out-of-band TCP connection (default port 18515): "%04x:%06x:%06x:%s"
// (LID, QPN, PSN, GID as 32 hex digits in byte order), NUL-padded to
// PingpongMsgLen bytes. After both addresses, the client sends "done\x00".
type PingpongDest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// PingpongMsgLen is sizeof "0000:000000:000000:" + 32 hex digits + NUL.
const PingpongMsgLen = 52

// PingpongDone is what the client sends after reading the server's address.
const PingpongDone = "done\x00"

// Append appends the NUL-terminated wire message (PingpongMsgLen bytes).
func (d PingpongDest) Append(b []byte) []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xFFFFFF, d.PSN&0xFFFFFF, hex.EncodeToString(d.GID[:]))
	b = append(b, s...)
	for range PingpongMsgLen - len(s) {
		b = append(b, 0)
	}
	return b
}

// ErrPingpongMsg is returned for a malformed address message.
var ErrPingpongMsg = errors.New("rocev2: malformed pingpong address message")

// ParsePingpongDest parses a message as ibv_rc_pingpong's sscanf("%x:%x:%x:%s") does.
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	var d PingpongDest
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	f := strings.SplitN(string(b), ":", 4)
	if len(f) != 4 {
		return d, ErrPingpongMsg
	}
	v := [3]uint64{}
	for i := range 3 {
		x, err := strconv.ParseUint(f[i], 16, 32)
		if err != nil {
			return d, ErrPingpongMsg
		}
		v[i] = x
	}
	g, err := hex.DecodeString(f[3])
	if err != nil || len(g) != 16 {
		return d, ErrPingpongMsg
	}
	d.LID, d.QPN, d.PSN = uint16(v[0]), uint32(v[1]), uint32(v[2])
	copy(d.GID[:], g)
	return d, nil
}

// Addr returns the GID as an IP address (IPv4-mapped GIDs unmapped); ok is
// false for the zero GID.
func (d PingpongDest) Addr() (netip.Addr, bool) {
	if d.GID == [16]byte{} {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16(d.GID).Unmap(), true
}

// GIDString formats a GID like inet_ntop(AF_INET6) ("::ffff:192.0.2.1", "::").
func GIDString(g [16]byte) string { return netip.AddrFrom16(g).String() }

// IBVStatus returns the ibv_wc_status value and ibv_wc_status_str text of st,
// for tools that print completion errors the way rdma-core's do.
func IBVStatus(st rnic.Status) (int, string) {
	switch st {
	case rnic.StatusSuccess:
		return 0, "success"
	case rnic.StatusLocLenErr:
		return 1, "local length error"
	case rnic.StatusLocQPOpErr:
		return 2, "local QP operation error"
	case rnic.StatusLocProtErr:
		return 4, "local protection error"
	case rnic.StatusWRFlushErr:
		return 5, "Work Request Flushed Error"
	case rnic.StatusMWBindErr:
		return 6, "memory bind operation error"
	case rnic.StatusBadRespErr:
		return 7, "bad response error"
	case rnic.StatusLocAccessErr:
		return 8, "local access error"
	case rnic.StatusRemInvReqErr:
		return 9, "remote invalid request error"
	case rnic.StatusRemAccessErr:
		return 10, "remote access error"
	case rnic.StatusRemOpErr:
		return 11, "remote operation error"
	case rnic.StatusRetryExcErr:
		return 12, "transport retry counter exceeded"
	case rnic.StatusRNRRetryExcErr:
		return 13, "RNR retry counter exceeded"
	case rnic.StatusRemAbortErr:
		return 16, "operation aborted"
	case rnic.StatusFatalErr:
		return 19, "fatal error"
	}
	return 21, "general error"
}
