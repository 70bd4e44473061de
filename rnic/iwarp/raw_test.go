package iwarp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
	"github.com/softrnic/softrnic/rnic"
)

// rawPeer is a hand-driven initiator speaking the wire format the way Linux siw does.
type rawPeer struct {
	nc     net.Conn
	params mpa.Params
	rd     *mpa.Reader
	wr     *mpa.Writer
}

// rawConnect connects a raw initiator to a softrnic listener whose accepted QP is srv.
func rawConnect(t *testing.T, cfg mpa.Config, srv *side, srvCfg *Config) *rawPeer {
	t.Helper()
	ln, err := Listen(srv.dev, "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	req, err := mpa.Request(cfg, []byte("raw"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(req.Append(nil)); err != nil {
		t.Fatal(err)
	}
	r, err := ln.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(r.PrivateData()) != "raw" {
		t.Fatalf("private data %q", r.PrivateData())
	}
	if srv.conn, err = r.Accept(srv.qp, ConnParam{PrivateData: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	raw, rep, err := readFrame(nc, 256)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rev == 2 && (raw[17]&0xff != 2 || rep.Rev != 2 || !rep.Enhanced) {
		t.Fatalf("reply to an enhanced request must be rev 2 with S: % x", raw[:20])
	}
	p, err := mpa.Complete(cfg, &req, &rep)
	if err != nil {
		t.Fatal(err)
	}
	return &rawPeer{nc: nc, params: p, rd: mpa.NewReader(nc, p.RxFraming()), wr: mpa.NewWriter(nc, p.TxFraming())}
}

// next reads one FPDU's ULPDU.
func (p *rawPeer) next(t *testing.T) []byte {
	t.Helper()
	n, err := p.rd.Next()
	if err != nil {
		t.Fatal("next FPDU:", err)
	}
	b := make([]byte, n)
	if err := p.rd.ReadFull(b); err != nil {
		t.Fatal(err)
	}
	if err := p.rd.End(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRawSiwInitiator(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	cfg := mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRWrite | mpa.RTRRead, IRD: 8, ORD: 8}
	p := rawConnect(t, cfg, srv, nil)
	if p.params.RTR != mpa.RTRWrite {
		t.Fatalf("responder picked RTR %v, want write (siw's choice)", p.params.RTR)
	}
	// The responder has a Send queued but must not transmit before our first FPDU.
	smr, sbuf := srv.reg(t, 64, allAccess)
	copy(sbuf, "from softrnic")
	if err := srv.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpSend, SGL: []rnic.SGE{smr.SGE(0, 13)}}); err != nil {
		t.Fatal(err)
	}
	_ = p.nc.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	var one [1]byte
	if n, err := p.nc.Read(one[:]); n != 0 || err == nil {
		t.Fatal("responder sent before the initiator's first FPDU")
	}
	_ = p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	// siw's Write RTR: zero-length RDMA Write, STag 1, TO 0.
	h := make([]byte, ddp.TaggedLen)
	ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 1, 0)
	if err := p.wr.WriteFPDU(h, nil); err != nil {
		t.Fatal(err)
	}
	b := p.next(t)
	u := ddp.Untagged(b)
	if u.Tagged() || u.QN() != 0 || u.MSN() != 1 || u.MO() != 0 || !u.Last() || rdmap.ControlOpcode(u.ULPControl()) != rdmap.OpSend ||
		string(b[ddp.UntaggedLen:]) != "from softrnic" {
		t.Fatalf("send FPDU % x", b)
	}
	// A Write to a bad STag: Terminate DDP/tagged/invalid STag, QN 2, MSN 1, MO 0, M|D with the
	// echoed segment length and header.
	ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 0xabcdef01, 64)
	if err := p.wr.WriteFPDU(h, [][]byte{[]byte("12345678")}); err != nil {
		t.Fatal(err)
	}
	b = p.next(t)
	u = ddp.Untagged(b)
	if rdmap.ControlOpcode(u.ULPControl()) != rdmap.OpTerminate || u.QN() != 2 || u.MSN() != 1 || u.MO() != 0 {
		t.Fatalf("terminate header % x", b)
	}
	w := binary.BigEndian.Uint32(b[ddp.UntaggedLen:])
	if parseTermWord(w) != rdmap.FromDDP(ddp.ErrInvalidSTag) || w&(rdmap.TermFlagM|rdmap.TermFlagD) != rdmap.TermFlagM|rdmap.TermFlagD || w&rdmap.TermFlagR != 0 {
		t.Fatalf("terminate control %#x", w)
	}
	echo := b[ddp.UntaggedLen+4:]
	if binary.BigEndian.Uint16(echo) != 8 || !bytes.Equal(echo[2:], h) { // segment payload length, as siw
		t.Fatalf("echoed header % x", echo)
	}
	if _, err := p.rd.Next(); err != io.EOF {
		t.Fatalf("after Terminate: %v, want EOF", err)
	}
	waitEvent(t, srv.dev, rnic.EventQPAccessErr)
	<-srv.qp.Done()
}

func TestRawReadRTRAndCRC(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	cfg := mpa.Config{Rev: 2, CRC: true, P2P: true, RTR: mpa.RTRRead, IRD: 4, ORD: 4}
	p := rawConnect(t, cfg, srv, nil)
	if p.params.RTR != mpa.RTRRead {
		t.Fatalf("RTR %v", p.params.RTR)
	}
	// siw's Read RTR: zero-length Read Request, sink STag 0x55, source STag 1, TO 0.
	h := make([]byte, ddp.UntaggedLen+rdmap.ReadRequestLen)
	ddp.Untagged(h).Init(true, rdmap.Control(rdmap.OpReadRequest), 0, 1, 1, 0)
	rdmap.ReadRequest(h[ddp.UntaggedLen:]).Init(0x55, 0, 0, 1, 0)
	if err := p.wr.WriteFPDU(h, nil); err != nil {
		t.Fatal(err)
	}
	b := p.next(t)
	tg := ddp.Tagged(b)
	if len(b) != ddp.TaggedLen || !tg.Tagged() || !tg.Last() || tg.STag() != 0x55 || rdmap.ControlOpcode(tg.ULPControl()) != rdmap.OpReadResponse {
		t.Fatalf("read response to the RTR: % x", b)
	}
	// A Send with a corrupted CRC: Terminate LLP/MPA/CRC error, then the stream closes.
	frame := mpa.AppendFPDU(nil, true, []byte{0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	frame[len(frame)-1] ^= 0xff
	_ = srv.qp.PostRecv(&rnic.RecvWR{WRID: 1})
	if _, err := p.nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	b = p.next(t)
	if w := binary.BigEndian.Uint32(b[ddp.UntaggedLen:]); parseTermWord(w) != rdmap.TermMPACRC {
		t.Fatalf("terminate % x", b)
	}
	e := waitEvent(t, srv.dev, rnic.EventQPFatal)
	if s := srv.qp.Counters().Snapshot(); s.CRCErrors != 1 || s.TermSent != 1 {
		t.Fatalf("counters %+v, event %v", s, e)
	}
	<-srv.qp.Done()
	if c := wait(t, srv.rcq); c.Status != rnic.StatusWRFlushErr {
		t.Fatalf("receive after CRC error: %+v", c)
	}
}

func TestRawNoMatchingRTR(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	p := rawConnect(t, mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}, srv, nil)
	// First FPDU is a non-empty Send, not the negotiated RTR.
	h := make([]byte, ddp.UntaggedLen)
	ddp.Untagged(h).Init(true, rdmap.Control(rdmap.OpSend), 0, 0, 1, 0)
	_ = p.wr.WriteFPDU(h, [][]byte{[]byte("x")})
	b := p.next(t)
	if w := binary.BigEndian.Uint32(b[ddp.UntaggedLen:]); parseTermWord(w) != rdmap.TermMPANoMatchingRTR {
		t.Fatalf("terminate % x", b)
	}
	<-srv.qp.Done()
}

// A responder that answers a peer-to-peer request without the A flag: the initiator
// refuses with a Terminate LLP/MPA/no matching RTR (RFC 6581 §9.2) and Dial fails.
func TestRawResponderNoRTR(t *testing.T) {
	noLeak(t)
	cli := newSide(t, &pairOpts{})
	defer cli.dev.Close()
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	defer tl.Close()
	got := make(chan []byte, 1)
	go func() {
		nc, err := tl.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, req, err := readFrame(nc, 512)
		if err != nil || !req.P2P {
			got <- nil
			return
		}
		rep := mpa.Frame{Reply: true, Rev: 2, Enhanced: true, IRD: req.ORD, ORD: req.IRD}
		_, _ = nc.Write(rep.Append(nil))
		rd := mpa.NewReader(nc, mpa.FramingOptions{})
		n, err := rd.Next()
		if err != nil {
			got <- nil
			return
		}
		b := make([]byte, n)
		_ = rd.ReadFull(b)
		got <- b
	}()
	_, err := Dial(context.Background(), cli.qp, tl.Addr().String(), &Config{MPA: mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite}}, ConnParam{})
	var me *mpa.Error
	if !errors.As(err, &me) || me.Code != mpa.CodeNoMatchingRTR {
		t.Fatalf("dial: %v", err)
	}
	b := <-got
	if len(b) < ddp.UntaggedLen+4 || parseTermWord(binary.BigEndian.Uint32(b[ddp.UntaggedLen:])) != rdmap.TermMPANoMatchingRTR {
		t.Fatalf("terminate % x", b)
	}
}

func TestExtensionsNotEnabled(t *testing.T) {
	noLeak(t)
	cli, srv := newPair(t, nil)
	cmr, _ := cli.reg(t, 8, allAccess)
	smr, _ := srv.reg(t, 8, allAccess)
	_ = cli.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpAtomicFetchAdd, SGL: []rnic.SGE{cmr.SGE(0, 8)}, RemoteAddr: smr.Addr(), RKey: smr.RKey()})
	c := wait(t, cli.scq)
	if c.WRID != 1 || c.Status != rnic.StatusLocQPOpErr {
		t.Fatalf("atomic without RFC 7306 enabled: %+v", c)
	}
	waitEvent(t, cli.dev, rnic.EventQPReqErr)
	<-cli.qp.Done()
}

// IRD is exact (RFC 5040 §6.1): a peer may have IRD Read Requests outstanding, counting
// the one being answered; one more is a Terminate RDMAP / Remote Operation / catastrophic
// error localized to the stream, as Linux siw sends (siw_init_rresp), echoing the
// offending request's DDP header. The peer sends one request, waits for the first FPDU of
// its response (so it is being answered, no longer queued), then sends the rest without
// reading; each response is larger than the loopback socket buffers, so none can finish.
// tcpWmemMax is the largest send buffer TCP autotuning may grow to on this machine.
func tcpWmemMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		t.Fatalf("tcp_wmem %q", b)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRawIRDExact(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	cfg := mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite, IRD: 2, ORD: 2}
	p := rawConnect(t, cfg, srv, nil)
	ird := srv.conn.IRD()
	if ird != 2 {
		t.Fatalf("negotiated IRD %d, want the peer's ORD 2", ird)
	}
	_ = p.nc.SetDeadline(time.Now().Add(20 * time.Second))
	h := make([]byte, ddp.TaggedLen)
	ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 1, 0) // Write RTR
	if err := p.wr.WriteFPDU(h, nil); err != nil {
		t.Fatal(err)
	}
	// The first response must still be in flight when the next requests arrive: the raw
	// peer's receive buffer is pinned small (no autotuning) and the response is larger
	// than what the responder's send buffer can hold (tcp_wmem's maximum here).
	if err := p.nc.(*net.TCPConn).SetReadBuffer(256 << 10); err != nil {
		t.Fatal(err)
	}
	size := max(32<<20, 4*tcpWmemMax(t))
	smr, _ := srv.reg(t, size, allAccess)
	msn := uint32(1)
	reqs := func(n int) {
		var batch []byte
		for range n {
			r := make([]byte, ddp.UntaggedLen+rdmap.ReadRequestLen)
			ddp.Untagged(r).Init(true, rdmap.Control(rdmap.OpReadRequest), 0, ddp.QNReadRequest, ddp.MSN(msn), 0)
			rdmap.ReadRequest(r[ddp.UntaggedLen:]).Init(0x77, 0, uint32(size), smr.RKey(), smr.Addr())
			batch = mpa.AppendFPDU(batch, p.params.CRC, r)
			msn++
		}
		if _, err := p.nc.Write(batch); err != nil {
			t.Fatal(err)
		}
	}
	// responses reads FPDUs until want whole Read Responses or a Terminate arrive.
	responses := func(want int) (done int, term []byte) {
		for done < want {
			b := p.next(t)
			if ddp.Tagged(b).Tagged() {
				if rdmap.ControlOpcode(b[1]) != rdmap.OpReadResponse {
					t.Fatalf("unexpected FPDU % x", b[:ddp.TaggedLen])
				}
				if ddp.Tagged(b).Last() {
					done++
				}
				continue
			}
			return done, b
		}
		return done, nil
	}
	startOne := func() {
		reqs(1)
		if b := p.next(t); !ddp.Tagged(b).Tagged() || ddp.Tagged(b).Last() {
			t.Fatalf("first FPDU of a %d-byte Read Response: % x", size, b[:min(len(b), 32)])
		}
	}
	startOne()
	reqs(ird - 1)
	if done, term := responses(ird); term != nil {
		t.Fatalf("Terminate after %d of IRD=%d Read Requests: % x", done, ird, term)
	}
	first := msn
	startOne()
	reqs(ird)
	done, term := responses(ird + 1)
	if term == nil || done >= ird {
		t.Fatalf("IRD+1 Read Requests: %d responses, Terminate % x", done, term)
	}
	tm, err := rdmap.ParseTerminate(term[ddp.UntaggedLen:])
	if err != nil || tm.Err != rdmap.TermCatastrophicStream || !tm.D {
		t.Fatalf("terminate %+v (%v), want %v with the DDP header", tm, err, rdmap.TermCatastrophicStream)
	}
	if u := ddp.Untagged(tm.DDPHeader); u.QN() != ddp.QNReadRequest || uint32(u.MSN()) != first+uint32(ird) {
		t.Fatalf("echoed header % x, want the Read Request with MSN %d", tm.DDPHeader, first+uint32(ird))
	}
	waitEvent(t, srv.dev, rnic.EventQPFatal)
	<-srv.qp.Done()
}

// TestRawInlineResponsesBlocked: Read Responses that the receiver writes itself (respond)
// into a socket that cannot take them whole — the raw peer reads nothing until it has
// sent all its requests, and both socket buffers are pinned small — are finished by the
// sender: every response arrives whole, intact and in request order, and the QP stays
// usable.
func TestRawInlineResponsesBlocked(t *testing.T) {
	noLeak(t)
	srv := newSide(t, &pairOpts{})
	defer srv.dev.Close()
	const reqs, size = 16, 16 << 10 // reqs: the default IRD
	cfg := mpa.Config{Rev: 2, P2P: true, RTR: mpa.RTRWrite, IRD: reqs, ORD: reqs}
	p := rawConnect(t, cfg, srv, nil)
	if ird := srv.conn.IRD(); ird != reqs {
		t.Fatalf("negotiated IRD %d, want %d", ird, reqs)
	}
	_ = p.nc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := srv.conn.nc.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	if err := p.nc.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	h := make([]byte, ddp.TaggedLen)
	ddp.Tagged(h).Init(true, rdmap.Control(rdmap.OpWrite), 1, 0) // Write RTR
	if err := p.wr.WriteFPDU(h, nil); err != nil {
		t.Fatal(err)
	}
	smr, src := srv.reg(t, reqs*size, allAccess)
	for i := range src {
		src[i] = byte(i * 7 / 5)
	}
	for i := range reqs {
		r := make([]byte, ddp.UntaggedLen+rdmap.ReadRequestLen)
		ddp.Untagged(r).Init(true, rdmap.Control(rdmap.OpReadRequest), 0, ddp.QNReadRequest, ddp.MSN(1+i), 0)
		off := uint64((reqs - 1 - i) * size) // a different source for each
		rdmap.ReadRequest(r[ddp.UntaggedLen:]).Init(0x77, uint64(i*size), size, smr.RKey(), smr.Addr()+off)
		if err := p.wr.WriteFPDU(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range reqs {
		var got []byte
		for {
			b := p.next(t)
			tg := ddp.Tagged(b)
			if !tg.Tagged() {
				tm, err := rdmap.ParseTerminate(b[ddp.UntaggedLen:])
				t.Fatalf("response %d: Terminate %+v (%v), IRD %d", i, tm, err, srv.conn.IRD())
			}
			if rdmap.ControlOpcode(b[1]) != rdmap.OpReadResponse || tg.STag() != 0x77 {
				t.Fatalf("response %d: unexpected FPDU % x", i, b[:min(len(b), 32)])
			}
			if want := uint64(i*size + len(got)); tg.TO() != want {
				t.Fatalf("response %d: TO %d, want %d (out of order)", i, tg.TO(), want)
			}
			got = append(got, b[ddp.TaggedLen:]...)
			if tg.Last() {
				break
			}
		}
		off := (reqs - 1 - i) * size
		if !bytes.Equal(got, src[off:off+size]) {
			t.Fatalf("response %d: %d bytes, payload differs", i, len(got))
		}
	}
	if st := srv.qp.State(); st != rnic.QPRTS {
		t.Fatalf("QP %v after the responses", st)
	}
}
