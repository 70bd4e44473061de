// Package mpa implements MPA, Marker PDU Aligned framing for TCP (RFC 5044),
// with the enhanced connection establishment of RFC 6581 (MPA revision 2:
// IRD/ORD negotiation, peer-to-peer model, RTR indications). It is a codec:
// no goroutines, sockets or logging. It imports nothing of softrnic.
//
// # Startup: Request/Reply frames (RFC 5044 §7.1, RFC 6581 §§6, 9)
//
// Frame is one MPA Request or Reply Frame. To receive one from a socket,
// read HeaderLen (20) bytes, call FrameLen (or FrameLenMax with
// SiwMaxPrivateData towards Linux siw) for the total size, read the rest
// and call ParseFrame; PrivateData aliases the buffer. Encode with
// f.Append(buf) (no allocation when buf has f.Len() bytes of room). When
// Enhanced (the S bit) is set, the 4-byte RFC 6581 §9 word is split into
// IRD, ORD, P2P and RTR and PrivateData is the ULP data after it.
// Reserved bits (e.g. siw's private GSO bit 0x0800) survive a round trip.
//
// Negotiation is pure:
//
//	initiator:  req, err := mpa.Request(cfg, ulpData)        // send req.Append(nil)
//	responder:  rep, p, err := mpa.Respond(cfg, &req, ulpData) // send rep if rep.Reply
//	initiator:  p, err := mpa.Complete(cfg, &req, &rep)
//
// Respond answers a rev-2 S request with a rev-2 S reply and otherwise
// echoes the request's revision (what siw does and requires), sets C if
// either side wants CRC, and computes IRD/ORD and the RTR type. Its errors
// are *Error: with CodeInvalidReqRep and a zero reply the request was
// improperly formatted, so close TCP without replying; with reply.Reject
// set, send the reject and exit MPA. Complete returns ErrRejected for a
// reject (Params still carry the peer's IRD/ORD), *Error CodeInvalidReqRep
// for a bad reply (close TCP), and *Error CodeInsufficientIRD (0x06) or
// CodeNoMatchingRTR (0x07), which must be sent in a Terminate with
// Layer 2 (LLP), EType 0 (MPA) before closing (RFC 6581 §§8-9).
//
// Params is the result. Markers are negotiated per direction (RFC 5044
// §7.1.1: M asks the peer to send Markers), so Params has TxMarkers and
// RxMarkers rather than one Markers flag; p.TxFraming() and p.RxFraming()
// give the FramingOptions for the Writer and the Reader. In the
// peer-to-peer model the initiator must send p.RTR as its first FPDU and the
// responder must see one of p.RTR first (RFC 6581 §9.2); the RTR messages
// themselves are built by the DDP/RDMAP layer. A responder must not send
// any FPDU before it has received the initiator's first FPDU (RFC 5044
// §7.1.2 rule 4); siw fails the connection if data follow its reply early.
//
// Towards Linux siw (see specs/siw-interop-facts.md §3-4) use Rev 2 (the
// default), MaxPrivateData: SiwMaxPrivateData, Markers false: siw rejects
// M=1, requires a rev-2 S reply to its S request, echoes rev and C, and
// caps private data at 256 octets (252 of ULP data with S).
//
// # Full operation: FPDUs (RFC 5044 §4)
//
// Writer frames one ULPDU per WriteFPDU(hdr, payload): ULPDU_Length, the
// ULPDU, zero pad to a multiple of 4, and the CRC32c (a zero field when CRC
// is off, as siw sends). With Markers it inserts a Marker every 512 octets
// counted from the first FPDU's position (the first Marker, value 0,
// precedes the first FPDU; FramingOptions.StreamOffset resumes a stream),
// each pointing back at its FPDU's length field, and includes Markers in the
// CRC (§4.3, §4.4). The whole FPDU leaves in one net.Buffers WriteTo
// (writev on a TCP connection) built from the caller's slices: no payload
// copy, no allocation. QueueFPDU frames the same way into a batch that Flush
// writes with one WriteTo, so many FPDUs cost one system call.
//
// Reader deframes: Next() returns the ULPDU length; the caller reads the
// DDP header with ReadFull into a small buffer, picks the destination, and
// ReadFulls the payload straight into it (without Markers, large reads
// bypass the internal buffer, so data are copied once, kernel to
// destination; if the io.Reader is a VectoredReader, such a read also
// refills the buffer with what follows, e.g. the pad, CRC and next header,
// in the same call); Discard skips;
// End consumes pad, Markers and CRC and returns *Error CodeCRC (0x02) or
// CodeMarker (0x03). Data placed before End returns nil are tentative.
// InBuffered reports read-ahead. io.EOF from Next is a clean end of stream,
// io.ErrUnexpectedEOF a stream cut inside an FPDU (MPA code 0x01).
//
// MULPDU(emss, markers) gives the largest ULPDU per FPDU (RFC 5044 §4.5):
// EMSS - (6 + EMSS mod 4), minus 4*ceil(EMSS/512) with Markers, at least 128.
//
// CRC32c is internal/fastcrc's: hash/crc32's, folded with AVX-512 carry-less
// multiplications on long buffers where the CPU has them. The CRC field is the
// little-endian encoding of the value (RFC 5044 Figure 5:
// 0x83992352 is sent as 52 23 99 83).
package mpa
