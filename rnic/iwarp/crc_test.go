package iwarp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// TestBadCRCLeavesNoTrace: with CRC negotiated, an FPDU whose CRC fails is answered with
// Terminate LLP / MPA / CRC error and none of its bytes reach any region (RFC 5044 §6/§7:
// a ULPDU is not passed to DDP before its CRC is verified): not with the payload
// corrupted, not with the header's STag or TO corrupted to name another region or offset,
// not into a receive buffer (issue 10 defect 7: the payload used to be placed first).
func TestBadCRCLeavesNoTrace(t *testing.T) {
	const n = 3000
	payload := bytes.Repeat([]byte{0xAA}, n)
	cases := []struct {
		name    string
		corrupt func(fpdu []byte, a, b *rnic.MR) // fpdu: length, ULPDU, pad, CRC
	}{
		{"payload bit", func(f []byte, a, b *rnic.MR) { f[2+ddp.TaggedLen+100] ^= 0x10 }},
		{"stag names another region", func(f []byte, a, b *rnic.MR) {
			binary.BigEndian.PutUint32(f[2+ddp.OffSTag:], b.RKey())
			binary.BigEndian.PutUint64(f[2+ddp.OffTO:], b.Addr())
		}},
		{"to moved inside the region", func(f []byte, a, b *rnic.MR) {
			binary.BigEndian.PutUint64(f[2+ddp.OffTO:], a.Addr()+n)
		}},
		{"crc field", func(f []byte, a, b *rnic.MR) { f[len(f)-1] ^= 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			srv := newSide(t, &pairOpts{})
			defer srv.dev.Close()
			a, abuf := srv.reg(t, 2*n, allAccess)
			b, bbuf := srv.reg(t, 2*n, allAccess)
			rmr, rbuf := srv.reg(t, n, allAccess)
			_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 5, SGL: []rnic.SGE{rmr.SGE(0, n)}})
			p := rawConnect(t, mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite}, srv, nil)
			if err := p.wr.WriteFPDU(rtrWrite(), nil); err != nil {
				t.Fatal(err)
			}
			h := make([]byte, ddp.TaggedLen)
			ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), a.RKey(), a.Addr())
			f := mpa.AppendFPDU(nil, true, h, payload)
			tc.corrupt(f, a, b)
			// A good Send behind it must not be delivered either (nothing after an error).
			s := make([]byte, ddp.UntaggedLen)
			ddp.Untagged(s).Init(true, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, 1, 0)
			f = mpa.AppendFPDU(f, true, s, payload)
			if _, err := p.nc.Write(f); err != nil {
				t.Fatal(err)
			}
			term := p.next(t)
			p.nc.Close()
			if w := binary.BigEndian.Uint32(term[ddp.UntaggedLen:]); parseTermWord(w) != rdmap.TermMPACRC {
				t.Fatalf("terminate % x, want LLP/MPA/CRC", term)
			}
			<-srv.qp.Done()
			if !bytes.Equal(abuf, make([]byte, 2*n)) || !bytes.Equal(bbuf, make([]byte, 2*n)) || !bytes.Equal(rbuf, make([]byte, n)) {
				t.Fatal("an FPDU with a bad CRC changed registered memory")
			}
			if c := wait(t, srv.rcq); c.WRID != 5 || c.Status != rnic.StatusWRFlushErr {
				t.Fatalf("receive: %+v", c)
			}
			if s := srv.qp.Counters().Snapshot(); s.CRCErrors != 1 || s.RxBytes != 0 {
				t.Fatalf("counters %+v", s)
			}
		})
	}
}
