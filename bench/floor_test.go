package bench

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/ddp"
	"github.com/softrnic/softrnic/internal/pollwake"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rdmap"
)

// BenchmarkLatencyFloor is a model of the least per-message work an iWARP SEND ping-pong
// needs in Go, beside the same TCP ping-pong as BenchmarkLatency: what softrnic's 64 B
// round trip would cost with nothing but that work (bench/README.md compares the two). It
// is not softrnic: each side is one goroutine on one socket, in the structure of the
// drive mode (Config.WaitDrivesReceive: the goroutine waiting for a completion reads the
// socket), and per message it
//   - posts a receive buffer into a mutex-guarded ring (the RQ);
//   - builds an MPA FPDU around a DDP untagged header for an RDMAP Send (ddp.Untagged.Init,
//     mpa.PadLen; the CRC field zero, as with CRC off: 88 bytes for 64) and writes it with
//     write(2) through the socket's RawConn;
//   - reads with read(2) through the RawConn into a 512-byte buffer until the FPDU is
//     there, checks its header (rdmap.CheckSegment), takes the receive from the ring,
//     copies the payload into it and queues a completion in a mutex-guarded ring (the CQ),
//     which it then takes.
//
// So the same system calls as the baseline and softrnic's drive mode (a write, a read
// that finds the socket empty and one that finds the message, per message), and six
// mutex round trips per message on each side. No QP state, no flow control, no hand-over
// of the receive between goroutines, no connection teardown: what a leaner design than
// softrnic's would still do.
//
// The sub-benchmark handoff models the same work in the structure of softrnic's default
// mode instead: each side's receive runs on a goroutine of its own (the connection's),
// which queues the completion and signals the waiting goroutine through a pollwake.Waker,
// as rnic.CQ does; the waiter arms it, looks in the CQ and waits in the poller. Per
// message that adds the eventfd write and one more poll, the system calls softrnic's
// default mode makes (bench/README.md): what that mode could reach with nothing else.
func BenchmarkLatencyFloor(b *testing.B) {
	b.Run("64B", func(b *testing.B) { floorPingPong(b, false) })
	b.Run("handoff", func(b *testing.B) { floorPingPong(b, true) })
}

// floorPingPong runs the model's 64 B ping-pong beside TCP's: in the drive structure, or
// with handoff in the default mode's, where each side's receive runs on a goroutine of its
// own that signals the waiter through a pollwake.Waker as softrnic's CQ does.
func floorPingPong(b *testing.B, handoff bool) {
	b.StopTimer()
	const size = 64
	if handoff && !pollwake.Supported {
		b.Skip("SKIP: the hand-off structure needs package pollwake's eventfd (Linux)")
	}
	a, c := tcpPair(b)
	cli, srv := newFloorEnd(a, size), newFloorEnd(c, size)
	if handoff {
		for _, e := range []*floorEnd{cli, srv} {
			if e.wk = pollwake.New(); e.wk == nil {
				b.Fatal("pollwake.New failed")
			}
			b.Cleanup(e.wk.Close)
			go e.receiveLoop()
		}
	}
	n := b.N
	_, runSoft := sides()
	errc := make(chan error, 1)
	if runSoft {
		srv.postRecv() // before the first message, which the hand-off receiver may take at once
		go srv.echo(n, errc)
	} else {
		errc <- nil // no rounds to answer
	}
	b.SetBytes(size)
	b.ReportAllocs()
	raw, d := alternateRounds(b, n, func(k int) time.Duration { return rawPingPong(b, k, size) }, func(k int) {
		for i := 0; i < k; i++ {
			cli.postRecv()
			if err := cli.send(); err != nil {
				b.Fatal(err)
			}
			if err := cli.wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	report(b, raw, d, size, true)
}

// echo answers n messages, each with one of its own, and sends the outcome to errc; on
// an error it closes its connection, so the other side's wait fails instead of hanging.
// The first message's receive is posted by the caller.
func (e *floorEnd) echo(n int, errc chan<- error) {
	for i := 0; i < n; i++ {
		err := e.wait()
		if err == nil {
			// the next receive goes in before the answer: the hand-off structure's
			// receiver may take the next message before this goroutine runs again
			e.postRecv()
			err = e.send()
		}
		if err != nil {
			e.conn.Close()
			errc <- err
			return
		}
	}
	errc <- nil
}

// floorEnd is one side of BenchmarkLatencyFloor's model.
type floorEnd struct {
	conn   net.Conn
	rd, wr rawIO

	rbuf [512]byte // rbuf[r:w] is read and not yet consumed
	r, w int

	mu       sync.Mutex // the QP: its RQ and MSN
	rq       [4][]byte
	rqh, rqt int
	msn      ddp.MSN

	cqmu     sync.Mutex // the CQ
	cq       [4]int     // completed lengths
	cqh, cqt int
	rxErr    error // the hand-off receiver's end

	wk *pollwake.Waker // the hand-off structure's wake-up; nil in the drive structure

	src, dst []byte // registered memory: the message sent, the buffer posted
	fpdu     []byte
}

func newFloorEnd(c net.Conn, size int) *floorEnd {
	rc, _ := c.(*net.TCPConn).SyscallConn()
	e := &floorEnd{conn: c, rd: rawIO{wait: rc.Read, sys: syscall.Read}, wr: rawIO{wait: rc.Write, sys: syscall.Write},
		src: filled(size), dst: make([]byte, size)}
	e.fpdu = make([]byte, mpa.FPDULen(ddp.UntaggedLen+size))
	return e
}

// rawIO is one read(2) or write(2) through a RawConn, as softrnic's receive and send make
// them (a method value made once, its argument and results kept here), waiting in the
// runtime's poller while the socket is not ready.
type rawIO struct {
	wait func(func(fd uintptr) bool) error   // the RawConn's Read or Write
	sys  func(fd int, p []byte) (int, error) // syscall.Read or syscall.Write
	p    []byte
	n    int
	err  error
	fn   func(fd uintptr) bool // call, made at the first do
}

// do makes the call on p once the socket is ready.
func (x *rawIO) do(p []byte) (int, error) {
	if x.fn == nil {
		x.fn = x.call
	}
	x.p = p
	if err := x.wait(x.fn); err != nil {
		return 0, err
	}
	return x.n, x.err
}

func (x *rawIO) call(fd uintptr) bool {
	for {
		n, err := x.sys(int(fd), x.p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		x.n, x.err = n, err
		return true
	}
}

// fill reads until at least need bytes are buffered.
func (e *floorEnd) fill(need int) error {
	if e.r == e.w {
		e.r, e.w = 0, 0
	}
	for e.w-e.r < need {
		n, err := e.rd.do(e.rbuf[e.w:])
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		e.w += n
	}
	return nil
}

func (e *floorEnd) postRecv() {
	e.mu.Lock()
	e.rq[e.rqt%len(e.rq)] = e.dst
	e.rqt++
	e.mu.Unlock()
}

// send builds the Send's FPDU and writes it.
func (e *floorEnd) send() error {
	e.mu.Lock()
	e.msn++
	msn := e.msn
	e.mu.Unlock()
	ulpdu := ddp.UntaggedLen + len(e.src)
	f := e.fpdu
	binary.BigEndian.PutUint16(f, uint16(ulpdu))
	ddp.Untagged(f[mpa.LengthLen:]).Init(true, rdmap.Control(rdmap.OpSend), 0, 0, msn, 0)
	copy(f[mpa.LengthLen+ddp.UntaggedLen:], e.src)
	clear(f[mpa.LengthLen+ulpdu:]) // pad and CRC field
	_, err := e.wr.do(f)
	return err
}

var errFloorHeader = errors.New("floor model: unexpected header")
var errFloorLength = errors.New("floor model: completion of an unexpected length")
var errFloorNoRecv = errors.New("floor model: a Send with no receive posted")

// take takes a queued completion (its length must be the message's, as a CQ consumer
// checks its completion); ok is false when there is none.
func (e *floorEnd) take() (ok bool, err error) {
	e.cqmu.Lock()
	if e.cqh == e.cqt {
		err = e.rxErr
		e.cqmu.Unlock()
		return false, err
	}
	m := e.cq[e.cqh%len(e.cq)]
	e.cqh++
	e.cqmu.Unlock()
	if m != len(e.dst) {
		return true, errFloorLength
	}
	return true, nil
}

// wait returns once a completion was taken: in the drive structure it receives FPDUs
// itself until one is queued; in the hand-off structure it waits for the receiver's
// signal.
func (e *floorEnd) wait() error {
	for {
		if e.wk != nil {
			e.wk.Arm() // before the look, so no signal falls between it and the wait
		}
		if ok, err := e.take(); ok || err != nil {
			return err
		}
		var err error
		if e.wk != nil {
			err = e.wk.Wait(time.Time{})
		} else {
			err = e.receive()
		}
		if err != nil {
			return err
		}
	}
}

// receiveLoop is the hand-off structure's receiver: it receives FPDUs and signals the
// waiter after each completion it queues, until the connection fails or closes.
func (e *floorEnd) receiveLoop() {
	for {
		err := e.receive()
		if err != nil {
			e.cqmu.Lock()
			e.rxErr = err
			e.cqmu.Unlock()
		}
		e.wk.Signal()
		if err != nil {
			return
		}
	}
}

// receive reads one FPDU, places its payload in the posted receive and queues the
// completion.
func (e *floorEnd) receive() error {
	if err := e.fill(mpa.LengthLen); err != nil {
		return err
	}
	ulpdu := int(binary.BigEndian.Uint16(e.rbuf[e.r:]))
	total := mpa.FPDULen(ulpdu)
	if ulpdu < ddp.UntaggedLen || total > len(e.rbuf) {
		return errFloorHeader
	}
	if err := e.fill(total); err != nil {
		return err
	}
	h := e.rbuf[e.r+mpa.LengthLen : e.r+mpa.LengthLen+ulpdu]
	op, hl, err := rdmap.CheckSegment(h)
	if err != nil || op != rdmap.OpSend || hl != ddp.UntaggedLen {
		return errFloorHeader
	}
	e.mu.Lock()
	if e.rqh == e.rqt {
		e.mu.Unlock()
		return errFloorNoRecv
	}
	dst := e.rq[e.rqh%len(e.rq)]
	e.rqh++
	e.mu.Unlock()
	m := copy(dst, h[hl:])
	e.r += total
	e.cqmu.Lock()
	e.cq[e.cqt%len(e.cq)] = m
	e.cqt++
	e.cqmu.Unlock()
	return nil
}

// TestLatencyFloorModels runs both structures of the model for 2,000 round trips each, so
// a model that fails (a message taken with no receive posted, a wrong length) is found
// by the tests rather than by the report that quotes it.
func TestLatencyFloorModels(t *testing.T) {
	setBenchtime(t, "2000x")
	for _, handoff := range []bool{false, true} {
		if handoff && !pollwake.Supported {
			t.Log("SKIP: the hand-off structure needs package pollwake's eventfd (Linux)")
			continue
		}
		if r := testing.Benchmark(func(b *testing.B) { floorPingPong(b, handoff) }); r.N == 0 {
			t.Errorf("handoff=%v: the model failed", handoff)
		}
	}
}
