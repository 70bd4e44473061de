package rocev2

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/roce"
)

// sendWatch is a link that calls on with the packets of each batch it sends (parsed; those
// that do not parse are left out), under mu, before it sends them.
type sendWatch struct {
	Link
	mu sync.Mutex
	on func(batch []roce.Packet)
}

func (l *sendWatch) Send(bufs [][]byte, dst netip.AddrPort) error {
	var batch []roce.Packet
	for _, b := range bufs {
		if p, err := roce.ParsePacket(b); err == nil {
			batch = append(batch, p)
		}
	}
	l.mu.Lock()
	l.on(batch)
	l.mu.Unlock()
	return l.Link.Send(bufs, dst)
}

// TestAckBeforeRecvCompletion: the responder's ACK of a SEND is on the wire before the
// SEND's receive completion is delivered. A consumer that exits as soon as its message
// arrives (rdma_client, dapltest's client) otherwise leaves the sender without the ACK,
// and the sender's SEND ends in retry exhaustion or a flush. (With WaitDrivesReceive a
// Wait defers the ACK instead: TestDeferredAckSent.)
func TestAckBeforeRecvCompletion(t *testing.T) {
	// seen holds, for every ACK the server sends, how many completions its receive CQ
	// held at that moment.
	var cq *rnic.CQ
	var seen []int
	w := &sendWatch{on: func(batch []roce.Packet) {
		for _, p := range batch {
			if p.BTH.Opcode() == roce.RCAck && cq != nil {
				seen = append(seen, cq.Len())
			}
		}
	}}
	cli, srv := newPair(t, &pairOpts{srvWrap: func(l Link) Link { w.Link = l; return w }})
	w.mu.Lock()
	cq = srv.rcq
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
		acks := append([]int(nil), seen...)
		seen = seen[:0]
		w.mu.Unlock()
		if len(acks) == 0 {
			t.Fatalf("send %d: completed with no ACK sent", i)
		}
		for _, held := range acks {
			if held != 0 {
				t.Fatalf("send %d: an ACK left after %d receive completion(s) were delivered (ACKs seen with %v)", i, held, acks)
			}
		}
		if c := wait(t, srv.rcq, 1)[0]; c.Status != rnic.StatusSuccess || c.ByteLen != uint32(n) {
			t.Fatalf("recv %d: %+v, want %d bytes", i, c, n)
		}
	}
}

// TestOwedAckLast: an ACK a Wait deferred (Conn.owedAck) leaves in the batch of the next
// packets the connection sends, after them: a shorter last datagram joins their UDP GSO
// run, so an answer and the ACK cross the stack as one.
func TestOwedAckLast(t *testing.T) {
	var batches [][]roce.Opcode // the opcodes of each batch the server sends
	w := &sendWatch{on: func(batch []roce.Packet) {
		ops := make([]roce.Opcode, len(batch))
		for i, p := range batch {
			ops[i] = p.BTH.Opcode()
		}
		batches = append(batches, ops)
	}}
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
	if len(batches) == 0 || len(batches[0]) != 2 || batches[0][0] != roce.RCSendOnly || batches[0][1] != roce.RCAck {
		t.Fatalf("batches sent: %v, want the first to be SEND Only then the ACK", batches)
	}
}
