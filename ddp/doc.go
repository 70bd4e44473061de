// Package ddp implements the wire format and receive-side state of the
// Direct Data Placement protocol (RFC 5041) as used by iWARP over MPA.
//
// It is a codec: no goroutines, sockets or logging, and no allocation on the
// hot paths.
//
// # Headers (RFC 5041 §4)
//
// A DDP header starts right after the 2-byte MPA ULPDU_Length. Byte 0 is the
// DDP control field (T 0x80, L 0x40, four reserved bits, DV 0x03 = version 1);
// byte 1 is the first RsvdULP octet, which RDMAP uses as its control byte.
//
//	Tagged   (TaggedLen = 14):   ctrl | ulp | STag(4) | TO(8)
//	Untagged (UntaggedLen = 18): ctrl | ulp | RsvdULP(4) | QN(4) | MSN(4) | MO(4)
//
// [Tagged] and [Untagged] are byte-slice views read and written in place; the
// caller checks IsValid (a length check) before using the accessors. [Check]
// validates a received header (length for its model, DV == 1) and returns its
// length. [IsTaggedHeader] peeks at the T bit. All multi-byte fields are
// big-endian.
//
// # Sequence numbers and queues
//
// [MSN] is the 32-bit Message Sequence Number with wrap-safe comparison
// (RFC 5041 §4.3: starts at 1, wraps to 0). Queue numbers used by RDMAP are
// [QNSend] (0), [QNReadRequest] (1), [QNTerminate] (2) (RFC 5040 §5) and
// [QNAtomicResponse] (3, RFC 7306 §5.2).
//
// # Segmentation (RFC 5041 §5.2)
//
// [NewSegmenter] cuts a message of a given length into segments that fit a
// MULPDU after a header of a given size; [Segmenter.Next] yields
// (offset, length, last) per segment without allocating. A zero-length
// message yields exactly one zero-length last segment.
//
// # Receive-side validation (RFC 5041 §7.1)
//
// [UntaggedQueue] is the state of one untagged queue at the Data Sink: the
// next MSN to deliver, the number of posted buffers, the MO bounds of each
// segment against its buffer, and the last-segment rule (the L segment carries
// the highest MO; nothing may follow it). [UntaggedQueue.Accept] validates and
// records a segment; [UntaggedQueue.Deliver] pops completed messages in MSN
// order. [CheckQN] validates a queue number. [TaggedStream] validates the
// segments of the tagged message in progress (same STag, contiguous TO, as
// siw requires) and [CheckTaggedBounds] the bounds and TO-wrap rules.
//
// # Errors (RFC 5041 §7.2, RFC 6580 §3.2)
//
// Protocol violations are *[Error] values carrying the DDP error type and
// code (the layer is DDP, 1). Predefined values such as [ErrInvalidSTag] and
// [ErrMSNRange] are returned without allocation; *Error implements Is so
// errors.Is matches on type and code. Version errors also match [ErrVersion],
// and truncated input is [ErrShort]. Package rdmap converts *Error into a
// Terminate error.
package ddp
