package mpa

import (
	"errors"
	"math/rand"
	"testing"
)

// wireTrip encodes and re-parses f, as the peer sees it.
func wireTrip(t *testing.T, f Frame) Frame {
	t.Helper()
	g, err := ParseFrame(f.Append(nil))
	if err != nil {
		t.Fatalf("encode/parse %+v: %v", f, err)
	}
	return g
}

func code(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestNegotiateDefault(t *testing.T) {
	icfg := Config{IRD: 8, ORD: 4}
	rcfg := Config{IRD: 2, ORD: 16}
	req, err := Request(icfg, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !req.Enhanced || req.Rev != 2 || req.Bits() != 0x1002 || req.PDLength() != 6 {
		t.Fatalf("request %+v", req)
	}
	got := wireTrip(t, req)
	rep, rp, err := Respond(rcfg, &got, []byte("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reply || rep.Reject || rep.Rev != 2 || !rep.Enhanced || rep.IRD != 2 || rep.ORD != 8 {
		t.Fatalf("reply %+v", rep)
	}
	if rp.IRD != 2 || rp.ORD != 8 || rp.PeerIRD != 8 || rp.PeerORD != 4 {
		t.Fatalf("responder params %+v", rp)
	}
	grep := wireTrip(t, rep)
	ip, err := Complete(icfg, &req, &grep)
	if err != nil {
		t.Fatal(err)
	}
	// RFC 6581 §9.1: initiator ORD <= responder IRD, responder ORD <= initiator IRD.
	if ip.ORD != 2 || ip.IRD != 8 || ip.PeerIRD != 2 || ip.PeerORD != 8 || string(grep.PrivateData) != "ok" {
		t.Fatalf("initiator params %+v", ip)
	}
}

func TestRespondRules(t *testing.T) {
	rev1 := Frame{Rev: 1, CRC: true}
	s2 := Frame{Rev: 2, Enhanced: true, IRD: 3, ORD: 5}
	for _, tc := range []struct {
		name      string
		cfg       Config
		req       Frame
		pd        int
		code      ErrorCode
		sendReply bool
		check     func(rep Frame, p Params) bool
	}{
		{"rev1 echoed, C echoed", Config{}, rev1, 0, 0, true,
			func(r Frame, p Params) bool { return r.Rev == 1 && !r.Enhanced && r.CRC && p.CRC }},
		{"rev2 without S gets rev2 without S", Config{}, Frame{Rev: 2}, 0, 0, true,
			func(r Frame, p Params) bool { return r.Rev == 2 && !r.Enhanced && !p.Enhanced }},
		{"rev0 accepted", Config{}, Frame{Rev: 0}, 0, 0, true,
			func(r Frame, p Params) bool { return r.Rev == 0 }},
		{"rev2 S gets rev2 S", Config{IRD: 10, ORD: 10}, s2, 0, 0, true,
			func(r Frame, p Params) bool {
				return r.Rev == 2 && r.Enhanced && r.IRD == 5 && r.ORD == 3 && p.IRD == 5 && p.ORD == 3
			}},
		{"responder limits IRD/ORD", Config{IRD: 1, ORD: 2}, s2, 0, 0, true,
			func(r Frame, p Params) bool { return r.IRD == 1 && r.ORD == 2 }},
		{"our CRC wins", Config{CRC: true}, Frame{Rev: 1}, 0, 0, true,
			func(r Frame, p Params) bool { return r.CRC && p.CRC }},
		{"markers honoured per direction", Config{Markers: false}, Frame{Rev: 1, Markers: true}, 0, 0, true,
			func(r Frame, p Params) bool { return !r.Markers && p.TxMarkers && !p.RxMarkers }},
		{"we ask for markers", Config{Markers: true}, Frame{Rev: 1}, 0, 0, true,
			func(r Frame, p Params) bool { return r.Markers && !p.TxMarkers && p.RxMarkers }},
		{"reserved bits not echoed", Config{}, Frame{Rev: 2, Enhanced: true, Reserved: BitSiwGSO}, 0, 0, true,
			func(r Frame, p Params) bool { return r.Reserved == 0 }},
		{"0x3FFF", Config{IRD: 4, ORD: 6}, Frame{Rev: 2, Enhanced: true, IRD: MaxIRDORD, ORD: MaxIRDORD}, 0, 0, true,
			func(r Frame, p Params) bool {
				return r.IRD == MaxIRDORD && r.ORD == MaxIRDORD && p.IRD == 4 && p.ORD == 6
			}},
		{"reply key", Config{}, Frame{Reply: true, Rev: 1}, 0, CodeInvalidReqRep, false, nil},
		{"rev 3", Config{}, Frame{Rev: 3}, 0, CodeInvalidReqRep, false, nil},
		{"rev 2 to rev-1 responder", Config{Rev: 1}, Frame{Rev: 2}, 0, CodeInvalidReqRep, false, nil},
		{"S with rev 1", Config{}, Frame{Rev: 1, Enhanced: true}, 0, CodeInvalidReqRep, false, nil},
		{"S to rev-1 responder", Config{Rev: 1}, s2, 0, CodeInvalidReqRep, false, nil},
		{"request pd over siw cap", Config{MaxPrivateData: SiwMaxPrivateData},
			Frame{Rev: 1, PrivateData: make([]byte, 257)}, 0, CodeInvalidReqRep, false, nil},
		{"strict ORD reject", Config{IRD: 4, ORD: 8, StrictORD: true}, s2, 0, CodeInsufficientIRD, true,
			func(r Frame, p Params) bool { return r.Reject && r.Reply && r.Enhanced && r.Rev == 2 && r.ORD == 8 }},
		{"strict ORD satisfied", Config{IRD: 4, ORD: 3, StrictORD: true}, s2, 0, 0, true,
			func(r Frame, p Params) bool { return !r.Reject && r.ORD == 3 }},
	} {
		req := wireTrip(t, tc.req)
		rep, p, err := Respond(tc.cfg, &req, make([]byte, tc.pd))
		if code(err) != tc.code {
			t.Errorf("%s: err %v, want code %d", tc.name, err, tc.code)
			continue
		}
		if tc.code != 0 && err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		if rep.Reply != tc.sendReply {
			t.Errorf("%s: reply frame present = %v", tc.name, rep.Reply)
			continue
		}
		if tc.check != nil && !tc.check(wireTrip(t, rep), p) {
			t.Errorf("%s: reply %+v params %+v", tc.name, rep, p)
		}
	}
	// ULP private data for the reply over the limit.
	if _, _, err := Respond(Config{MaxPrivateData: SiwMaxPrivateData}, &s2, make([]byte, 253)); err != ErrPrivateDataTooLong {
		t.Errorf("reply pd 253+4: %v", err)
	}
	if _, _, err := Respond(Config{MaxPrivateData: SiwMaxPrivateData}, &s2, make([]byte, 252)); err != nil {
		t.Errorf("reply pd 252+4: %v", err)
	}
}

func TestRequestRules(t *testing.T) {
	r, err := Request(Config{Rev: 1, CRC: true, Markers: true, IRD: 5}, nil)
	if err != nil || r.Enhanced || r.Rev != 1 || r.Bits() != 0xC001 || r.Len() != HeaderLen {
		t.Fatalf("rev1 request %+v %v", r, err)
	}
	// siw's P2P request shape: IRD word | 0x8000, ORD word | 0xC000, ORD 0 -> 1.
	r, err = Request(Config{P2P: true, IRD: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Append(nil)
	if b[20] != 0x80 || b[21] != 4 || b[22] != 0xC0 || b[23] != 1 {
		t.Fatalf("p2p request word %x", b[20:24])
	}
	// Offer narrows the offered RTR types (here to the Read RTR: ORD word 0x4000 | 1);
	// an Offer outside RTR is ignored.
	for _, tc := range []struct {
		cfg  Config
		want RTRType
	}{
		{Config{P2P: true, Offer: RTRRead}, RTRRead},
		{Config{P2P: true, RTR: RTRWrite | RTRRead, Offer: RTRRead | RTRSend}, RTRRead},
		{Config{P2P: true, RTR: RTRWrite, Offer: RTRRead}, RTRWrite},
	} {
		r, err := Request(tc.cfg, nil)
		if err != nil || r.RTR != tc.want {
			t.Fatalf("%+v: offered %v, want %v (%v)", tc.cfg, r.RTR, tc.want, err)
		}
	}
	if b := func() []byte { r, _ := Request(Config{P2P: true, Offer: RTRRead}, nil); return r.Append(nil) }(); b[22] != 0x40 || b[23] != 1 {
		t.Fatalf("read-only offer word %x", b[20:24])
	}
	if _, err := Request(Config{MaxPrivateData: SiwMaxPrivateData}, make([]byte, 253)); err != ErrPrivateDataTooLong {
		t.Fatal(err)
	}
	if _, err := Request(Config{Rev: 1, MaxPrivateData: SiwMaxPrivateData}, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	if r, _ := Request(Config{IRD: 0xFFFF, ORD: 0x4000}, nil); r.IRD != MaxIRDORD || r.ORD != MaxIRDORD {
		t.Fatal("IRD/ORD not clamped to 14 bits")
	}
}

func TestCompleteRules(t *testing.T) {
	s2req := Frame{Rev: 2, Enhanced: true, IRD: 4, ORD: 4}
	p2pReq := Frame{Rev: 2, Enhanced: true, IRD: 4, ORD: 4, P2P: true, RTR: RTRWrite | RTRRead}
	for _, tc := range []struct {
		name  string
		cfg   Config
		req   Frame
		rep   Frame
		err   error
		check func(p Params) bool
	}{
		{"rev1", Config{}, Frame{Rev: 1}, Frame{Reply: true, Rev: 1, CRC: true}, nil,
			func(p Params) bool { return p.CRC && p.Rev == 1 }},
		{"markers per direction", Config{}, Frame{Rev: 1, Markers: true}, Frame{Reply: true, Rev: 1}, nil,
			func(p Params) bool { return p.RxMarkers && !p.TxMarkers }},
		{"request key in reply", Config{}, Frame{Rev: 1}, Frame{Rev: 1}, &Error{Code: CodeInvalidReqRep}, nil},
		{"rev above request", Config{}, Frame{Rev: 1}, Frame{Reply: true, Rev: 2}, &Error{Code: CodeInvalidReqRep}, nil},
		{"rev1 reply to S request", Config{}, s2req, Frame{Reply: true, Rev: 1}, &Error{Code: CodeInvalidReqRep}, nil},
		{"S reply to plain request", Config{}, Frame{Rev: 2}, Frame{Reply: true, Rev: 2, Enhanced: true}, &Error{Code: CodeInvalidReqRep}, nil},
		{"reply pd over cap", Config{MaxPrivateData: SiwMaxPrivateData}, Frame{Rev: 1},
			Frame{Reply: true, Rev: 1, PrivateData: make([]byte, 300)}, &Error{Code: CodeInvalidReqRep}, nil},
		{"rejected", Config{}, s2req, Frame{Reply: true, Reject: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 9}, ErrRejected,
			func(p Params) bool { return p.PeerIRD == 1 && p.PeerORD == 9 }},
		{"ORD lowered to responder IRD", Config{IRD: 4, ORD: 4}, s2req, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 2, ORD: 3}, nil,
			func(p Params) bool { return p.ORD == 2 && p.IRD == 4 }},
		{"insufficient IRD", Config{IRD: 4, ORD: 4}, s2req, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 5},
			&Error{Code: CodeInsufficientIRD}, nil},
		{"IRD raised within MaxIRD", Config{IRD: 4, ORD: 4, MaxIRD: 8}, s2req, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 8}, nil,
			func(p Params) bool { return p.IRD == 8 }},
		{"0x3FFF leaves local values", Config{IRD: 4, ORD: 4}, s2req, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: MaxIRDORD, ORD: MaxIRDORD}, nil,
			func(p Params) bool { return p.IRD == 4 && p.ORD == 4 }},
		{"p2p write", Config{}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 4, P2P: true, RTR: RTRWrite}, nil,
			func(p Params) bool { return p.P2P && p.RTR == RTRWrite }},
		{"p2p read", Config{}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 1, ORD: 4, P2P: true, RTR: RTRRead}, nil,
			func(p Params) bool { return p.RTR == RTRRead && p.ORD == 1 }},
		{"p2p read needs responder IRD", Config{}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 0, ORD: 4, P2P: true, RTR: RTRRead},
			&Error{Code: CodeNoMatchingRTR}, nil},
		{"p2p send only", Config{}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 4, P2P: true, RTR: RTRSend},
			&Error{Code: CodeNoMatchingRTR}, nil},
		{"p2p send allowed", Config{RTR: RTRSend}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 4, P2P: true, RTR: RTRSend}, nil,
			func(p Params) bool { return p.RTR == RTRSend }},
		{"p2p without A", Config{}, p2pReq, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 4}, &Error{Code: CodeNoMatchingRTR}, nil},
		{"A in reply to client-server", Config{}, s2req, Frame{Reply: true, Rev: 2, Enhanced: true, IRD: 4, ORD: 4, P2P: true, RTR: RTRRead}, nil,
			func(p Params) bool { return !p.P2P && p.RTR == 0 }},
	} {
		rep := wireTrip(t, tc.rep)
		p, err := Complete(tc.cfg, &tc.req, &rep)
		if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			continue
		}
		if tc.check != nil && !tc.check(p) {
			t.Errorf("%s: params %+v", tc.name, p)
		}
	}
}

func TestRespondP2P(t *testing.T) {
	for _, tc := range []struct {
		offer, support, want RTRType
	}{
		{RTRWrite | RTRRead, 0, RTRWrite},
		{RTRRead, 0, RTRRead},
		{RTRSend, 0, RTRWrite | RTRRead}, // propose what we support
		{RTRSend | RTRRead, RTRSend, RTRSend},
		{RTRWrite, RTRRead, RTRRead},
	} {
		req := Frame{Rev: 2, Enhanced: true, P2P: true, RTR: tc.offer, IRD: 1}
		rep, p, err := Respond(Config{RTR: tc.support, IRD: 2, ORD: 2}, &req, nil)
		if err != nil || !rep.P2P || rep.RTR != tc.want || p.RTR != tc.want {
			t.Errorf("offer %v support %v: reply %v, want %v (%v)", tc.offer, tc.support, rep.RTR, tc.want, err)
		}
		if rep.RTR&RTRRead != 0 && rep.IRD < 1 {
			t.Errorf("read RTR with responder IRD 0")
		}
	}
	// A client-server request gets A=0 and no RTR flags.
	req := Frame{Rev: 2, Enhanced: true, RTR: RTRWrite}
	if rep, _, _ := Respond(Config{}, &req, nil); rep.P2P || rep.RTR != 0 {
		t.Fatalf("reply %+v", rep)
	}
}

// Random configurations on both sides: whenever negotiation succeeds the
// RFC 6581 §9.1 relations hold and both ends agree.
func TestNegotiateProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	rtr := func() RTRType { return RTRType(rng.Intn(8)) }
	depth := func() uint16 {
		if rng.Intn(10) == 0 {
			return MaxIRDORD
		}
		return uint16(rng.Intn(6))
	}
	ok := 0
	for i := 0; i < 20000; i++ {
		ic := Config{Rev: uint8(rng.Intn(3)), CRC: rng.Intn(2) == 0, Markers: rng.Intn(2) == 0,
			IRD: depth(), ORD: depth(), MaxIRD: depth(), P2P: rng.Intn(2) == 0, RTR: rtr()}
		rc := Config{Rev: uint8(rng.Intn(3)), CRC: rng.Intn(2) == 0, Markers: rng.Intn(2) == 0,
			IRD: depth(), ORD: depth(), StrictORD: rng.Intn(4) == 0, RTR: rtr()}
		req, err := Request(ic, nil)
		if err != nil {
			t.Fatal(err)
		}
		greq := wireTrip(t, req)
		rep, rp, err := Respond(rc, &greq, nil)
		if err != nil {
			if code(err) == 0 {
				t.Fatalf("responder error without code: %v", err)
			}
			if rep.Reply && !rep.Reject {
				t.Fatal("error with an accepting reply")
			}
			continue
		}
		grep := wireTrip(t, rep)
		ip, err := Complete(ic, &req, &grep)
		if err != nil {
			if c := code(err); c != CodeInsufficientIRD && c != CodeNoMatchingRTR {
				t.Fatalf("initiator: %v (cfg %+v / %+v)", err, ic, rc)
			}
			continue
		}
		ok++
		if ip.CRC != rp.CRC || ip.TxMarkers != rp.RxMarkers || ip.RxMarkers != rp.TxMarkers ||
			ip.Enhanced != rp.Enhanced || ip.P2P != rp.P2P || ip.Rev != rp.Rev {
			t.Fatalf("disagree: %+v vs %+v", ip, rp)
		}
		if ip.Enhanced {
			if rep.IRD != MaxIRDORD && ip.ORD > rp.IRD {
				t.Fatalf("initiator ORD %d > responder IRD %d", ip.ORD, rp.IRD)
			}
			if rep.ORD != MaxIRDORD && rp.ORD > ip.IRD {
				t.Fatalf("responder ORD %d > initiator IRD %d", rp.ORD, ip.IRD)
			}
		}
		if ip.P2P && (ip.RTR&rp.RTR == 0 || ip.RTR&(ip.RTR-1) != 0) {
			t.Fatalf("RTR %v not one of %v", ip.RTR, rp.RTR)
		}
		if ip.P2P && ip.RTR == RTRRead && (ip.ORD == 0 || rp.IRD == 0) {
			t.Fatalf("read RTR without read credits: %+v %+v", ip, rp)
		}
	}
	if ok < 1000 {
		t.Fatalf("only %d successful negotiations", ok)
	}
}
