package perftest

// Wire formats of perftest's out-of-band ("comm") exchange, as the perftest 6.06 sources
// (Debian bookworm's perftest 4.5+0.17, upstream tag v4.5-0.17) send them. With -R or -z
// every message is one SEND on the communication QP, a separate rdma_cm connection made
// before the data connections, on the same port; the receiver posts a single 56-byte
// receive (sizeof(struct pingpong_dest)), so no message is longer. Without them every
// message is one write() on a TCP connection to the port, read with one read().
//
//	message                 bytes  encoding
//	version                 16     NUL-padded ASCII, e.g. "6.06"
//	cycle buffer (page)     4      big-endian int32
//	cache line size         4      big-endian int32
//	MTU                     2      ASCII digit of the ibv_mtu enum (1..5) and a NUL
//	pingpong_dest (-R, -z)  56     see dest (HAVE_ENDIAN: fields big-endian)
//	pingpong_dest (TCP)     108    ASCII, see dest.AppendText (59 without a GID: IB only)
//	report field            8      big-endian uint64 or IEEE-754 double (size, iters,
//	                               peak, average, message rate: five messages)
//	"done" (TCP)            5      "done\x00", written after the closing exchange, never read
//
// In every exchange the client sends first and the server answers after it has received.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"
)

const (
	version     = "6.06" // perftest version we speak (VERSION in its config.h)
	versionLen  = 16     // MAX_VERSION
	destLen     = 56     // sizeof(struct pingpong_dest) on LP64
	minVersion  = 5.70   // check_version_compatibility refuses older peers
	longIters   = 5.33   // from this version the report's iters field is 8 bytes
	defCacheLn  = 64     // DEF_CACHE_LINE_SIZE
	defPageSize = 4096   // DEF_PAGE_SIZE (cycle buffer)
	doneMsg     = "done\x00"
)

// dest is perftest's struct pingpong_dest, the per-QP "message context". On LP64 it is
//
//	off  field       notes
//	0    lid         int32
//	4    out_reads   int32
//	8    qpn         int32
//	12   psn         int32
//	16   rkey        uint32
//	20   (padding)
//	24   vaddr       uint64
//	32   gid         16 raw bytes
//	48   srqn        uint32
//	52   gid_index   int32
//
// perftest built with HAVE_ENDIAN (Debian's is) sends every integer big-endian
// (rdma_write_keys); the reader converts only lid, out_reads, qpn, psn, rkey and vaddr.
type dest struct {
	LID, OutReads, QPN, PSN, RKey uint32
	VAddr                         uint64
	GID                           [16]byte
	SRQN, GIDIndex                uint32
}

// Append appends the 56-byte wire form of d to b.
func (d *dest) Append(b []byte) []byte {
	var w [destLen]byte
	be := binary.BigEndian
	be.PutUint32(w[0:], d.LID)
	be.PutUint32(w[4:], d.OutReads)
	be.PutUint32(w[8:], d.QPN)
	be.PutUint32(w[12:], d.PSN)
	be.PutUint32(w[16:], d.RKey)
	be.PutUint64(w[24:], d.VAddr)
	copy(w[32:48], d.GID[:])
	be.PutUint32(w[48:], d.SRQN)
	be.PutUint32(w[52:], d.GIDIndex)
	return append(b, w[:]...)
}

var errShort = errors.New("perftest: message too short")

// Sizes of the ASCII pingpong_dest (ethernet_write_keys): KEY_MSG_SIZE without a GID (IB
// links) and KEY_MSG_SIZE_GID with one (RoCE: always, since the GID index is never -1).
const (
	textDestLen    = 59
	textDestGIDLen = 108
)

// AppendText appends the 108-byte ASCII form perftest sends over TCP when its GID index is
// set: "%04x:%04x:%06x:%06x:%08x:%016llx:" (LID, out_reads, QPN, PSN, rkey, vaddr), the 16
// GID bytes as "%02x:" each, "%08x:" (SRQN) and a NUL.
func (d *dest) AppendText(b []byte) []byte {
	n := len(b)
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID&0xffff, d.OutReads&0xffff, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, g := range d.GID {
		b = fmt.Appendf(b, "%02x:", g)
	}
	b = fmt.Appendf(b, "%08x:", d.SRQN)
	for len(b)-n < textDestGIDLen {
		b = append(b, 0)
	}
	return b[:n+textDestGIDLen]
}

var errTextDest = errors.New("perftest: malformed address message")

// parseTextDest decodes the 108-byte ASCII pingpong_dest as ethernet_read_keys does: 23
// colon-separated hexadecimal fields (LID, out_reads, QPN, PSN, rkey, vaddr, 16 GID bytes,
// SRQN).
func parseTextDest(b []byte) (dest, error) {
	var d dest
	if len(b) < textDestGIDLen {
		return d, errShort
	}
	b = b[:textDestGIDLen]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	f := strings.Split(string(b), ":")
	if len(f) < 23 {
		return d, errTextDest
	}
	v := make([]uint64, 23)
	for i := range v {
		x, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil || (i >= 6 && i < 22 && x > 0xff) {
			return d, errTextDest
		}
		v[i] = x
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey = uint32(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4])
	d.VAddr = v[5]
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	d.SRQN = uint32(v[22])
	return d, nil
}

// gidIPv4 reports whether gid is an IPv4-mapped address (ipv6_addr_v4mapped), the check
// of ctx_check_gid_compatibility.
func gidIPv4(gid [16]byte) bool {
	return gid[0]|gid[1]|gid[2]|gid[3]|gid[4]|gid[5]|gid[6]|gid[7]|gid[8]|gid[9] == 0 && gid[10] == 0xff && gid[11] == 0xff
}

// parseDest decodes a pingpong_dest message.
func parseDest(b []byte) (dest, error) {
	if len(b) < destLen {
		return dest{}, errShort
	}
	be := binary.BigEndian
	d := dest{LID: be.Uint32(b[0:]), OutReads: be.Uint32(b[4:]), QPN: be.Uint32(b[8:]),
		PSN: be.Uint32(b[12:]), RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:]),
		SRQN: be.Uint32(b[48:]), GIDIndex: be.Uint32(b[52:])}
	copy(d.GID[:], b[32:48])
	return d, nil
}

// versionMsg is the 16-byte version message.
func versionMsg(v string) []byte {
	b := make([]byte, versionLen)
	copy(b[:versionLen-1], v)
	return b
}

// parseVersion returns the peer's version as perftest reads it (atof of the string).
func parseVersion(b []byte) (string, float64, error) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	s := string(b)
	// atof reads the longest numeric prefix.
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	f, err := strconv.ParseFloat(strings.TrimRight(s[:end], "."), 64)
	if err != nil {
		return s, 0, errors.New("perftest: peer sent no version number")
	}
	return s, f, nil
}

func int32Msg(v int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func parseInt32(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, errShort
	}
	return int(int32(binary.BigEndian.Uint32(b))), nil
}

// mtuMsg is check_mtu's message: sprintf("%d") of the ibv_mtu enum, 2 bytes.
func mtuMsg(mtu int) []byte {
	return []byte{byte('0' + mtu%10), 0}
}

// parseMTU reads the peer's MTU enum (strtol of the 2 bytes); 0 if it is not 1..5.
func parseMTU(b []byte) int {
	if len(b) < 1 || b[0] < '1' || b[0] > '5' {
		return 0
	}
	return int(b[0] - '0')
}

// bwReport is perftest's struct bw_report_data, as far as xchg_bw_reports sends it.
type bwReport struct {
	Size, Iters           uint64
	Peak, Avg, MsgRateAvg float64 // MB/s or Gb/s (the sender's --report_gbits), Mpps
}

// messages returns the five report messages (big-endian; iters is 8 bytes for peers
// from version 5.33 on, else 4).
func (r *bwReport) messages(remVersion float64) [][]byte {
	be := binary.BigEndian
	iters := be.AppendUint64(nil, r.Iters)
	if remVersion < longIters {
		iters = be.AppendUint32(nil, uint32(r.Iters))
	}
	return [][]byte{be.AppendUint64(nil, r.Size), iters, be.AppendUint64(nil, math.Float64bits(r.Peak)),
		be.AppendUint64(nil, math.Float64bits(r.Avg)), be.AppendUint64(nil, math.Float64bits(r.MsgRateAvg))}
}

// setField stores report message i (in messages order) received from the peer.
func (r *bwReport) setField(i int, b []byte, remVersion float64) error {
	be := binary.BigEndian
	n := 8
	if i == 1 && remVersion < longIters {
		n = 4
	}
	if len(b) < n {
		return errShort
	}
	switch i {
	case 0:
		r.Size = be.Uint64(b)
	case 1:
		if n == 4 {
			r.Iters = uint64(be.Uint32(b))
		} else {
			r.Iters = be.Uint64(b)
		}
	case 2:
		r.Peak = math.Float64frombits(be.Uint64(b))
	case 3:
		r.Avg = math.Float64frombits(be.Uint64(b))
	case 4:
		r.MsgRateAvg = math.Float64frombits(be.Uint64(b))
	}
	return nil
}

// loadCredit reads the 32-bit credit counter that the peer's RDMA WRITEs update in place
// (perftest's send credits for iWARP: a host-order, i.e. little-endian on the machines
// perftest runs on, uint32 count of receives completed). The memory is written by the
// transport like DMA, with no completion at this end, so it is polled, as perftest
// does; an aligned 32-bit load cannot tear. The race detector cannot see the transport's
// ordering, hence norace; noinline keeps each call a fresh load.
//
//go:norace
//go:noinline
func loadCredit(p *byte) uint32 {
	v := *(*uint32)(unsafe.Pointer(p))
	var b [4]byte
	*(*uint32)(unsafe.Pointer(&b[0])) = v
	return binary.LittleEndian.Uint32(b[:])
}

// storeCredit resets a credit counter in place (see loadCredit).
//
//go:norace
//go:noinline
func storeCredit(p *byte, v uint32) {
	*(*uint32)(unsafe.Pointer(p)) = v
}

// loadByte reads a byte the peer's RDMA Writes update in place (ib_write_lat's poll
// byte), a fresh load at every call.
//
//go:norace
//go:noinline
func loadByte(p *byte) byte { return *p }
