package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Dest is the QP address rdma-core's ibv_rc_pingpong exchanges over
// its out-of-band TCP connection (default port 18515): "%04x:%06x:%06x:%s"
// (LID, QPN, PSN, GID as 32 hex digits in byte order), NUL-padded to
// MsgLen bytes. After both addresses, the client sends "done\x00".
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// MsgLen is sizeof "0000:000000:000000:" + 32 hex digits + NUL.
const MsgLen = 52

// DoneMsg is what the client sends after reading the server's address.
const DoneMsg = "done\x00"

// Append appends the NUL-terminated wire message (MsgLen bytes).
func (d Dest) Append(b []byte) []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xFFFFFF, d.PSN&0xFFFFFF, hex.EncodeToString(d.GID[:]))
	b = append(b, s...)
	for range MsgLen - len(s) {
		b = append(b, 0)
	}
	return b
}

// ErrMsg is returned for a malformed address message.
var ErrMsg = errors.New("pingpong: malformed address message")

// ParseDest parses a message as ibv_rc_pingpong's sscanf("%x:%x:%x:%s") does.
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	f := strings.SplitN(string(b), ":", 4)
	if len(f) != 4 {
		return d, ErrMsg
	}
	v := [3]uint64{}
	for i := range 3 {
		x, err := strconv.ParseUint(f[i], 16, 32)
		if err != nil {
			return d, ErrMsg
		}
		v[i] = x
	}
	g, err := hex.DecodeString(f[3])
	if err != nil || len(g) != 16 {
		return d, ErrMsg
	}
	d.LID, d.QPN, d.PSN = uint16(v[0]), uint32(v[1]), uint32(v[2])
	copy(d.GID[:], g)
	return d, nil
}

// Addr returns the GID as an IP address (IPv4-mapped GIDs unmapped); ok is
// false for the zero GID.
func (d Dest) Addr() (netip.Addr, bool) {
	if d.GID == [16]byte{} {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16(d.GID).Unmap(), true
}

// GIDString formats a GID like inet_ntop(AF_INET6) ("::ffff:192.0.2.1", "::").
func GIDString(g [16]byte) string { return netip.AddrFrom16(g).String() }
