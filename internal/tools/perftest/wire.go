package perftest

// Wire formats of perftest's out-of-band exchange with -R (rdma_cm), as the perftest
// 6.06 sources (Debian bookworm's perftest 4.5+0.17, upstream tag v4.5-0.17) send them.
// Every message is one SEND on the "communication" QP, which is a separate rdma_cm
// connection made before the data connection, on the same port. The receiver posts a
// single 56-byte receive buffer (sizeof(struct pingpong_dest)), so no message is longer.
//
//	message                 bytes  encoding
//	version                 16     NUL-padded ASCII, e.g. "6.06"
//	cycle buffer (page)     4      big-endian int32
//	cache line size         4      big-endian int32
//	MTU                     2      ASCII digit of the ibv_mtu enum (1..5) and a NUL
//	pingpong_dest           56     see dest (HAVE_ENDIAN: fields big-endian)
//	report field            8      big-endian uint64 or IEEE-754 double (size, iters,
//	                               peak, average, message rate: five messages)
//
// In every exchange the client sends first and the server answers after it has received.

import (
	"bytes"
	"encoding/binary"
	"errors"
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
	mtuEnum1024 = 3      // IBV_MTU_1024: what siw reports for a 1500-byte netdev
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
