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

// crcRegions are crcTarget's memory: regions a and o of 2n bytes and the n-byte buffer of
// the receive posted with WRID 5, all zero.
type crcRegions struct {
	a, o             *rnic.MR
	abuf, obuf, rbuf []byte
}

// crcTarget returns a server side with crcRegions, connected to a raw MPA peer with CRC
// that has sent its RTR. The side's device is closed when the test ends.
func crcTarget(t *testing.T, n int) (*side, *rawPeer, crcRegions) {
	t.Helper()
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	t.Cleanup(func() { srv.dev.Close() })
	var x crcRegions
	x.a, x.abuf = srv.reg(t, 2*n, allAccess)
	x.o, x.obuf = srv.reg(t, 2*n, allAccess)
	rmr, rbuf := srv.reg(t, n, allAccess)
	x.rbuf = rbuf
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 5, SGL: []rnic.SGE{rmr.SGE(0, n)}})
	p := rawConnect(t, mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite}, srv, nil)
	if err := p.wr.WriteFPDU(rtrWrite(), nil); err != nil {
		t.Fatal(err)
	}
	return srv, p, x
}

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
			srv, p, x := crcTarget(t, n)
			a, abuf, b, bbuf, rbuf := x.a, x.abuf, x.o, x.obuf, x.rbuf
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

// TestReadResponseCRC: with CRC negotiated, a Read Response that continues the pending Read
// exactly is placed straight into the Read's sink and then CRC-checked (placeReadResp);
// one that does not is staged and checked first. Either way a good response completes the
// Read with every byte in place, and a bad CRC ends it in error with Terminate LLP / MPA /
// CRC, without writing to any memory but the sink of the Read it answers.
func TestReadResponseCRC(t *testing.T) {
	const n = 6000 // two segments: 4000 + 2000
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	cases := []struct {
		name    string
		corrupt func(seg2 []byte, other *rnic.MR) // seg2: the second FPDU (length, ULPDU, pad, CRC)
		good    bool
	}{
		{"good", nil, true},
		{"payload bit in the second segment", func(f []byte, o *rnic.MR) { f[2+ddp.TaggedLen+10] ^= 0x10 }, false},
		{"crc field", func(f []byte, o *rnic.MR) { f[len(f)-1] ^= 1 }, false},
		{"stag names another region", func(f []byte, o *rnic.MR) {
			binary.BigEndian.PutUint32(f[2+ddp.OffSTag:], o.RKey())
			binary.BigEndian.PutUint64(f[2+ddp.OffTO:], o.Addr())
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			srv := newSide(t, &pairOpts{})
			defer srv.dev.Close()
			sink, sinkBuf := srv.reg(t, n, allAccess)
			other, otherBuf := srv.reg(t, n, allAccess)
			cfg := mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite, IRD: 8, ORD: 8}
			p := rawConnect(t, cfg, srv, nil)
			if err := p.wr.WriteFPDU(rtrWrite(), nil); err != nil {
				t.Fatal(err)
			}
			if err := srv.qp.PostSend(&rnic.SendWR{WRID: 9, Opcode: rnic.OpRead, Flags: rnic.Signaled,
				SGL: []rnic.SGE{sink.SGE(0, n)}, RemoteAddr: 0x1000, RKey: 0x55}); err != nil {
				t.Fatal(err)
			}
			req := p.next(t)
			if op := rdmap.ControlOpcode(req[ddp.OffULPCtrl]); op != rdmap.OpReadRequest {
				t.Fatalf("got %v, want a Read Request", op)
			}
			stag := binary.BigEndian.Uint32(req[ddp.UntaggedLen:])
			to := binary.BigEndian.Uint64(req[ddp.UntaggedLen+4:])
			h := make([]byte, ddp.TaggedLen)
			ddp.Tagged(h).Init(false, rdmap.Control(rdmap.OpReadResponse), stag, to)
			f := mpa.AppendFPDU(nil, true, h, payload[:4000])
			ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpReadResponse), stag, to+4000)
			seg2 := mpa.AppendFPDU(nil, true, h, payload[4000:])
			if tc.corrupt != nil {
				tc.corrupt(seg2, other)
			}
			if _, err := p.nc.Write(append(f, seg2...)); err != nil {
				t.Fatal(err)
			}
			if tc.good {
				c := wait(t, srv.scq)
				if c.WRID != 9 || c.Status != rnic.StatusSuccess || !bytes.Equal(sinkBuf, payload) {
					t.Fatalf("read: %+v, sink placed right: %v", c, bytes.Equal(sinkBuf, payload))
				}
				return
			}
			term := p.next(t)
			p.nc.Close()
			c := wait(t, srv.scq)
			if w := binary.BigEndian.Uint32(term[ddp.UntaggedLen:]); parseTermWord(w) != rdmap.TermMPACRC {
				t.Fatalf("terminate % x, want LLP/MPA/CRC", term)
			}
			if c.WRID != 9 || c.Status == rnic.StatusSuccess {
				t.Fatalf("read with a bad CRC: %+v", c)
			}
			if !bytes.Equal(otherBuf, make([]byte, n)) {
				t.Fatal("a Read Response with a bad CRC wrote outside the Read's sink")
			}
			if s := srv.qp.Counters().Snapshot(); s.CRCErrors != 1 {
				t.Fatalf("counters %+v", s)
			}
		})
	}
}

// TestStreamedSegmentsCRC: with CRC negotiated, a Write's segments after its first and up
// to its last, and every segment of a Send for which a receive is posted, are read straight
// from the stream and checked at their end (streamable). A good message arrives whole,
// with those segments streamed; a corrupted one ends the connection with Terminate LLP /
// MPA / CRC before the message completes, writes nothing outside the message's own range
// (a Send: its receive buffer), and a Send's receive is flushed. A continuation whose
// header names another region is staged and checked first.
func TestStreamedSegmentsCRC(t *testing.T) {
	const seg, n = 1000, 3000 // three segments
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*13 + 5)
	}
	cases := []struct {
		name     string
		send     bool
		corrupt  func(seg []byte, other *rnic.MR) // seg: the second FPDU, or the first with first (length, ULPDU, pad, CRC)
		first    bool
		streamed uint64 // segments streamed when good
	}{
		{name: "write good", streamed: 2}, // the middle one and the Send behind; the last is staged
		{name: "send good", send: true, streamed: 3},
		{name: "send payload bit in the first segment", send: true, first: true, corrupt: func(f []byte, o *rnic.MR) { f[2+ddp.UntaggedLen+10] ^= 0x10 }},
		{name: "send crc field of the first segment", send: true, first: true, corrupt: func(f []byte, o *rnic.MR) { f[len(f)-1] ^= 1 }},
		{name: "write payload bit in the second segment", corrupt: func(f []byte, o *rnic.MR) { f[2+ddp.TaggedLen+10] ^= 0x10 }},
		{name: "send payload bit in the second segment", send: true, corrupt: func(f []byte, o *rnic.MR) { f[2+ddp.UntaggedLen+10] ^= 0x10 }},
		{name: "write crc field", corrupt: func(f []byte, o *rnic.MR) { f[len(f)-1] ^= 1 }},
		{name: "write continuation names another region", corrupt: func(f []byte, o *rnic.MR) {
			binary.BigEndian.PutUint32(f[2+ddp.OffSTag:], o.RKey())
			binary.BigEndian.PutUint64(f[2+ddp.OffTO:], o.Addr()+seg)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, p, x := crcTarget(t, n)
			a, abuf, o, obuf, rbuf := x.a, x.abuf, x.o, x.obuf, x.rbuf
			var fpdus [][]byte
			for i := range 3 {
				last := i == 2
				var h []byte
				if tc.send {
					h = make([]byte, ddp.UntaggedLen)
					ddp.Untagged(h).Init(last, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, 1, uint32(i*seg))
				} else {
					h = make([]byte, ddp.TaggedLen)
					ddp.Tagged(h).Init(last, rdmap.Control(rdmap.OpWrite), a.RKey(), a.Addr()+seg+uint64(i*seg))
				}
				fpdus = append(fpdus, mpa.AppendFPDU(nil, true, h, payload[i*seg:(i+1)*seg]))
			}
			if tc.corrupt != nil && tc.first {
				tc.corrupt(fpdus[0], o)
			} else if tc.corrupt != nil {
				tc.corrupt(fpdus[1], o)
			}
			var all []byte
			for _, f := range fpdus {
				all = append(all, f...)
			}
			if !tc.send { // a Send behind the Write shows when it was processed
				s := make([]byte, ddp.UntaggedLen)
				ddp.Untagged(s).Init(true, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, 1, 0)
				all = mpa.AppendFPDU(all, true, s, payload[:8])
			}
			if _, err := p.nc.Write(all); err != nil {
				t.Fatal(err)
			}
			if tc.corrupt == nil {
				c := wait(t, srv.rcq)
				if c.WRID != 5 || c.Status != rnic.StatusSuccess {
					t.Fatalf("receive: %+v", c)
				}
				if tc.send && !bytes.Equal(rbuf, payload) {
					t.Fatal("the Send's bytes differ")
				}
				if !tc.send && !bytes.Equal(abuf[seg:seg+n], payload) {
					t.Fatal("the Write's bytes differ")
				}
				if got := srv.conn.rxStreamed.Load(); got != tc.streamed {
					t.Fatalf("%d segments streamed, want %d", got, tc.streamed)
				}
				return
			}
			term := p.next(t)
			p.nc.Close()
			if w := binary.BigEndian.Uint32(term[ddp.UntaggedLen:]); parseTermWord(w) != rdmap.TermMPACRC {
				t.Fatalf("terminate % x, want LLP/MPA/CRC", term)
			}
			<-srv.qp.Done()
			if c := wait(t, srv.rcq); c.WRID != 5 || c.Status != rnic.StatusWRFlushErr {
				t.Fatalf("receive: %+v", c)
			}
			zero := make([]byte, 2*n)
			if !bytes.Equal(obuf, zero) {
				t.Fatal("a bad segment changed another region")
			}
			if tc.send {
				if !bytes.Equal(abuf, zero) {
					t.Fatal("a bad Send changed a region")
				}
				if tc.first && !bytes.Equal(rbuf[seg:], zero[:n-seg]) {
					t.Fatal("a Send whose first segment failed its CRC went on past it")
				}
				return
			}
			// The Write's first segment is in place, nothing beyond its second segment's
			// range was written, and nothing before the message's start.
			if !bytes.Equal(abuf[seg:2*seg], payload[:seg]) {
				t.Fatal("the Write's first segment is missing")
			}
			if !bytes.Equal(abuf[:seg], zero[:seg]) || !bytes.Equal(abuf[3*seg:], zero[3*seg:]) {
				t.Fatal("a bad Write segment changed bytes outside its message's range")
			}
			if !bytes.Equal(rbuf, make([]byte, n)) {
				t.Fatal("a bad Write segment changed the receive buffer")
			}
		})
	}
}

// TestFirstSendSegmentCRC: with CRC negotiated, the first segment of a Send is streamed
// only into a posted receive that holds it; otherwise it is staged and its CRC checked
// before it is answered: a corrupted Send with no receive posted, or longer than the
// receive, gets Terminate LLP / MPA / CRC, not the DDP error its header would draw, and
// a good one the DDP error (no buffer; message too long, the receive completed with a
// length error).
func TestFirstSendSegmentCRC(t *testing.T) {
	const n = 3000
	payload := bytes.Repeat([]byte{0x5A}, n+100)
	cases := []struct {
		name    string
		post    bool // a receive of n bytes is posted for the Send
		size    int
		corrupt bool
		want    rdmap.TerminateError
	}{
		{"no receive, corrupted", false, 1000, true, rdmap.TermMPACRC},
		{"no receive", false, 1000, false, rdmap.FromDDP(ddp.ErrMSNNoBuffer)},
		{"too long, corrupted", true, n + 100, true, rdmap.TermMPACRC},
		{"too long", true, n + 100, false, rdmap.FromDDP(ddp.ErrMessageTooLong)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, p, _ := crcTarget(t, n) // posts receive 5 of n bytes
			var all []byte
			msn := ddp.MSN(1)
			if !tc.post { // a good Send takes the one receive first
				s := make([]byte, ddp.UntaggedLen)
				ddp.Untagged(s).Init(true, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, msn, 0)
				all = mpa.AppendFPDU(all, true, s, payload[:8])
				msn++
			}
			s := make([]byte, ddp.UntaggedLen)
			ddp.Untagged(s).Init(true, rdmap.Control(rdmap.OpSend), 0, ddp.QNSend, msn, 0)
			f := mpa.AppendFPDU(nil, true, s, payload[:tc.size])
			if tc.corrupt {
				f[2+ddp.UntaggedLen+10] ^= 0x10
			}
			if _, err := p.nc.Write(append(all, f...)); err != nil {
				t.Fatal(err)
			}
			term := p.next(t)
			p.nc.Close()
			if got := parseTermWord(binary.BigEndian.Uint32(term[ddp.UntaggedLen:])); got != tc.want {
				t.Fatalf("terminate %v, want %v", got, tc.want)
			}
			<-srv.qp.Done()
			c := wait(t, srv.rcq)
			switch {
			case !tc.post && (c.WRID != 5 || c.Status != rnic.StatusSuccess):
				t.Fatalf("the first Send's receive: %+v", c)
			case tc.post && tc.corrupt && (c.WRID != 5 || c.Status != rnic.StatusWRFlushErr):
				t.Fatalf("receive: %+v, want flushed", c)
			case tc.post && !tc.corrupt && (c.WRID != 5 || c.Status != rnic.StatusLocLenErr):
				t.Fatalf("receive: %+v, want a length error", c)
			}
		})
	}
}
