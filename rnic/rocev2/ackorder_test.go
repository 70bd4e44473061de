package rocev2

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// ackWatch is a link that notes, for every ACK it sends, how many completions the
// watched CQ held at that moment.
type ackWatch struct {
	Link
	mu   sync.Mutex
	cq   *rnic.CQ
	seen []int
}

func (l *ackWatch) Send(bufs [][]byte, dst netip.AddrPort) error {
	l.mu.Lock()
	for _, b := range bufs {
		if p, err := roce.ParsePacket(b); err == nil && p.BTH.Opcode() == roce.RCAck && l.cq != nil {
			l.seen = append(l.seen, l.cq.Len())
		}
	}
	l.mu.Unlock()
	return l.Link.Send(bufs, dst)
}

// TestAckBeforeRecvCompletion: the responder's ACK of a SEND is on the wire before the
// SEND's receive completion is delivered. A consumer that exits as soon as its message
// arrives (rdma_client, dapltest's client) otherwise leaves the sender without the ACK,
// and the sender's SEND ends in retry exhaustion or a flush. (With WaitDrivesReceive a
// Wait defers the ACK instead: TestDeferredAckSent.)
func TestAckBeforeRecvCompletion(t *testing.T) {
	w := &ackWatch{}
	cli, srv := newPair(t, &pairOpts{srvWrap: func(l Link) Link { w.Link = l; return w }})
	w.mu.Lock()
	w.cq = srv.rcq
	w.mu.Unlock()
	rmr, _ := srv.reg(t, 4096, rnic.AccessLocalWrite)
	smr, _ := cli.reg(t, 4096, rnic.AccessLocalWrite)
	const msgs = 8
	for i := range msgs {
		if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{rmr.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range msgs {
		// 1, 2 and 3 packets: every size ends a message with an ACK request
		n := 1 + i%3*1024
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: uint64(i), Opcode: rnic.OpSend, Flags: rnic.Signaled,
			SGL: []rnic.SGE{smr.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		// the server's CQ is not polled until the client's SEND completed, which needs
		// the ACK: whatever the CQ held when the ACK left stays visible
		if c := wait(t, cli.scq, 1)[0]; c.Status != rnic.StatusSuccess {
			t.Fatalf("send %d: %+v", i, c)
		}
		w.mu.Lock()
		seen := append([]int(nil), w.seen...)
		w.seen = w.seen[:0]
		w.mu.Unlock()
		if len(seen) == 0 {
			t.Fatalf("send %d: completed with no ACK sent", i)
		}
		for _, held := range seen {
			if held != 0 {
				t.Fatalf("send %d: an ACK left after %d receive completion(s) were delivered (ACKs seen with %v)", i, held, seen)
			}
		}
		if c := wait(t, srv.rcq, 1)[0]; c.Status != rnic.StatusSuccess || c.ByteLen != uint32(n) {
			t.Fatalf("recv %d: %+v, want %d bytes", i, c, n)
		}
	}
}

// opWatch is a link that records the opcodes of each batch it sends.
type opWatch struct {
	Link
	mu      sync.Mutex
	batches [][]roce.Opcode
}

func (l *opWatch) Send(bufs [][]byte, dst netip.AddrPort) error {
	var ops []roce.Opcode
	for _, b := range bufs {
		if p, err := roce.ParsePacket(b); err == nil {
			ops = append(ops, p.BTH.Opcode())
		}
	}
	l.mu.Lock()
	l.batches = append(l.batches, ops)
	l.mu.Unlock()
	return l.Link.Send(bufs, dst)
}

// TestOwedAckLast: an ACK a Wait deferred (Conn.owedAck) leaves in the batch of the next
// packets the connection sends, after them: a shorter last datagram joins their UDP GSO
// run, so an answer and the ACK cross the stack as one.
func TestOwedAckLast(t *testing.T) {
	w := &opWatch{}
	cli, srv := newPair(t, &pairOpts{srvWrap: func(l Link) Link { w.Link = l; return w }})
	rmr, _ := cli.reg(t, 64, rnic.AccessLocalWrite)
	smr, _ := srv.reg(t, 64, rnic.AccessLocalWrite)
	if err := cli.qp.PostRecv(&rnic.RecvWR{SGL: []rnic.SGE{rmr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	srv.conn.mu.Lock()
	srv.conn.ackPending = true // as a Wait's batch leaves it (rxDrive.deferAck)
	srv.conn.mu.Unlock()
	if err := srv.qp.PostSend(&rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{smr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, srv.scq, 1)[0]; c.Status != rnic.StatusSuccess {
		t.Fatalf("SEND: %+v", c)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.batches) == 0 || len(w.batches[0]) != 2 || w.batches[0][0] != roce.RCSendOnly || w.batches[0][1] != roce.RCAck {
		t.Fatalf("batches sent: %v, want the first to be SEND Only then the ACK", w.batches)
	}
}
