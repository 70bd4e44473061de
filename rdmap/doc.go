// Package rdmap implements the wire format of the RDMA Protocol (RFC 5040)
// and its extensions for Immediate Data and Atomics (RFC 7306), with the
// error registries of RFC 6580.
//
// It is a codec: no goroutines, sockets or logging; fixed headers are views
// read in place and encoders append to the caller's buffer without
// allocating when it has capacity. rdmap imports ddp; nothing here imports
// mpa.
//
// # Control byte and opcodes (RFC 5040 §4.1, RFC 7306 §4.1)
//
// RDMAP's control byte is the first DDP RsvdULP octet (ddp header byte 1):
// RV in the top two bits (Version 1), two reserved bits, the 4-bit [Opcode].
// [Control] builds it; [ControlVersion] and [ControlOpcode] take it apart.
// Opcodes 0-11 have String names and per-opcode rules: [Opcode.Tagged]
// (Write, Read Response), [Opcode.Queue] (QN 0 Sends and Immediate Data, 1
// Read Request and Atomic Request, 2 Terminate, 3 Atomic Response),
// [Opcode.CarriesInvalidateSTag] (Send with Invalidate, Send with SE and
// Invalidate), [Opcode.SolicitedEvent], [Opcode.CarriesPayload],
// [Opcode.HeaderLen] and [Opcode.Extension] (the RFC 7306 opcodes, which
// Linux siw rejects). [CheckSegment] validates a received segment's
// DDP/RDMAP header combination in siw's order.
//
// # Messages
//
//   - [ReadRequest] (RFC 5040 §4.4): a 28-byte view after the DDP header —
//     sink STag, sink TO, size, source STag, source TO — with
//     [ParseReadRequest], [AppendReadRequest], Check (TO wrap) and Advance
//     (the updated header a Terminate echoes).
//   - [Terminate] (RFC 5040 §4.8): [ParseTerminate], Append, Len, with the
//     error triple, the M/D/R bits, the DDP segment length, the echoed DDP
//     header (14 or 18 bytes by its T bit) and the echoed Read Request header.
//     [IncludeHeaders] is Figure 10; [TerminateFor] builds a Terminate from a
//     received segment; [AppendTerminateMessage] adds the QN 2 DDP header.
//   - Immediate Data (RFC 7306 §6): [ParseImmediate], [AppendImmediate]; the
//     message carries exactly 8 bytes.
//   - [AtomicRequest] and [AtomicResponse] (RFC 7306 §5.2): Parse, Append,
//     Len; AtomicRequest.Check (known AOpCode, 8-byte aligned TO) and
//     AtomicRequest.Apply (masked FetchAdd and CmpSwap of §5.1).
//
// # Errors
//
// [TerminateError]{Layer, Type, Code} is the common protocol error of all
// three layers; it implements error, compares by value, and matches with
// errors.Is. Every RDMAP and MPA triple of RFC 5040 §4.8, RFC 6580 and
// RFC 6581 is a named value (TermInvalidSTag, TermUnexpectedOpcode,
// TermMPACRC, …) and every code a named constant. [FromDDP] converts a
// *ddp.Error, [FromLLP] an MPA code, and [AsTerminateError] finds either in
// an error chain. Parse failures are the sentinels [ErrShort], [ErrLength],
// [ErrTrailing]; [ErrVersion] and [ErrOpcode] match the corresponding
// TerminateError values. No input makes any function panic.
package rdmap
