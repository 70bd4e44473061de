package mpa

// Config is one endpoint's MPA startup configuration (RFC 5044 §7.1, RFC
// 6581 §9). The zero value is a rev-2 endpoint with CRC and Markers off,
// IRD = ORD = 0, client-server model, and the RFC 5044 512-byte limit.
type Config struct {
	// Rev is the highest MPA revision spoken: 1 (RFC 5044) or 2 (RFC 6581).
	// 0 means 2. An initiator with Rev 2 always sends an enhanced (S)
	// request, as Linux siw does.
	Rev uint8
	// CRC sets the C bit: CRCs are used if either side sets C (RFC 5044
	// §7.1.1), so true also means "require".
	CRC bool
	// Markers sets the M bit: require the peer to put Markers in the FPDUs
	// it sends us (RFC 5044 §7.1.1). Markers requested by the peer are
	// always honoured (RFC 5044 §4.3: senders MUST be able to generate them).
	Markers bool
	// IRD and ORD are the local inbound/outbound RDMA Read queue depths
	// (RFC 6581 §9.1), at most MaxIRDORD (which means "not negotiated").
	IRD, ORD uint16
	// MaxIRD is how far an initiator may raise its IRD to meet the
	// responder's ORD before failing with CodeInsufficientIRD; 0 means IRD.
	MaxIRD uint16
	// StrictORD makes a responder reject (CodeInsufficientIRD) a request
	// whose initiator IRD is below ORD instead of lowering its ORD (RFC 6581
	// §9.1 "MAY reject").
	StrictORD bool
	// P2P requests the peer-to-peer model (RFC 6581 §9.2, initiator only).
	P2P bool
	// RTR is the set of RTR indications this endpoint can generate
	// (initiator) or accept (responder). 0 means RTRWrite|RTRRead, Linux
	// siw's set.
	RTR RTRType
	// Offer narrows, for an initiator, the RTR types its Request offers to
	// Offer&RTR (0, or no overlap with RTR: all of RTR); the reply may still
	// pick any type of RTR. It lets one Config accept every type of RTR as a
	// responder but offer only the zero-length Read as an initiator, which a
	// responder must answer with a zero-length Read Response (RFC 5040
	// §5.2.1): proof that the RTR was processed.
	Offer RTRType
	// MaxPrivateData caps PD_Length sent and accepted; 0 means
	// MaxPrivateData (512). Use SiwMaxPrivateData towards Linux siw.
	MaxPrivateData int
}

func (c *Config) rev() uint8 {
	if c.Rev == 0 {
		return 2
	}
	return c.Rev
}

func (c *Config) rtr() RTRType {
	if c.RTR&(RTRSend|RTRWrite|RTRRead) == 0 {
		return RTRWrite | RTRRead
	}
	return c.RTR & (RTRSend | RTRWrite | RTRRead)
}

// offer returns the RTR types an initiator's Request offers.
func (c *Config) offer() RTRType {
	if o := c.Offer & c.rtr(); o != 0 {
		return o
	}
	return c.rtr()
}

func (c *Config) maxPD() int {
	if c.MaxPrivateData <= 0 || c.MaxPrivateData > MaxPrivateData {
		return MaxPrivateData
	}
	return c.MaxPrivateData
}

// Params is the outcome of MPA startup for one endpoint.
type Params struct {
	Rev      uint8 // revision of the Reply
	Enhanced bool  // RFC 6581 negotiation took place
	CRC      bool  // CRCs generated and checked (C set in either frame)
	// TxMarkers: we must put Markers in the FPDUs we send (peer set M);
	// RxMarkers: the FPDUs we receive carry Markers (we set M). Markers are
	// per direction (RFC 5044 §7.1.1), hence two fields.
	TxMarkers, RxMarkers bool
	// IRD and ORD are the local queue depths to use (RFC 6581 §9.1).
	// Without Enhanced they are the configured values.
	IRD, ORD uint16
	// PeerIRD and PeerORD are the values the peer sent (RFC 6581 §9.1: they
	// MUST be passed to the ULP).
	PeerIRD, PeerORD uint16
	// P2P is the peer-to-peer model (RFC 6581 §9.2). For the initiator RTR
	// is the single RTR indication it must send first; for the responder it
	// is the set of indications it must accept as the first FPDU.
	P2P bool
	RTR RTRType
}

// TxFraming returns the FramingOptions for the FPDUs this endpoint sends.
func (p *Params) TxFraming() FramingOptions {
	return FramingOptions{CRC: p.CRC, Markers: p.TxMarkers}
}

// RxFraming returns the FramingOptions for the FPDUs this endpoint receives.
func (p *Params) RxFraming() FramingOptions {
	return FramingOptions{CRC: p.CRC, Markers: p.RxMarkers}
}

func clamp14(v uint16) uint16 {
	if v > MaxIRDORD {
		return MaxIRDORD
	}
	return v
}

// Request builds the initiator's MPA Request Frame (RFC 5044 §7.1.2 rule 1,
// RFC 6581 §9.3) carrying the ULP private data pd (aliased, not copied).
// With Rev 2 the frame is enhanced (S) with the IRD/ORD word; with P2P the
// A flag and the offered RTR types are set, and an ORD of 0 is raised to 1
// when a Read RTR is offered (as siw does). It fails with
// ErrPrivateDataTooLong if PD_Length would exceed cfg's limit.
func Request(cfg Config, pd []byte) (Frame, error) {
	f := Frame{
		Rev:         cfg.rev(),
		CRC:         cfg.CRC,
		Markers:     cfg.Markers,
		PrivateData: pd,
	}
	if f.Rev >= 2 {
		f.Enhanced = true
		f.IRD, f.ORD = clamp14(cfg.IRD), clamp14(cfg.ORD)
		if cfg.P2P {
			f.P2P = true
			f.RTR = cfg.offer()
			if f.RTR&RTRRead != 0 && f.ORD == 0 {
				f.ORD = 1
			}
		}
	}
	if f.PDLength() > cfg.maxPD() {
		return Frame{}, ErrPrivateDataTooLong
	}
	return f, nil
}

// RejectReply builds a Reply Frame with R set answering req (RFC 5044
// §7.1.2 rule 2: private data not acceptable to the ULP). It keeps req's
// revision, C bit and S format (a rev-2 S request gets a rev-2 S reject);
// IRD and ORD are 0. The caller may set IRD/ORD (e.g. the required ORD,
// RFC 6581 §9.1) before encoding.
func RejectReply(req *Frame, pd []byte) Frame {
	rev := req.Rev
	if rev > 2 {
		rev = 2
	}
	return Frame{
		Reply:       true,
		Reject:      true,
		CRC:         req.CRC,
		Rev:         rev,
		Enhanced:    req.Enhanced,
		P2P:         req.Enhanced && req.P2P,
		PrivateData: pd,
	}
}

func invalid(reason string) *Error { return &Error{Code: CodeInvalidReqRep, Reason: reason} }

// Respond is the responder's pure negotiation (RFC 5044 §7.1.2 rule 2, RFC
// 6581 §§9-10): given the local cfg, the parsed request and the ULP private
// data pd for the reply, it returns the Reply Frame to send and the
// negotiated Params.
//
// The reply echoes the request's revision (siw requires a rev-2 S reply to
// a rev-2 S request), sets C if either side wants CRC, sets M from
// cfg.Markers, answers IRD with min(initiator ORD, cfg.IRD) and ORD with
// min(initiator IRD, cfg.ORD) (0x3FFF answered with 0x3FFF), and for P2P
// sets A and picks one offered RTR type (Write, then Read, then Send) or,
// if none is supported, proposes all of cfg's (RFC 6581 §9.2). Read is
// avoided when cfg.IRD is 0; if Read is chosen anyway the local IRD is
// raised to 1 so the zero-length Read RTR can be served (RFC 6581 §9.1).
//
// On failure err is an *Error. If the request is improperly formatted
// (Reply key, unsupported revision, S with Rev < 2 or with a rev-1 cfg,
// PD_Length over the limit) reply is the zero Frame: send nothing and close
// TCP (RFC 5044 §7.1.2 rule 2, CodeInvalidReqRep). If reply.Reject is set,
// send it and exit MPA (CodeInsufficientIRD with cfg.StrictORD). A pd too
// long for the limit gives ErrPrivateDataTooLong and no reply.
func Respond(cfg Config, req *Frame, pd []byte) (reply Frame, p Params, err error) {
	switch {
	case req.Reply:
		return Frame{}, Params{}, invalid("MPA Reply key in a request (initiator/initiator startup)")
	case req.Rev > cfg.rev():
		return Frame{}, Params{}, invalid("unsupported MPA revision")
	case req.Enhanced && (req.Rev < 2 || cfg.rev() < 2):
		return Frame{}, Params{}, invalid("enhanced (S) request not acceptable at this revision")
	case req.PDLength() > cfg.maxPD():
		return Frame{}, Params{}, invalid("private data too long")
	}
	p = Params{
		Rev:       req.Rev,
		Enhanced:  req.Enhanced,
		CRC:       req.CRC || cfg.CRC,
		TxMarkers: req.Markers,
		RxMarkers: cfg.Markers,
		IRD:       cfg.IRD,
		ORD:       cfg.ORD,
	}
	reply = Frame{
		Reply:       true,
		Rev:         req.Rev,
		Enhanced:    req.Enhanced,
		CRC:         p.CRC,
		Markers:     cfg.Markers,
		PrivateData: pd,
	}
	if req.Enhanced {
		p.PeerIRD, p.PeerORD = req.IRD, req.ORD
		// Responder IRD from the initiator ORD.
		if req.ORD == MaxIRDORD {
			reply.IRD = MaxIRDORD
		} else {
			p.IRD = min(req.ORD, clamp14(cfg.IRD))
			reply.IRD = p.IRD
		}
		// Responder ORD from the initiator IRD.
		if req.IRD == MaxIRDORD {
			reply.ORD = MaxIRDORD
		} else {
			if cfg.StrictORD && req.IRD < cfg.ORD {
				rej := RejectReply(req, pd)
				rej.ORD = clamp14(cfg.ORD)
				rej.IRD = reply.IRD
				rej.Markers = cfg.Markers
				if rej.PDLength() > cfg.maxPD() {
					return Frame{}, Params{}, ErrPrivateDataTooLong
				}
				return rej, p, &Error{Code: CodeInsufficientIRD, Reason: "initiator IRD below the required ORD"}
			}
			p.ORD = min(req.IRD, clamp14(cfg.ORD))
			reply.ORD = p.ORD
		}
		if req.P2P {
			reply.P2P, p.P2P = true, true
			sup := cfg.rtr()
			// A Read RTR needs a responder IRD of at least 1 (RFC 6581 §9.1).
			if cfg.IRD == 0 && sup != RTRRead {
				sup &^= RTRRead
			}
			pick := pickRTR(req.RTR&sup, true)
			if pick == 0 {
				pick = sup // propose what we support (RFC 6581 §9.2)
			}
			reply.RTR, p.RTR = pick, pick
			if pick&RTRRead != 0 && p.IRD == 0 {
				p.IRD = 1
				if reply.IRD != MaxIRDORD {
					reply.IRD = 1
				}
			}
		}
	}
	if reply.PDLength() > cfg.maxPD() {
		return Frame{}, Params{}, ErrPrivateDataTooLong
	}
	return reply, p, nil
}

// pickRTR chooses one RTR type from set, preferring Write, then Read (only if
// readOK), then Send: siw never uses the Send RTR and prefers Write.
func pickRTR(set RTRType, readOK bool) RTRType {
	switch {
	case set&RTRWrite != 0:
		return RTRWrite
	case set&RTRRead != 0 && readOK:
		return RTRRead
	case set&RTRSend != 0:
		return RTRSend
	}
	return 0
}

// Complete is the initiator's pure negotiation (RFC 5044 §7.1.2 rule 3,
// RFC 6581 §§9-10): given the local cfg, the request it sent and the parsed
// reply, it returns the negotiated Params.
//
// Errors: an *Error with CodeInvalidReqRep for an improperly formatted or
// inconsistent reply (Request key, revision above the request's, S
// mismatch, PD_Length over the limit): close TCP. ErrRejected (with Params
// holding the peer's IRD/ORD, which RFC 6581 §9.1 says go to the ULP) when R
// is set: exit MPA. An *Error with CodeInsufficientIRD (responder ORD above
// what our IRD can reach, cfg.MaxIRD) or CodeNoMatchingRTR (P2P reply
// without A or without an RTR type we can generate): send a Terminate with
// Layer 2, EType 0 and that code, then close (RFC 6581 §9.1, §9.2).
func Complete(cfg Config, req, rep *Frame) (Params, error) {
	switch {
	case !rep.Reply:
		return Params{}, invalid("MPA Request key in a reply")
	case rep.PDLength() > cfg.maxPD():
		return Params{}, invalid("private data too long")
	case rep.Rev > req.Rev:
		return Params{}, invalid("reply revision above the request's")
	case rep.Enhanced != req.Enhanced:
		return Params{}, invalid("reply S bit does not match the request (RFC 6581 §10)")
	case rep.Enhanced && rep.Rev < 2:
		return Params{}, invalid("enhanced reply with revision below 2")
	}
	p := Params{
		Rev:       rep.Rev,
		Enhanced:  rep.Enhanced,
		CRC:       req.CRC || rep.CRC,
		TxMarkers: rep.Markers,
		RxMarkers: req.Markers,
		IRD:       cfg.IRD,
		ORD:       cfg.ORD,
	}
	if rep.Enhanced {
		p.PeerIRD, p.PeerORD = rep.IRD, rep.ORD
		p.IRD, p.ORD = req.IRD, req.ORD
	}
	if rep.Reject {
		return p, ErrRejected
	}
	if !rep.Enhanced {
		return p, nil
	}
	// Our ORD at most the responder IRD.
	if rep.IRD != MaxIRDORD && rep.IRD < p.ORD {
		p.ORD = rep.IRD
	}
	// Our IRD at least the responder ORD.
	if rep.ORD != MaxIRDORD && rep.ORD > p.IRD {
		maxIRD := clamp14(cfg.MaxIRD)
		if maxIRD < p.IRD {
			maxIRD = p.IRD
		}
		if rep.ORD > maxIRD {
			return p, &Error{Code: CodeInsufficientIRD, Reason: "responder ORD exceeds our IRD"}
		}
		p.IRD = rep.ORD
	}
	if req.P2P {
		if !rep.P2P {
			return p, &Error{Code: CodeNoMatchingRTR, Reason: "reply to a peer-to-peer request without flag A"}
		}
		p.P2P = true
		readOK := rep.IRD > 0
		p.RTR = pickRTR(rep.RTR&cfg.rtr(), readOK)
		if p.RTR == 0 {
			return p, &Error{Code: CodeNoMatchingRTR, Reason: "no RTR type in the reply that we can generate"}
		}
		if p.RTR == RTRRead && p.ORD == 0 {
			p.ORD = 1
		}
	}
	return p, nil
}
