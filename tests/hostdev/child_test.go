package hostdev

// The attached processes of the tests: this test binary run again with
// SOFTRNIC_HOSTDEV_CHILD set. A child attaches to the daemon's device (package host),
// says "listening" when its listener is up, waits for "go" on stdin, then runs its
// connections; it prints one "ok ..." line per verified connection and exits 0, or
// prints the error and exits 1.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// Environment of a child.
const (
	envChild  = "SOFTRNIC_HOSTDEV_CHILD"  // the child's index
	envProcs  = "SOFTRNIC_HOSTDEV_PROCS"  // how many children
	envPort   = "SOFTRNIC_HOSTDEV_PORT"   // the device's UDP port
	envExt    = "SOFTRNIC_HOSTDEV_EXT"    // the other device's address ip:cmport@udpport
	envRounds = "SOFTRNIC_HOSTDEV_ROUNDS" // rounds per connection
	envPeers  = "SOFTRNIC_HOSTDEV_PEERS"  // "1": connect to the other children too
	// envDaemon makes the test binary "softrnic daemon" with these arguments (separated
	// by newlines) instead of a child: a daemon the test can kill.
	envDaemon = "SOFTRNIC_HOSTDEV_DAEMON"
)

// Sizes of a round: a WRITE of xferLen bytes, then a SEND of sendLen bytes.
const (
	xferLen = 256 << 10
	sendLen = 64
	cmBase  = 7200 // child i listens on CM port cmBase+i
)

// pattern fills b with the bytes of round r of connection seed.
func pattern(b []byte, seed, r int) {
	x := uint32(seed*7919 + r*104729 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// endpoint is one side of a test connection: a QP with a buffer of xferLen (the WRITE
// target or source), a receive buffer and a send buffer for the round's messages.
type endpoint struct {
	pd   *rnic.PD
	cq   *rnic.CQ
	qp   *rnic.QP
	buf  []byte
	mr   *rnic.MR
	in   []byte
	inM  *rnic.MR
	out  []byte
	outM *rnic.MR
}

func newEndpoint(dev *rnic.Device) (*endpoint, error) {
	e := &endpoint{buf: make([]byte, xferLen), in: make([]byte, sendLen), out: make([]byte, sendLen)}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(64); err != nil {
		return nil, err
	}
	if e.qp, err = dev.CreateQP(e.pd, rnic.QPAttr{SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.RegMR(e.buf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if e.inM, err = e.pd.RegMR(e.in, rnic.AccessLocalWrite); err != nil {
		return nil, err
	}
	if e.outM, err = e.pd.RegMR(e.out, 0); err != nil {
		return nil, err
	}
	return e, nil
}

// wait takes the next completion, which must be a success.
func (e *endpoint) wait(ctx context.Context) (rnic.Completion, error) {
	wc := make([]rnic.Completion, 1)
	if _, err := e.cq.Wait(ctx, wc); err != nil {
		return rnic.Completion{}, fmt.Errorf("QP %d (%v): %w", e.qp.Num(), e.qp.State(), err)
	}
	if wc[0].Status != rnic.StatusSuccess {
		return wc[0], fmt.Errorf("QP %d: %v completion %v (QP counters %+v)", e.qp.Num(), wc[0].Opcode, wc[0].Status, e.qp.Counters().Snapshot())
	}
	return wc[0], nil
}

func (e *endpoint) postRecv() error {
	clear(e.in)
	return e.qp.PostRecv(&rnic.RecvWR{WRID: 3, SGL: []rnic.SGE{e.inM.SGE(0, sendLen)}})
}

func (e *endpoint) send(msg string) error {
	clear(e.out)
	copy(e.out, msg)
	return e.qp.PostSend(&rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{e.outM.SGE(0, sendLen)}})
}

func (e *endpoint) msg() string { return strings.TrimRight(string(e.in), "\x00") }

// sender runs rounds on a connected endpoint whose peer advertised rb: a WRITE of the
// round's pattern and a SEND "round r", then the peer's "ack r" before the next round
// (the peer checks the buffer before the next WRITE may land); then it waits for the
// peer to disconnect.
func (e *endpoint) sender(ctx context.Context, rb rnic.RemoteBuffer, seed, rounds int) error {
	for r := range rounds {
		if err := e.postRecv(); err != nil {
			return err
		}
		pattern(e.buf, seed, r)
		if err := e.qp.PostSend(&rnic.SendWR{WRID: 1, Opcode: rnic.OpWrite, SGL: []rnic.SGE{e.mr.SGE(0, xferLen)},
			RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
			return err
		}
		if err := e.send(fmt.Sprintf("round %d", r)); err != nil {
			return err
		}
		acked := false
		for range 2 { // the SEND's completion and the ack's receive, in either order
			c, err := e.wait(ctx)
			switch {
			case err == nil:
				acked = acked || c.Opcode == rnic.WCRecv
			case r == rounds-1 && acked && (c.Status == rnic.StatusWRFlushErr || c.Status == rnic.StatusRetryExcErr):
				// The last WRITE and SEND arrived (the peer acked the SEND, which it
				// reads only after the WRITE), but the ACK covering them was lost and
				// the peer, done, disconnected before the retransmission: the
				// disconnect flushes them here, the unsignaled WRITE (WRID 1) first, or,
				// when the peer's DREQ comes after RetryCnt unanswered retransmissions,
				// they end in retry exhaustion (RC cannot tell either from requests
				// that never arrived; the ack can).
			default:
				return fmt.Errorf("round %d: %w", r, err)
			}
		}
		if got := e.msg(); got != fmt.Sprintf("ack %d", r) {
			return fmt.Errorf("round %d: peer answered %q", r, got)
		}
	}
	// The peer disconnects once its last ack has completed (receiver): leaving first
	// could flush that ack's Send there when its ACK was lost and not yet retransmitted.
	select {
	case <-e.qp.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("after the last round, the peer did not disconnect: %w", ctx.Err())
	}
}

// receiver checks rounds: each "round r" SEND says round r's WRITE has landed; the
// buffer must hold its pattern; then it answers "ack r". The first receive is posted
// before the connection is accepted. After the last ack has completed it disconnects.
func (e *endpoint) receiver(ctx context.Context, seed, rounds int, progress func(int)) error {
	want := make([]byte, xferLen)
	for r := range rounds {
		if _, err := e.wait(ctx); err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		pattern(want, seed, r)
		if string(e.buf) != string(want) {
			return fmt.Errorf("round %d: the WRITE's bytes differ", r)
		}
		if got := e.msg(); got != fmt.Sprintf("round %d", r) {
			return fmt.Errorf("round %d: SEND carried %q", r, got)
		}
		if r+1 < rounds {
			if err := e.postRecv(); err != nil {
				return err
			}
		}
		if err := e.send(fmt.Sprintf("ack %d", r)); err != nil {
			return err
		}
		if _, err := e.wait(ctx); err != nil {
			return fmt.Errorf("round %d ack: %w", r, err)
		}
		if progress != nil {
			progress(r + 1)
		}
	}
	// The sender waits for this (it sent last, its peer might still need its ACK).
	e.qp.Disconnect()
	select {
	case <-e.qp.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("disconnect: %w", ctx.Err())
	}
}

// accept answers one request on ln with a new endpoint advertising its buffer.
func accept(ctx context.Context, dev *rnic.Device, ln *cm.Listener) (*endpoint, *cm.Conn, int, error) {
	req, err := ln.Accept(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	seed, err := strconv.Atoi(strings.TrimRight(string(req.PrivateData()), "\x00"))
	if err != nil {
		req.Reject(nil)
		return nil, nil, 0, fmt.Errorf("request without a seed: %q", req.PrivateData())
	}
	e, err := newEndpoint(dev)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := e.postRecv(); err != nil {
		return nil, nil, 0, err
	}
	c, err := req.Accept(e.qp, cm.Param{PrivateData: e.mr.RemoteBuffer(0, xferLen).Append(nil)})
	return e, c, seed, err
}

// dial connects a new endpoint to addr, naming seed in the private data.
func dial(ctx context.Context, dev *rnic.Device, t *cm.Transport, addr string, seed int) (*endpoint, rnic.RemoteBuffer, error) {
	e, err := newEndpoint(dev)
	if err != nil {
		return nil, rnic.RemoteBuffer{}, err
	}
	c, err := t.Dial(ctx, e.qp, addr, cm.Param{PrivateData: []byte(strconv.Itoa(seed))})
	if err != nil {
		return nil, rnic.RemoteBuffer{}, fmt.Errorf("dial %s: %w", addr, err)
	}
	rb, err := rnic.ParseRemoteBuffer(c.PrivateData())
	return e, rb, err
}

func atoiEnv(k string) int {
	n, _ := strconv.Atoi(os.Getenv(k))
	return n
}

// runChild is a child's main.
func runChild() error {
	me, procs, rounds := atoiEnv(envChild), atoiEnv(envProcs), atoiEnv(envRounds)
	port := uint16(atoiEnv(envPort))
	d, err := host.Open("hd0", nil) // $SOFTRNIC_SOCK names the daemon's socket
	if err != nil {
		return err
	}
	defer d.Close()
	if !d.Attached() {
		return errors.New("not attached")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ip := d.Addr().Addr()
	peers := os.Getenv(envPeers) == "1"
	var ln *cm.Listener
	if peers {
		if ln, err = d.Transport().Listen(fmt.Sprintf(":%d", cmBase+me)); err != nil {
			return err
		}
		defer ln.Close()
	}
	fmt.Println("listening")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	run := func(what string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
				mu.Unlock()
				return
			}
			mu.Lock()
			fmt.Println("ok", what)
			mu.Unlock()
		}()
	}
	// to the other device
	run("ext", func() error {
		e, rb, err := dial(ctx, d.RNIC(), d.Transport(), os.Getenv(envExt), 100+me)
		if err != nil {
			return err
		}
		return e.sender(ctx, rb, 100+me, rounds)
	})
	if peers {
		// child i dials every j > i; j accepts from every i < j
		for j := me + 1; j < procs; j++ {
			seed := me*16 + j
			addr := fmt.Sprintf("%s:%d@%d", ip, cmBase+j, port)
			run(fmt.Sprintf("dial %d", j), func() error {
				e, rb, err := dial(ctx, d.RNIC(), d.Transport(), addr, seed)
				if err != nil {
					return err
				}
				return e.sender(ctx, rb, seed, rounds)
			})
		}
		for range me {
			run("accept", func() error {
				e, _, seed, err := accept(ctx, d.RNIC(), ln)
				if err != nil {
					return err
				}
				return e.receiver(ctx, seed, rounds, nil)
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// childAddr is the other device's address as the children dial it.
func childAddr(ap netip.AddrPort, cmPort int) string {
	return fmt.Sprintf("%s:%d@%d", ap.Addr(), cmPort, ap.Port())
}
