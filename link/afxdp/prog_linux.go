//go:build linux

package afxdp

import (
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// xdp_md field offsets (include/uapi/linux/bpf.h).
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
	xdpPass        = 2 // XDP_PASS
)

// redirectProgram returns the XDP program for a port on local: packets to
// local (IPv4 unfragmented with any IHL, or IPv6 without extension headers,
// as local is) whose key protocol<<16 | destination port is in the ports
// map are redirected to xsks[rx_queue_index]; everything else, and packets
// for a queue without a socket (bpf_redirect_map's fallback action in its
// flags argument), pass to the kernel stack. Fields are read a byte at a
// time, so the program is endian neutral and makes no unaligned loads; the
// key is built as a number and stored in native order, as the map's Go
// side writes it.
func redirectProgram(xsks, ports *ebpf.Map, local netip.Addr) asm.Instructions {
	const (
		ctx   = asm.R6
		data  = asm.R2
		end   = asm.R3
		tmp   = asm.R4
		v     = asm.R5
		w     = asm.R7
		proto = asm.R8 // callee-saved: survives the map lookup
	)
	// be16 loads the big-endian 16-bit field at data+off into v.
	be16 := func(off int16) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(v, data, off, asm.Byte),
			asm.LoadMem(w, data, off+1, asm.Byte),
			asm.LSh.Imm(v, 8),
			asm.Or.Reg(v, w),
		}
	}
	// need jumps to pass unless n bytes from data are in the packet.
	need := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(tmp, data),
			asm.Add.Imm(tmp, n),
			asm.JGT.Reg(tmp, end, "pass"),
		}
	}
	// match jumps to pass unless the bytes at data+off are want.
	match := func(off int16, want []byte) asm.Instructions {
		var in asm.Instructions
		for i, b := range want {
			in = append(in, asm.LoadMem(v, data, off+int16(i), asm.Byte), asm.JNE.Imm(v, int32(b), "pass"))
		}
		return in
	}
	p := asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, mdData, asm.Word),
		asm.LoadMem(end, ctx, mdDataEnd, asm.Word),
	}
	p = append(p, need(14)...)
	p = append(p, be16(12)...) // EtherType
	if local.Is4() {
		// IPv4 (RFC 791): MF clear, fragment offset 0, destination local.
		ip := local.As4()
		p = append(p, asm.JNE.Imm(v, 0x0800, "pass"))
		p = append(p, need(14+20)...)
		p = append(p,
			asm.LoadMem(proto, data, 14+9, asm.Byte),
			asm.LoadMem(v, data, 14+6, asm.Byte),
			asm.LoadMem(w, data, 14+7, asm.Byte),
			asm.And.Imm(v, 0x3F),
			asm.Or.Reg(v, w),
			asm.JNE.Imm(v, 0, "pass"),
		)
		p = append(p, match(14+16, ip[:])...)
		p = append(p,
			asm.LoadMem(v, data, 14, asm.Byte),
			asm.And.Imm(v, 0x0F),
			asm.LSh.Imm(v, 2),
			asm.JLT.Imm(v, 20, "pass"),
			asm.Add.Reg(data, v),
			asm.Add.Imm(data, 14),
		)
	} else {
		// IPv6 (RFC 8200): the next header is the transport, destination local.
		ip := local.As16()
		p = append(p, asm.JNE.Imm(v, 0x86DD, "pass"))
		p = append(p, need(14+40)...)
		p = append(p, asm.LoadMem(proto, data, 14+6, asm.Byte))
		p = append(p, match(14+24, ip[:])...)
		p = append(p, asm.Add.Imm(data, 14+40))
	}
	// TCP (RFC 9293) and UDP (RFC 768) both carry the destination port in
	// bytes 2-3.
	p = append(p, need(4)...)
	p = append(p, be16(2)...)
	p = append(p,
		asm.LSh.Imm(proto, 16),
		asm.Or.Reg(proto, v),
		asm.StoreMem(asm.R10, -4, proto, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, ports.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R2, ctx, mdRxQueueIndex, asm.Word),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
	return p
}

// steerKey is the ports map key of a (protocol, port) pair.
func steerKey(proto uint8, port uint16) uint32 { return uint32(proto)<<16 | uint32(port) }
