package roce

import (
	"bytes"
	"testing"
)

// TestSIDRLayout pins the SIDR_REQ and SIDR_REP field offsets (IBTA Vol.1 Tables 119
// and 120; Linux include/rdma/ibta_vol1_c12.h CM_SIDR_REQ_* / CM_SIDR_REP_*): byte
// offsets in the 232 bytes of message data after the 24-byte MAD header.
func TestSIDRLayout(t *testing.T) {
	req := SIDRREQ{RequestID: 0x01020304, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 7174)}
	copy(req.PrivateData[:], "pd")
	b := req.Append(nil)
	if len(b) != CMDataLen || !bytes.Equal(b[0:4], []byte{1, 2, 3, 4}) || !bytes.Equal(b[4:6], []byte{0xff, 0xff}) ||
		!bytes.Equal(b[6:8], []byte{0, 0}) || !bytes.Equal(b[8:16], []byte{0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06}) ||
		string(b[16:18]) != "pd" {
		t.Fatalf("SIDR_REQ % x", b[:20])
	}
	rep := SIDRREP{RequestID: 0x0a0b0c0d, Status: SIDRNoQP, AddInfoLen: 2, QPN: 0x123456,
		ServiceID: 0x0000000001111c06, QKey: 0x01234567}
	copy(rep.AddInfo[:], "ai")
	copy(rep.PrivateData[:], "pd")
	b = rep.Append(nil)
	if len(b) != CMDataLen || !bytes.Equal(b[0:4], []byte{0x0a, 0x0b, 0x0c, 0x0d}) || b[4] != 3 || b[5] != 2 ||
		!bytes.Equal(b[8:11], []byte{0x12, 0x34, 0x56}) || b[11] != 0 ||
		!bytes.Equal(b[12:20], []byte{0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06}) || !bytes.Equal(b[20:24], []byte{1, 0x23, 0x45, 0x67}) ||
		string(b[24:26]) != "ai" || string(b[96:98]) != "pd" {
		t.Fatalf("SIDR_REP % x", b[:28])
	}
	// A whole MAD: the CM class header with the SIDR attribute IDs.
	mad := AppendCMMAD(nil, 0x42, &rep)
	h, d, err := ParseMAD(mad)
	if err != nil || h.AttrID != AttrSIDRREP || !h.IsCM() || h.TransactionID != 0x42 || !bytes.Equal(d, b) {
		t.Fatalf("MAD %+v %v", h, err)
	}
	back, err := ParseSIDRREP(d)
	if err != nil || back != rep {
		t.Fatalf("round trip %+v %v", back, err)
	}
}
