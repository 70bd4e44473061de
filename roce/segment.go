package roce

// PacketOpcode returns the opcode of one packet of a multi-packet message
// whose single-packet form is only (one of the *_ONLY opcodes of SEND, SEND
// with immediate or invalidate, RDMA WRITE, RDMA WRITE with immediate, or
// RDMA READ RESPONSE, any service). first and last give the packet's place:
// both set is the ONLY opcode itself. The immediate data or invalidate
// R_Key travels in the LAST packet, and a WRITE's RETH in the FIRST. ok is
// false when only is not such an opcode, or for a multi-packet UD message.
func PacketOpcode(only Opcode, first, last bool) (op Opcode, ok bool) {
	if !only.IsOnly() {
		return 0, false
	}
	if first && last {
		return only, true
	}
	svc := only &^ 0x1F
	if only.Service() == ServiceUD {
		return 0, false
	}
	var f, m, l uint8
	switch only & 0x1F {
	case opSendOnly:
		f, m, l = opSendFirst, opSendMiddle, opSendLast
	case opSendOnlyImm:
		f, m, l = opSendFirst, opSendMiddle, opSendLastImm
	case opSendOnlyInv:
		f, m, l = opSendFirst, opSendMiddle, opSendLastInv
	case opWriteOnly:
		f, m, l = opWriteFirst, opWriteMiddle, opWriteLast
	case opWriteOnlyImm:
		f, m, l = opWriteFirst, opWriteMiddle, opWriteLastImm
	case opReadRespOnly:
		f, m, l = opReadRespFirst, opReadRespMiddle, opReadRespLast
	default:
		return 0, false
	}
	switch {
	case first:
		op = svc | Opcode(f)
	case last:
		op = svc | Opcode(l)
	default:
		op = svc | Opcode(m)
	}
	return op, op.Valid()
}

// PacketCount returns how many packets a message of n bytes takes at path
// MTU m: ceil(n / m.Bytes()), and 1 for an empty message. An RDMA READ
// consumes this many PSNs. It returns 0 for an invalid MTU.
func PacketCount(n int, m MTU) int {
	mtu := m.Bytes()
	if mtu == 0 {
		return 0
	}
	if n <= 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}
