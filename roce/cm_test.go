package roce

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i)
	}
}

// sampleCMMessages returns one message of each type with every field set to
// a distinct, in-range value.
func sampleCMMessages() []CMMessage {
	req := &REQ{LocalCommID: 0x01020304, ServiceID: ServiceID(PortSpaceTCP, 4420), LocalCAGUID: 0x0a0b0c0d0e0f1011,
		LocalQKey: 0x11223344, LocalQPN: 0xabcdef, ResponderResources: 16, LocalEECN: 0x123456, InitiatorDepth: 8,
		RemoteEECN: 0x654321, RemoteCMResponseTimeout: 20, TransportType: CMTransportUC, EndToEndFlowControl: true,
		StartingPSN: 0xfedcba, LocalCMResponseTimeout: 18, RetryCount: 6, PKey: 0x8001, PathMTU: MTU4096,
		RDCExists: true, RNRRetryCount: 5, MaxCMRetries: 15, SRQ: true, ExtTransportType: 1, SAPSupported: true,
		Primary: CMPath{LocalLID: 0xffff, RemoteLID: 0xfffe, FlowLabel: 0xfffff, PacketRate: 0x3f, TrafficClass: 0xc2,
			HopLimit: 64, SL: 15, SubnetLocal: true, LocalACKTimeout: 31,
			LocalGID: GIDFromAddr(netip.MustParseAddr("10.0.0.1")), RemoteGID: GIDFromAddr(netip.MustParseAddr("fe80::1"))},
		Alternate: CMPath{LocalLID: 1, RemoteLID: 2, FlowLabel: 3, PacketRate: 4, TrafficClass: 5, HopLimit: 6, SL: 7,
			LocalACKTimeout: 8}}
	fill(req.PrivateData[:], 1)
	fill(req.Alternate.LocalGID[:], 0x40)
	fill(req.Alternate.RemoteGID[:], 0x80)
	rep := &REP{LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0xffffff, LocalEECN: 0x10203, StartingPSN: 0xabcdef,
		ResponderResources: 4, InitiatorDepth: 5, TargetACKDelay: 31, FailoverAccepted: 3, EndToEndFlowControl: true,
		RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x1122334455667788}
	fill(rep.PrivateData[:], 2)
	rtu := &RTU{LocalCommID: 7, RemoteCommID: 8}
	fill(rtu.PrivateData[:], 3)
	rej := &REJ{LocalCommID: 9, RemoteCommID: 10, MsgRejected: CMMsgREP, RejectInfoLen: 72, Reason: RejConsumerDefined}
	fill(rej.ARI[:], 4)
	fill(rej.PrivateData[:], 5)
	mra := &MRA{LocalCommID: 11, RemoteCommID: 12, MsgMRAed: CMMsgOther, ServiceTimeout: 24}
	fill(mra.PrivateData[:], 6)
	dreq := &DREQ{LocalCommID: 13, RemoteCommID: 14, RemoteQPN: 0x00abcd}
	fill(dreq.PrivateData[:], 7)
	drep := &DREP{LocalCommID: 15, RemoteCommID: 16}
	fill(drep.PrivateData[:], 8)
	sreq := &SIDRREQ{RequestID: 17, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 9)}
	fill(sreq.PrivateData[:], 9)
	srep := &SIDRREP{RequestID: 18, Status: SIDRNoQP, AddInfoLen: 3, QPN: 0x777777, ServiceID: 5, QKey: 0x01234567}
	fill(srep.AddInfo[:], 10)
	fill(srep.PrivateData[:], 11)
	return []CMMessage{req, rep, rtu, rej, mra, dreq, drep, sreq, srep}
}

func parseCM(attr AttrID, d []byte) (CMMessage, error) {
	switch attr {
	case AttrREQ:
		m, err := ParseREQ(d)
		return &m, err
	case AttrREP:
		m, err := ParseREP(d)
		return &m, err
	case AttrRTU:
		m, err := ParseRTU(d)
		return &m, err
	case AttrREJ:
		m, err := ParseREJ(d)
		return &m, err
	case AttrMRA:
		m, err := ParseMRA(d)
		return &m, err
	case AttrDREQ:
		m, err := ParseDREQ(d)
		return &m, err
	case AttrDREP:
		m, err := ParseDREP(d)
		return &m, err
	case AttrSIDRREQ:
		m, err := ParseSIDRREQ(d)
		return &m, err
	case AttrSIDRREP:
		m, err := ParseSIDRREP(d)
		return &m, err
	}
	return nil, errors.New("unknown")
}

func TestCMRoundTripAllFields(t *testing.T) {
	for _, m := range sampleCMMessages() {
		mad := AppendCMMAD(nil, 0xfeedface00000001, m)
		if len(mad) != MADLen {
			t.Fatalf("%v: MAD length %d", m.AttrID(), len(mad))
		}
		h, d, err := ParseMAD(mad)
		if err != nil || h != NewCMHeader(0xfeedface00000001, m.AttrID()) {
			t.Fatalf("%v: header %+v %v", m.AttrID(), h, err)
		}
		got, err := parseCM(h.AttrID, d)
		if err != nil {
			t.Fatal(err)
		}
		// Compare by value through the concrete types.
		if !bytes.Equal(got.Append(nil), m.Append(nil)) {
			t.Errorf("%v: round trip differs", m.AttrID())
		}
		switch want := m.(type) {
		case *REQ:
			if *got.(*REQ) != *want {
				t.Errorf("REQ: %+v\nwant %+v", *got.(*REQ), *want)
			}
		case *REP:
			if *got.(*REP) != *want {
				t.Errorf("REP: %+v", *got.(*REP))
			}
		case *REJ:
			if *got.(*REJ) != *want {
				t.Errorf("REJ: %+v", *got.(*REJ))
			}
		case *MRA:
			if *got.(*MRA) != *want {
				t.Errorf("MRA: %+v", *got.(*MRA))
			}
		case *DREQ:
			if *got.(*DREQ) != *want {
				t.Errorf("DREQ: %+v", *got.(*DREQ))
			}
		case *SIDRREP:
			if *got.(*SIDRREP) != *want {
				t.Errorf("SIDRREP: %+v", *got.(*SIDRREP))
			}
		}
	}
}

// TestCMFieldPositions checks selected fields against hand-placed bytes at the
// Table 106-120 offsets (MAD data offsets + 24).
func TestCMFieldPositions(t *testing.T) {
	d := make([]byte, CMDataLen)
	d[32], d[33], d[34], d[35] = 0x12, 0x34, 0x56, 0x78 // QPN, responder resources
	d[43] = 18<<3 | 1<<1 | 1                            // remote CM timeout, UC, E2E
	d[44], d[45], d[46], d[47] = 0xab, 0xcd, 0xef, 17<<3|5
	d[50] = 5<<4 | 0x08 | 6
	d[51] = 15<<4 | 0x08 | 1
	d[88], d[89], d[90], d[91] = 0xab, 0xcd, 0xe0, 0x3f // flow label 0xabcde, rate 63
	d[94], d[95] = 0x9<<4|0x08, 14<<3
	d[139] = 0x04
	r, _ := ParseREQ(d)
	if r.LocalQPN != 0x123456 || r.ResponderResources != 0x78 || r.RemoteCMResponseTimeout != 18 ||
		r.TransportType != 1 || !r.EndToEndFlowControl || r.StartingPSN != 0xabcdef || r.LocalCMResponseTimeout != 17 ||
		r.RetryCount != 5 || r.PathMTU != MTU4096 || !r.RDCExists || r.RNRRetryCount != 6 || r.MaxCMRetries != 15 ||
		!r.SRQ || r.ExtTransportType != 1 || r.Primary.FlowLabel != 0xabcde || r.Primary.PacketRate != 63 ||
		r.Primary.SL != 9 || !r.Primary.SubnetLocal || r.Primary.LocalACKTimeout != 14 || !r.SAPSupported {
		t.Errorf("REQ fields %+v", r)
	}
	if e := r.Append(nil); !bytes.Equal(e, d) {
		t.Errorf("REQ re-encode\n% x\n% x", e, d)
	}
	d = make([]byte, CMDataLen)
	d[12], d[13], d[14] = 1, 2, 3
	d[20], d[21], d[22] = 4, 5, 6
	d[26] = 9<<3 | 2<<1 | 1
	d[27] = 3<<5 | 0x10
	p, _ := ParseREP(d)
	if p.LocalQPN != 0x010203 || p.StartingPSN != 0x040506 || p.TargetACKDelay != 9 || p.FailoverAccepted != 2 ||
		!p.EndToEndFlowControl || p.RNRRetryCount != 3 || !p.SRQ {
		t.Errorf("REP fields %+v", p)
	}
	if e := p.Append(nil); !bytes.Equal(e, d) {
		t.Errorf("REP re-encode differs")
	}
}

func TestCMTruncation(t *testing.T) {
	for _, m := range sampleCMMessages() {
		mad := AppendCMMAD(nil, 1, m)
		for n := 0; n < len(mad); n++ {
			if _, _, err := ParseMAD(mad[:n]); !errors.Is(err, ErrShort) {
				t.Fatalf("ParseMAD of %d bytes: %v", n, err)
			}
		}
		d := mad[MADHeaderLen:]
		for n := 0; n < len(d); n++ {
			if _, err := parseCM(m.AttrID(), d[:n]); !errors.Is(err, ErrShort) {
				t.Fatalf("%v of %d bytes: %v", m.AttrID(), n, err)
			}
		}
	}
	for n := 0; n < MADHeaderLen; n++ {
		if _, err := ParseMADHeader(make([]byte, n)); !errors.Is(err, ErrShort) {
			t.Fatal(n)
		}
	}
	h := NewCMAHeader(netip.MustParseAddr("1.2.3.4"), netip.MustParseAddr("5.6.7.8"), 1)
	b := h.Append(nil)
	for n := 0; n < len(b); n++ {
		if _, err := ParseCMAHeader(b[:n]); !errors.Is(err, ErrShort) {
			t.Fatal(n)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, tc := range []struct {
		src, dst string
		port     uint16
		hex      string
	}{
		{"192.168.78.2", "192.168.78.1", 0xc761,
			"0040c761 000000000000000000000000c0a84e02 000000000000000000000000c0a84e01"},
		{"::ffff:10.0.0.1", "10.0.0.2", 80,
			"00400050 0000000000000000000000000a000001 0000000000000000000000000a000002"},
		{"fe80::1", "2001:db8::2", 0xffff,
			"0060ffff fe800000000000000000000000000001 20010db8000000000000000000000002"},
	} {
		h := NewCMAHeader(netip.MustParseAddr(tc.src), netip.MustParseAddr(tc.dst), tc.port)
		want := unhex(t, tc.hex)
		if got := h.Append(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: % x", tc.src, got)
		}
		p, err := ParseCMAHeader(want)
		if err != nil || p != h {
			t.Errorf("%s: parse %+v %v", tc.src, p, err)
		}
	}
	bad := make([]byte, 36)
	bad[1] = 0x50
	if _, err := ParseCMAHeader(bad); !errors.Is(err, ErrBadCMAHeader) {
		t.Errorf("IP version 5: %v", err)
	}
}

func TestServiceID(t *testing.T) {
	if ServiceID(PortSpaceTCP, 4420) != 0x0000000001061144 || ServiceID(PortSpaceTCP, 7174) != 0x0000000001061c06 {
		t.Fatal("ServiceID")
	}
	if ServiceID(PortSpaceTCP, 0)&ServiceIDIPPSMask != ServiceIDTCP || ServiceID(PortSpaceUDP, 0) != ServiceIDUDP ||
		ServiceID(PortSpaceIB, 0) != ServiceIDIB {
		t.Fatal("port space masks")
	}
	if _, _, ok := ServiceIDPort(0x0000000001000000); ok {
		t.Error("IB_CMA_SERVICE_ID without port space accepted")
	}
	if ps, p, ok := ServiceIDPort(ServiceID(PortSpaceUDP, 9)); !ok || ps != PortSpaceUDP || p != 9 {
		t.Error("UDP split")
	}
}

func TestCMNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{AttrREQ.String(), "REQ"}, {AttrSIDRREP.String(), "SIDR_REP"}, {AttrID(0x99).String(), "ATTR_0x99"},
		{RejNoQP.String(), "NO_QP"}, {RejInvalidAltFlowLabel.String(), "INVALID_ALT_FLOW_LABEL"},
		{RejVendorOptionNotSupported.String(), "VENDOR_OPTION_NOT_SUPPORTED"},
		{RejectReason(34).String(), "REJ_REASON_34"}, {RejectReason(999).String(), "REJ_REASON_999"},
	} {
		if c.got != c.want {
			t.Errorf("%q want %q", c.got, c.want)
		}
	}
}
