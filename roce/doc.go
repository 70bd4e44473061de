// Package roce is the RoCEv2 wire codec: the InfiniBand transport headers
// carried over UDP port 4791 (IBTA Vol.1 chapter 9, Annex A17), the ICRC,
// 24-bit PSN arithmetic, and the IB CM MADs and RDMA-CM conventions used to
// set up connections. It has no goroutines, sockets or logging, and its hot
// paths (ParsePacket, Header.Append, the ICRC functions) do not allocate.
// It must be byte-for-byte compatible with Linux rxe; the tests decode and
// re-encode rxe's own packets (roce/testdata, captured by tests/interop).
//
// # Packets
//
// A RoCEv2 UDP payload is BTH, the extended transport headers (ETHs) of the
// opcode, the payload, 0-3 pad bytes and a 4-byte ICRC. ParsePacket splits
// one into typed views without copying:
//
//	p, err := roce.ParsePacket(udpPayload)
//	switch {
//	case err != nil: // drop and count
//	case p.Opcode().IsRequest(): // p.BTH.PSN(), p.RETH.RKey(), p.Payload …
//	case p.AETH != nil: // p.AETH.Syndrome().IsNAK(), p.AETH.MSN() …
//	}
//
// The fixed headers are []byte views with offset constants, accessors,
// setters and IsValid: BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt,
// IETH, DETH and FETH. Views of headers the opcode does not carry are nil.
// ParsePacket checks structure only (opcode, TVer, lengths, pad, payload
// rules). QPN, P_Key, PSN and the ICRC are the transport's business.
//
// Opcodes: Opcode.Info returns the table entry of every RC, UC and UD opcode
// and the RoCEv2 CNP. It gives the name, the ETHs in wire order with their
// offsets, the header length, whether the opcode has a payload (and whether
// that payload has a fixed size), its place in a message (IsFirst, IsMiddle,
// IsLast, IsOnly), and its role (IsRequest, IsResponse, RequiresAck,
// ExpectsResponseData, and the Flag* bits). RD and XRC opcodes are
// rejected (rxe does not implement RD either). PacketOpcode picks the
// FIRST/MIDDLE/LAST/ONLY opcode for each packet of a message, and
// PacketCount gives the number of packets (and PSNs) a message takes at a
// path MTU.
//
// Building: fill a Header (every BTH and ETH field), then, with start the
// offset of the BTH in b,
//
//	b = h.Append(b, len(payload))   // BTH + ETHs, PadCnt set
//	b = append(b, payload...)
//	b = roce.AppendPad(b, len(payload))
//	b = roce.AppendICRC(b, roce.ICRCv4(src, dst, ipID, true, sport, roce.UDPPort, b[start:]))
//
// A sender that keeps the payload in registered memory can skip the copy
// and compute the ICRC incrementally with ICRCStartV4/ICRCStartV6,
// ICRCAddTransport (the buffer starting with the BTH) and ICRCAdd (the
// payload and pad). VerifyICRC checks a whole IP packet. ICRC works from
// real IP and UDP headers. Note that the IPv4 ICRC covers the IP ID and the
// flags, so a receiver on a plain UDP socket cannot verify it exactly:
// SolveICRCIPv4ID takes the ICRC computed with ID 0 (and DF) and the one
// received and returns the ID that makes them agree, if any (CRC linearity;
// a 16-bit check that detects every single-bit error).
// AppendCNP builds a congestion notification packet. For raw or AF_XDP
// links, AppendIPv4UDP and AppendIPv6UDP write the IP and UDP headers as
// rxe does (DF set, UDP checksum 0).
//
// # Transport helpers
//
// PSN is a 24-bit sequence number with wrap-safe Add, Sub, Distance, Less
// and InWindow. Syndrome encodes and decodes the AETH syndrome: ACK with a
// credit count (SyndromeACK is rxe's "unlimited" 0x1F), RNR NAK with an
// RNRTimer (table 45; Micros, Duration, and RNRTimerFor going the other
// way), and NAK with a NAKCode (PSN sequence error, invalid request, remote
// access error, remote operational error, invalid RD request). TimeoutExp
// converts the 5-bit timeout exponents (4.096 µs × 2^n). MTU is the IB path
// MTU enum, and MTUForNetdev picks one as Linux does. UDPSourcePort,
// CalcFlowLabel and FlowLabelToUDPSourcePort follow Linux's
// rdma_get_udp_sport for the per-flow UDP source port.
//
// # Connection management
//
// CM MADs ride in UD SEND_ONLY packets to QP1 (DETH Q_Key GSIQKey, source
// QP 1) with a 256-byte payload. ParseMAD splits it into a MADHeader and
// the 232 message bytes. ParseREQ, ParseREP, ParseRTU, ParseREJ, ParseMRA,
// ParseDREQ, ParseDREP, ParseSIDRREQ and ParseSIDRREP decode those bytes
// into structs carrying every field of IBTA Vol.1 tables 106-120 (the
// private data is a fixed-size array). Append writes them back. Reserved
// bits are ignored on parse and written as zero. AppendCMMAD writes a whole
// MAD with the CM header (class 7, version 2, method SEND). RejectReason
// names the REJ reasons. A CM packet to the peer's QP1 is therefore as
// follows (rxe sets AckReq and counts the PSN up per packet on QP1, as in
// the captured REQ retries):
//
//	h := roce.Header{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 1,
//		AckReq: true, PSN: qp1PSN, QKey: roce.GSIQKey, SrcQP: 1}
//	b = h.Append(b, roce.MADLen)
//	b = roce.AppendCMMAD(b, tid, &req)
//	b = roce.AppendICRC(b, roce.ICRCv4(…, b[start:]))
//
// RDMA-CM puts a 36-byte CMAHeader (cma_hdr) at the start of REQ private
// data. It holds a version, the IP version, the active side's port, and the
// source and destination addresses. The service ID is
// ServiceID(PortSpaceTCP, port) = 0x0000000001060000 | port for RC.
// ServiceIDPort splits one. RoCEv2 GIDs are IPv6 addresses, or IPv4-mapped
// ones for IPv4 (CMPath.LocalAddr, GIDFromAddr).
//
// # Errors
//
// Parse failures are the sentinel errors in errors.go (ErrShort,
// ErrBadOpcode, ErrBadVersion, ErrBadLength, ErrBadPad, ErrPayload,
// ErrBadICRC, …). Use errors.Is to test for them.
package roce
