package iwarp

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// termEnv is the responder side of a TestTerminateCodes case.
type termEnv struct {
	srv    *side
	a      *rnic.MR // remote read/write
	noRead *rnic.MR // remote write only
	other  *rnic.MR // remote read/write, another PD
}

func tagged(op rdmap.Opcode, last bool, stag uint32, to uint64, payload []byte) []byte {
	b := make([]byte, ddp.TaggedLen, ddp.TaggedLen+len(payload))
	ddp.Tagged(b).Init(last, rdmap.Control(op), stag, to)
	return append(b, payload...)
}

func untagged(op rdmap.Opcode, last bool, qn uint32, msn ddp.MSN, mo, field uint32, rest []byte) []byte {
	b := make([]byte, ddp.UntaggedLen, ddp.UntaggedLen+len(rest))
	ddp.Untagged(b).Init(last, rdmap.Control(op), field, qn, msn, mo)
	return append(b, rest...)
}

func readReqULPDU(msn ddp.MSN, mo uint32, last bool, size, srcSTag uint32, srcTO uint64) []byte {
	rr := make([]byte, rdmap.ReadRequestLen)
	rdmap.ReadRequest(rr).Init(0x99, 0, size, srcSTag, srcTO)
	return untagged(rdmap.OpReadRequest, last, ddp.QNReadRequest, msn, mo, 0, rr)
}

// TestTerminateCodes covers every error condition RFC 5040 §7 and RFC 5041 §7 name for
// incoming messages (plus the malformed ones they leave to the implementation) with the
// Terminate layer/type/code it must carry (RFC 5040 §4.8, RFC 6580) and whether the
// offending DDP header (D) and Read Request header (R) are echoed (Figure 10). Each case
// follows a valid RTR on a fresh connection. Covered elsewhere: CRC error
// (TestBadCRCLeavesNoTrace), no matching RTR (TestRawNoMatchingRTR), IRD exceeded
// (TestRawIRDExact), the remote errors of a softrnic initiator's own operations
// (TestRemoteErrors).
func TestTerminateCodes(t *testing.T) {
	pay := []byte("12345678")
	ddpErr := rdmap.FromDDP
	cases := []struct {
		name  string
		recv  int // receive buffer bytes to post first (0: none)
		ulpdu func(e *termEnv) []byte
		want  rdmap.TerminateError
		d, r  bool
	}{
		// RFC 5041 §7.2 (DDP layer).
		{"tagged DDP version", 0, func(e *termEnv) []byte {
			b := tagged(rdmap.OpWrite, true, e.a.RKey(), e.a.Addr(), pay)
			b[0] &^= ddp.CtrlVersionMask
			return b
		}, ddpErr(ddp.ErrTaggedVersion), false, false},
		{"untagged DDP version", 64, func(e *termEnv) []byte {
			b := untagged(rdmap.OpSend, true, ddp.QNSend, 1, 0, 0, pay)
			b[0] &^= ddp.CtrlVersionMask
			return b
		}, ddpErr(ddp.ErrUntaggedVersion), false, false},
		{"invalid QN", 64, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, 5, 1, 0, 0, pay)
		}, ddpErr(ddp.ErrInvalidQN), true, false},
		{"Write: invalid STag", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpWrite, true, 0x12345601, e.a.Addr(), pay)
		}, ddpErr(ddp.ErrInvalidSTag), true, false},
		{"Write: base or bounds", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpWrite, true, e.a.RKey(), e.a.Addr()+4092, pay)
		}, ddpErr(ddp.ErrBaseBounds), true, false},
		{"Write: STag not associated (other PD)", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpWrite, true, e.other.RKey(), e.other.Addr(), pay)
		}, ddpErr(ddp.ErrSTagNotAssociated), true, false},
		{"Write: TO wrap", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpWrite, true, e.a.RKey(), ^uint64(0)-3, pay)
		}, ddpErr(ddp.ErrTOWrap), true, false},
		{"Write: second segment changes the STag", 0, func(e *termEnv) []byte {
			// (after a first segment without L to e.a; see the loop)
			return tagged(rdmap.OpWrite, true, e.noRead.RKey(), e.a.Addr()+8, pay)
		}, ddpErr(ddp.ErrInvalidSTag), true, false},
		{"Send: no receive buffer", 0, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, ddp.QNSend, 1, 0, 0, pay)
		}, ddpErr(ddp.ErrMSNNoBuffer), true, false},
		{"Send: MSN out of range", 64, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, ddp.QNSend, 2, 0, 0, pay)
		}, ddpErr(ddp.ErrMSNRange), true, false},
		{"Send: invalid MO", 64, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, ddp.QNSend, 1, 8, 0, pay)
		}, ddpErr(ddp.ErrInvalidMO), true, false},
		{"Send: too long for the buffer", 4, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, ddp.QNSend, 1, 0, 0, pay)
		}, ddpErr(ddp.ErrMessageTooLong), true, false},
		{"Read Request: MSN out of range", 0, func(e *termEnv) []byte {
			return readReqULPDU(2, 0, true, 8, e.a.RKey(), e.a.Addr())
		}, ddpErr(ddp.ErrMSNRange), true, false},
		{"Read Request: MO not 0", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 28, true, 8, e.a.RKey(), e.a.Addr())
		}, ddpErr(ddp.ErrInvalidMO), true, false},
		{"Read Request: L not set", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, false, 8, e.a.RKey(), e.a.Addr())
		}, ddpErr(ddp.ErrInvalidMO), true, false},
		{"Read Request: longer than its header", 0, func(e *termEnv) []byte {
			return append(readReqULPDU(1, 0, true, 8, e.a.RKey(), e.a.Addr()), 0, 0, 0, 0)
		}, ddpErr(ddp.ErrMessageTooLong), true, false},
		{"Terminate: MSN out of range", 0, func(e *termEnv) []byte {
			return untagged(rdmap.OpTerminate, true, ddp.QNTerminate, 2, 0, 0, []byte{0, 2, 7, 0})
		}, ddpErr(ddp.ErrMSNRange), true, false},
		{"Terminate: invalid MO", 0, func(e *termEnv) []byte {
			return untagged(rdmap.OpTerminate, true, ddp.QNTerminate, 1, 4, 0, []byte{0, 2, 7, 0})
		}, ddpErr(ddp.ErrInvalidMO), true, false},

		// RFC 5040 §7.2 (RDMAP layer).
		{"RDMAP version", 64, func(e *termEnv) []byte {
			b := untagged(rdmap.OpSend, true, ddp.QNSend, 1, 0, 0, pay)
			b[ddp.OffULPCtrl] &^= 0xC0
			return b
		}, rdmap.TermInvalidVersion, false, false},
		{"opcode: reserved", 0, func(e *termEnv) []byte {
			return untagged(rdmap.Opcode(0xC), true, ddp.QNSend, 1, 0, 0, nil)
		}, rdmap.TermUnexpectedOpcode, false, false},
		{"opcode: Send in a tagged segment", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpSend, true, e.a.RKey(), e.a.Addr(), pay)
		}, rdmap.TermUnexpectedOpcode, false, false},
		{"opcode: atomic without RFC 7306 enabled", 0, func(e *termEnv) []byte {
			req := rdmap.NewFetchAdd(1, e.a.RKey(), e.a.Addr(), 1, 0)
			return req.Append(untagged(rdmap.OpAtomicRequest, true, ddp.QNReadRequest, 1, 0, 0, nil))
		}, rdmap.TermUnexpectedOpcode, false, false},
		{"opcode: Immediate Data without RFC 7306 enabled", 64, func(e *termEnv) []byte {
			return rdmap.AppendImmediate(untagged(rdmap.OpImmediateData, true, ddp.QNSend, 1, 0, 0, nil), 1)
		}, rdmap.TermUnexpectedOpcode, false, false},
		{"Read Response with no Read outstanding", 0, func(e *termEnv) []byte {
			return tagged(rdmap.OpReadResponse, true, e.a.RKey(), e.a.Addr(), pay)
		}, rdmap.TermUnexpectedOpcode, false, false},
		{"Read Request: invalid source STag", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, 0x77777701, 0)
		}, rdmap.TermInvalidSTag, true, true},
		{"Read Request: base or bounds", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, e.a.RKey(), e.a.Addr()+4092)
		}, rdmap.TermBaseBounds, true, true},
		{"Read Request: access rights", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, e.noRead.RKey(), e.noRead.Addr())
		}, rdmap.TermAccessRights, true, true},
		{"Read Request: STag not associated (other PD)", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, e.other.RKey(), e.other.Addr())
		}, rdmap.TermSTagNotAssociated, true, true},
		{"Read Request: TO wrap", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, e.a.RKey(), ^uint64(0)-3)
		}, rdmap.TermTOWrap, true, true},
		{"Send with Invalidate: cannot invalidate", 64, func(e *termEnv) []byte {
			return untagged(rdmap.OpSendInvalidate, true, ddp.QNSend, 1, 0, 0x99901, pay)
		}, rdmap.TermProtCannotInvalidate, true, false},

		// Malformed messages RFC 5040 has no specific code for.
		{"Read Request: truncated", 0, func(e *termEnv) []byte {
			return readReqULPDU(1, 0, true, 8, e.a.RKey(), e.a.Addr())[:ddp.UntaggedLen+10]
		}, rdmap.TermCatastrophicStream, true, false},
		{"Terminate: truncated", 0, func(e *termEnv) []byte {
			return untagged(rdmap.OpTerminate, true, ddp.QNTerminate, 1, 0, 0, []byte{0, 2})
		}, rdmap.TermCatastrophicStream, true, false},
		{"DDP header truncated", 0, func(e *termEnv) []byte {
			return untagged(rdmap.OpSend, true, ddp.QNSend, 1, 0, 0, nil)[:10]
		}, rdmap.TermCatastrophicStream, false, false},
	}
	for _, crc := range []bool{true, false} {
		for _, tc := range cases {
			testTerminateCode(t, crc, tc.name, tc.recv, tc.ulpdu, tc.want, tc.d, tc.r)
		}
	}
}

func testTerminateCode(t *testing.T, crc bool, name string, recv int, ulpdu func(e *termEnv) []byte, want rdmap.TerminateError, wantD, wantR bool) {
	pay := []byte("12345678")
	t.Run(map[bool]string{true: "crc/", false: "nocrc/"}[crc]+name, func(t *testing.T) {
		noLeak(t)
		srv := newSide(t, &pairOpts{})
		defer srv.dev.Close()
		e := &termEnv{srv: srv}
		e.a, _ = srv.pd.RegMR(make([]byte, 4096), allAccess)
		e.noRead, _ = srv.pd.RegMR(make([]byte, 4096), rnic.AccessLocalWrite|rnic.AccessRemoteWrite)
		pd2, _ := srv.dev.AllocPD()
		e.other, _ = pd2.RegMR(make([]byte, 4096), allAccess)
		if recv > 0 {
			rmr, _ := srv.reg(t, recv, allAccess)
			if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{rmr.SGE(0, recv)}}); err != nil {
				t.Fatal(err)
			}
		}
		p := rawConnect(t, mpa.Config{Rev: 2, CRC: crc, P2P: true, RTR: mpa.RTRWrite, IRD: 4, ORD: 4}, srv,
			&Config{MPA: mpa.Config{Rev: 2, CRC: crc}})
		if p.params.CRC != crc {
			t.Fatalf("CRC %v negotiated", p.params.CRC)
		}
		_ = p.nc.SetDeadline(time.Now().Add(5 * time.Second))
		stream := mpa.AppendFPDU(nil, crc, rtrWrite())
		if name == "Write: second segment changes the STag" {
			stream = mpa.AppendFPDU(stream, crc, tagged(rdmap.OpWrite, false, e.a.RKey(), e.a.Addr(), pay))
		}
		u := ulpdu(e)
		stream = mpa.AppendFPDU(stream, crc, u)
		if _, err := p.nc.Write(stream); err != nil {
			t.Fatal(err)
		}
		b := p.next(t)
		if op := rdmap.ControlOpcode(b[ddp.OffULPCtrl]); op != rdmap.OpTerminate {
			t.Fatalf("got %v, want a Terminate: % x", op, b)
		}
		tm, err := rdmap.ParseTerminate(b[ddp.UntaggedLen:])
		if err != nil {
			t.Fatal(err)
		}
		if tm.Err != want || tm.D != wantD || tm.R != wantR {
			t.Fatalf("Terminate %v D=%v R=%v, want %v D=%v R=%v", tm.Err, tm.D, tm.R, want, wantD, wantR)
		}
		if tm.D && binary.BigEndian.Uint16(tm.DDPHeader) != binary.BigEndian.Uint16(u) {
			t.Fatalf("echoed DDP header % x, sent % x", tm.DDPHeader, u[:ddp.UntaggedLen])
		}
		p.nc.Close()
		<-srv.qp.Done()
	})
}
