package rnic

import (
	"encoding/binary"
	"errors"
)

// RemoteBuffer names a region a peer may access one-sided: its tagged offset (the IOVA of
// the first byte, RFC 5040 §2 "Tagged Offset"), the STag granting the access (the rkey)
// and its length. It is what an application advertises to its peer — in private data or a
// Send — before RDMA WRITE and READ, and what [MR.RemoteBuffer] returns.
//
// Its wire form ([RemoteBuffer.Append], [ParseRemoteBuffer]) is the 16-byte layout of
// rdma-core rping's struct rping_rdma_info, all big-endian:
//
//	offset  size  field
//	0       8     Addr
//	8       4     RKey
//	12      4     Len
//
// so rping, the daemon's memory target and every softrnic tool read each other's
// advertisements.
type RemoteBuffer struct {
	Addr uint64 // tagged offset of the first byte
	RKey uint32 // STag granting the remote access
	Len  uint32 // bytes
}

// RemoteBufferLen is the length of a RemoteBuffer's wire form.
const RemoteBufferLen = 16

// ErrShortRemoteBuffer is returned by ParseRemoteBuffer for fewer than RemoteBufferLen bytes.
var ErrShortRemoteBuffer = errors.New("rnic: remote buffer advertisement shorter than 16 bytes")

// Append appends the 16-byte wire form to b.
func (r RemoteBuffer) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, r.Addr)
	b = binary.BigEndian.AppendUint32(b, r.RKey)
	return binary.BigEndian.AppendUint32(b, r.Len)
}

// ParseRemoteBuffer reads the wire form from the first 16 bytes of b (trailing bytes, such
// as the rest of a 196-byte REP private data, are ignored).
func ParseRemoteBuffer(b []byte) (RemoteBuffer, error) {
	if len(b) < RemoteBufferLen {
		return RemoteBuffer{}, ErrShortRemoteBuffer
	}
	return RemoteBuffer{Addr: binary.BigEndian.Uint64(b), RKey: binary.BigEndian.Uint32(b[8:]),
		Len: binary.BigEndian.Uint32(b[12:])}, nil
}

// RemoteBuffer returns the advertisement of bytes [off, off+n) of the region: its tagged
// offset, the region's rkey and n. The caller chooses a range inside the region; it needs
// a remote access right for the peer to use it.
func (m *MR) RemoteBuffer(off, n int) RemoteBuffer {
	return RemoteBuffer{Addr: m.Addr() + uint64(off), RKey: m.RKey(), Len: uint32(n)}
}
