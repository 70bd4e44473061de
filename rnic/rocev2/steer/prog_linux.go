//go:build linux

package steer

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// struct sk_reuseport_md field offsets (include/uapi/linux/bpf.h; data and
// data_end are 64-bit __bpf_md_ptr fields).
const (
	mdData    = 0
	mdDataEnd = 8
)

// Program return values (enum sk_action, include/uapi/linux/bpf.h).
const (
	skDrop = 0
	skPass = 1
)

// Counter indexes in the program's per-CPU counter array; Stats sums them.
const (
	cntSteered  = iota // selected the slot mapped to the QPN
	cntDefault         // QPN not mapped (QP1, unknown): slot 0
	cntShort           // too short to hold a BTH: slot 0
	cntFallback        // mapped slot has no socket: slot 0
	cntDropped         // slot 0 has no socket either: dropped
	numCounters
)

// bthQPOffset is where the program loads BTH bytes 4..7 (reserved byte and
// 24-bit DestQP, IBTA Vol. 1 §9.2) from: the skb an SK_REUSEPORT program
// gets for UDP starts at the UDP header (8 bytes).
const bthQPOffset = 8 + 4

// steerProgram returns the SK_REUSEPORT program: it reads the BTH DestQP,
// looks it up in qpns (u32 QPN → u32 slot) and selects that slot of socks;
// an unmapped QPN, a packet too short for a BTH, or a mapped slot with no
// socket select slot 0; if slot 0 has no socket the packet is dropped. It
// counts each outcome in counters (per-CPU u64 array). DestQP is read in
// place when the skb's linear data holds it, else copied out with
// bpf_skb_load_bytes (a payload in page fragments, e.g. sent with
// MSG_ZEROCOPY). Bytes are read one at a time, so the program is endian
// neutral and makes no unaligned loads.
func steerProgram(qpns, socks, counters *ebpf.Map) asm.Instructions {
	const (
		ctx = asm.R6 // struct sk_reuseport_md *
		qpn = asm.R7
		tmp = asm.R8
		cnt = asm.R9 // counter index of the outcome
		// stack slots (offsets from R10)
		bth  = -8  // 4 bytes loaded from the packet
		key  = -4  // u32 QPN, key of qpns
		slot = -12 // u32 slot, key of socks
		ckey = -16 // u32 counter index
	)
	// loadQPN sets qpn to the 24-bit big-endian DestQP in bytes 1..3 at
	// base+off (BTH bytes 5..7).
	loadQPN := func(base asm.Register, off int16) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(qpn, base, off+1, asm.Byte),
			asm.LSh.Imm(qpn, 16),
			asm.LoadMem(tmp, base, off+2, asm.Byte),
			asm.LSh.Imm(tmp, 8),
			asm.Or.Reg(qpn, tmp),
			asm.LoadMem(tmp, base, off+3, asm.Byte),
			asm.Or.Reg(qpn, tmp),
		}
	}
	// sel calls bpf_sk_select_reuseport(ctx, socks, fp+slot, 0).
	sel := asm.Instructions{
		asm.Mov.Reg(asm.R1, ctx),
		asm.LoadMapPtr(asm.R2, socks.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, slot),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
	}
	// count adds 1 to counters[cnt] (per-CPU: no atomics needed).
	count := func(sym string) asm.Instructions {
		return asm.Instructions{
			asm.StoreMem(asm.RFP, ckey, cnt, asm.Word).WithSymbol(sym),
			asm.LoadMapPtr(asm.R1, counters.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, ckey),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, sym+"_done"),
			asm.LoadMem(tmp, asm.R0, 0, asm.DWord),
			asm.Add.Imm(tmp, 1),
			asm.StoreMem(asm.R0, 0, tmp, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(sym + "_done"),
		}
	}
	p := asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		// Read DestQP in place when the linear data holds it, else copy
		// it out with bpf_skb_load_bytes, which fails for a short packet.
		asm.LoadMem(asm.R2, ctx, mdData, asm.DWord),
		asm.LoadMem(asm.R3, ctx, mdDataEnd, asm.DWord),
		asm.Mov.Reg(tmp, asm.R2),
		asm.Add.Imm(tmp, bthQPOffset+4),
		asm.JGT.Reg(tmp, asm.R3, "copy"),
	}
	p = append(p, loadQPN(asm.R2, bthQPOffset)...)
	p = append(p,
		asm.Ja.Label("lookup"),
		// bpf_skb_load_bytes(ctx, 12, fp+bth, 4)
		asm.Mov.Reg(asm.R1, ctx).WithSymbol("copy"),
		asm.Mov.Imm(asm.R2, bthQPOffset),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, bth),
		asm.Mov.Imm(asm.R4, 4),
		asm.FnSkbLoadBytes.Call(),
		asm.Mov.Imm(cnt, cntShort),
		asm.JNE.Imm(asm.R0, 0, "daemon"),
	)
	p = append(p, loadQPN(asm.RFP, bth)...)
	p = append(p,
		asm.StoreMem(asm.RFP, key, qpn, asm.Word).WithSymbol("lookup"),
		// slot = qpns[qpn], or the daemon
		asm.LoadMapPtr(asm.R1, qpns.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.FnMapLookupElem.Call(),
		asm.Mov.Imm(cnt, cntDefault),
		asm.JEq.Imm(asm.R0, 0, "daemon"),
		asm.LoadMem(tmp, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, slot, tmp, asm.Word),
	)
	p = append(p, sel...)
	p = append(p,
		asm.Mov.Imm(cnt, cntFallback),
		asm.JNE.Imm(asm.R0, 0, "daemon"),
		asm.Mov.Imm(cnt, cntSteered),
		asm.Ja.Label("pass"),
		// daemon: select slot 0
		asm.Mov.Imm(tmp, 0).WithSymbol("daemon"),
		asm.StoreMem(asm.RFP, slot, tmp, asm.Word),
	)
	p = append(p, sel...)
	p = append(p, asm.JEq.Imm(asm.R0, 0, "pass"), asm.Mov.Imm(cnt, cntDropped))
	p = append(p, count("drop")...)
	p = append(p, asm.Mov.Imm(asm.R0, skDrop), asm.Return())
	p = append(p, count("pass")...)
	p = append(p, asm.Mov.Imm(asm.R0, skPass), asm.Return())
	return p
}
