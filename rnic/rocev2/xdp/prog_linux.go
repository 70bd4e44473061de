//go:build linux

package xdp

import (
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

// redirectProgram returns the XDP program: IPv4 (unfragmented, any IHL) and
// IPv6 UDP packets to port are redirected to xsks[rx_queue_index]; all else,
// and packets for a queue without a socket (bpf_redirect_map's fallback
// action in the flags argument), pass to the kernel stack. Multi-byte
// fields are read a byte at a time so the program is endian neutral.
func redirectProgram(xsks *ebpf.Map, port uint16) asm.Instructions {
	const (
		ctx  = asm.R6
		data = asm.R2
		end  = asm.R3
		tmp  = asm.R4
		v    = asm.R5
		w    = asm.R7
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
	label := func(name string, in asm.Instructions) asm.Instructions {
		in[0] = in[0].WithSymbol(name)
		return in
	}
	var p asm.Instructions
	p = append(p,
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, mdData, asm.Word),
		asm.LoadMem(end, ctx, mdDataEnd, asm.Word),
	)
	p = append(p, need(14)...)
	p = append(p, be16(12)...) // EtherType
	p = append(p,
		asm.JEq.Imm(v, 0x86DD, "ipv6"),
		asm.JNE.Imm(v, 0x0800, "pass"),
	)
	// IPv4 (RFC 791): protocol 17, MF clear and fragment offset 0.
	p = append(p, need(14+20)...)
	p = append(p,
		asm.LoadMem(v, data, 14+9, asm.Byte),
		asm.JNE.Imm(v, 17, "pass"),
		asm.LoadMem(v, data, 14+6, asm.Byte),
		asm.LoadMem(w, data, 14+7, asm.Byte),
		asm.And.Imm(v, 0x3F),
		asm.Or.Reg(v, w),
		asm.JNE.Imm(v, 0, "pass"),
		asm.LoadMem(v, data, 14, asm.Byte),
		asm.And.Imm(v, 0x0F),
		asm.LSh.Imm(v, 2),
		asm.JLT.Imm(v, 20, "pass"),
		asm.Add.Reg(data, v),
		asm.Add.Imm(data, 14),
		asm.Ja.Label("udp"),
	)
	// IPv6 (RFC 8200): next header 17 (no extension headers).
	p = append(p, label("ipv6", need(14+40))...)
	p = append(p,
		asm.LoadMem(v, data, 14+6, asm.Byte),
		asm.JNE.Imm(v, 17, "pass"),
		asm.Add.Imm(data, 14+40),
	)
	// UDP (RFC 768): destination port.
	p = append(p, label("udp", need(8))...)
	p = append(p, be16(2)...)
	p = append(p,
		asm.JNE.Imm(v, int32(port), "pass"),
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
