// Package attach is the protocol between the softrnic daemon's device (internal/broker)
// and the processes that attach to it (package host), over the device's attach socket:
// a unix SOCK_SEQPACKET socket next to the control socket (Path), one connection per
// process for the life of the process.
//
// Every message is one JSON object in one datagram (at most MaxMsg bytes). The process
// opens with hello; the daemon answers welcome, carrying descriptors (SCM_RIGHTS): first
// the process's RoCEv2 link (rnic/rocev2/steer.Join takes them; Welcome.Steer says how
// many), then the process's end of its GSI socketpair. After that either side may send
// requests (a non-zero ID) and the other answers each with "ok" or "error" carrying the
// same ID:
//
//	from     op          fields          answer
//	process  alloc_qpn                   ok with QPN: a QP number steered to this process
//	process  free_qpn    QPN             ok
//	process  claim       Service         ok, or error EADDRINUSE: REQs for the service ID come here
//	process  release     Service         ok
//	daemon   list_qps                    ok with QPs: the process's QPs, states and counters
//	daemon   list_res    Kind            ok with Res: the process's CQs, MRs or PDs
//
// The GSI socketpair (SOCK_SEQPACKET too) carries the IB CM's MADs as RoCEv2 UDP payloads
// (BTH through ICRC), each prefixed by AddrLen bytes (PutAddr): from the daemon, the
// sender's address; from the process, the destination. The daemon sends the process's
// MADs on the device's socket and routes each MAD it receives to the process whose
// listener or connection it names.
//
// When the process's connection ends (exit, crash), the daemon releases everything the
// process held; when the daemon's end closes, the process's device fails (its QPs go to
// Error).
package attach

import (
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"strings"

	"github.com/softrnic/softrnic/internal/uapi"
)

// Path is the attach socket of the device whose control socket is ctl
// (/run/softrnic/softrnic0.sock → /run/softrnic/softrnic0.attach).
func Path(ctl string) string { return strings.TrimSuffix(ctl, ".sock") + ".attach" }

// MaxMsg bounds a message; a list_qps or list_res answer holds at most MaxQPs entries
// to fit.
const (
	MaxMsg = 1 << 20
	MaxQPs = 4096
)

// Ops.
const (
	OpHello    = "hello"
	OpWelcome  = "welcome"
	OpAllocQPN = "alloc_qpn"
	OpFreeQPN  = "free_qpn"
	OpClaim    = "claim"
	OpRelease  = "release"
	OpListQPs  = "list_qps"
	OpListRes  = "list_res" // Kind: "cq", "mr" or "pd"; the answer's Res (at most MaxQPs)
	OpOK       = "ok"
	OpError    = "error"
)

// Msg is one message; Op says which fields matter.
type Msg struct {
	Op      string     `json:"op"`
	ID      uint64     `json:"id,omitempty"`
	Hello   *Hello     `json:"hello,omitempty"`
	Welcome *Welcome   `json:"welcome,omitempty"`
	QPN     uint32     `json:"qpn,omitempty"`
	Service uint64     `json:"service,omitempty"`
	QPs     []QP       `json:"qps,omitempty"`
	Kind    string     `json:"kind,omitempty"`
	Res     []uapi.Res `json:"res,omitempty"`   // PID and Comm are the daemon's to fill
	Errno   int        `json:"errno,omitempty"` // error: a Linux errno
	Error   string     `json:"error,omitempty"`
}

// Hello introduces the process.
type Hello struct {
	Version int    `json:"version"` // Version
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
}

// Version of the protocol; a daemon refuses a hello of another version.
const Version = 1

// Welcome describes the device to the process.
type Welcome struct {
	Device string `json:"device"`
	Addr   string `json:"addr"`  // the RoCEv2 address ip:port of the device
	Mode   string `json:"mode"`  // the steering: "bpf" or "relay"
	Steer  int    `json:"steer"` // how many of the descriptors are the RoCEv2 link's
	MTU    int    `json:"mtu"`   // the netdev's MTU (0: unknown)
}

// QP is one of a process's QPs as list_qps reports it.
type QP struct {
	QPN       uint32 `json:"qpn"`
	Transport string `json:"transport"`
	State     string `json:"state"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxSegs    uint64 `json:"tx_segments"`
	RxSegs    uint64 `json:"rx_segments"`
	Retrans   uint64 `json:"retransmits"`
	NAKs      uint64 `json:"naks"`
}

// AddrLen is the size of the address before each MAD on the GSI socketpair: the IPv6 (or
// IPv4-mapped) address, the UDP port big-endian, 2 zero bytes.
const AddrLen = 20

// PutAddr writes a into b[:AddrLen].
func PutAddr(b []byte, a netip.AddrPort) {
	ip := a.Addr().As16()
	copy(b[:16], ip[:])
	binary.BigEndian.PutUint16(b[16:18], a.Port())
	b[18], b[19] = 0, 0
}

// GetAddr reads the address PutAddr wrote (IPv4-mapped addresses come back as IPv4).
func GetAddr(b []byte) netip.AddrPort {
	ip := netip.AddrFrom16([16]byte(b[:16])).Unmap()
	return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[16:18]))
}

// Encode marshals a message.
func Encode(m Msg) ([]byte, error) { return json.Marshal(m) }
