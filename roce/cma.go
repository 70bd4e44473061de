package roce

import "net/netip"

// RDMA-CM conventions on IB/RoCE (Linux drivers/infiniband/core/cma.c,
// include/rdma/rdma_cm.h).

// Port spaces (enum rdma_ucm_port_space).
const (
	PortSpaceSDP   = 0x0001
	PortSpaceIPoIB = 0x0002
	PortSpaceIB    = 0x013F
	PortSpaceTCP   = 0x0106 // RC connections (rping, most applications)
	PortSpaceUDP   = 0x0111 // UD, resolved with SIDR
)

// Service ID masks.
const (
	ServiceIDIPPSMask uint64 = 0xFFFFFFFFFFFF0000 // RDMA_IB_IP_PS_MASK
	ServiceIDTCP      uint64 = 0x0000000001060000 // RDMA_IB_IP_PS_TCP
	ServiceIDUDP      uint64 = 0x0000000001110000 // RDMA_IB_IP_PS_UDP
	ServiceIDIB       uint64 = 0x00000000013F0000 // RDMA_IB_IP_PS_IB
)

// ServiceID returns the CM service ID RDMA-CM uses for a port in a port
// space: port_space<<16 | port (rdma_get_service_id). ServiceID(PortSpaceTCP,
// 7174) == 0x0000000001061c06.
func ServiceID(portSpace, port uint16) uint64 { return uint64(portSpace)<<16 | uint64(port) }

// ServiceIDPort splits an RDMA-CM IP service ID into its port space and port;
// ok is false when sid is not of the form 0x00000000_0PPP_pppp with a known
// IP port space (TCP, UDP or IB).
func ServiceIDPort(sid uint64) (portSpace, port uint16, ok bool) {
	switch sid & ServiceIDIPPSMask {
	case ServiceIDTCP, ServiceIDUDP, ServiceIDIB:
		return uint16(sid >> 16), uint16(sid), true
	}
	return 0, 0, false
}

// CMAHeaderLen is the size of the cma_hdr that RDMA-CM puts at the start of
// REQ and SIDR_REQ private data; an RDMA-CM REQ carries at most 92-36 = 56
// user bytes after it.
const CMAHeaderLen = 36

// CMAVersion is the only cma_hdr version (CMA_VERSION).
const CMAVersion = 0

// CMAHeader is the RDMA-CM header (struct cma_hdr): version, IP version,
// the active side's port, and the source (active) and destination (passive)
// addresses. IPv4 addresses are carried as 12 zero bytes + 4 address bytes.
type CMAHeader struct {
	Version   uint8
	IPVersion uint8 // 4 or 6 (bits 7-4 of byte 1)
	Port      uint16
	Src       netip.Addr
	Dst       netip.Addr
}

// NewCMAHeader returns a version-0 header for the given addresses (both of
// the same family; IPv4-mapped IPv6 addresses count as IPv4) and active-side port.
func NewCMAHeader(src, dst netip.Addr, port uint16) CMAHeader {
	src, dst = src.Unmap(), dst.Unmap()
	v := uint8(6)
	if src.Is4() {
		v = 4
	}
	return CMAHeader{Version: CMAVersion, IPVersion: v, Port: port, Src: src, Dst: dst}
}

// ParseCMAHeader decodes the first 36 bytes of b (REQ private data). It
// fails with ErrBadCMAHeader when the IP version is not 4 or 6; the
// passive side must also reject Version != 0, which is left to the caller.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderLen {
		return CMAHeader{}, ErrShort
	}
	h := CMAHeader{Version: b[0], IPVersion: b[1] >> 4, Port: be.Uint16(b[2:])}
	switch h.IPVersion {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CMAHeader{}, ErrBadCMAHeader
	}
	return h, nil
}

// Len returns CMAHeaderLen.
func (h CMAHeader) Len() int { return CMAHeaderLen }

// Append appends the 36-byte header. Addresses of the wrong family (or
// invalid ones) are written as zeros.
func (h CMAHeader) Append(b []byte) []byte {
	b = append(b, h.Version, h.IPVersion<<4)
	b = be.AppendUint16(b, h.Port)
	b = appendCMAAddr(b, h.Src, h.IPVersion)
	return appendCMAAddr(b, h.Dst, h.IPVersion)
}

func appendCMAAddr(b []byte, a netip.Addr, ipv uint8) []byte {
	var w [16]byte
	switch {
	case ipv == 4 && (a.Is4() || a.Is4In6()):
		v4 := a.Unmap().As4()
		copy(w[12:], v4[:])
	case ipv == 6 && a.IsValid():
		w = a.As16()
	}
	return append(b, w[:]...)
}
