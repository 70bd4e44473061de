package main

// softrnic perftest plays either side of linux-rdma perftest's ib_write_bw, ib_read_bw and
// ib_send_bw with -R (rdma_cm) over iWARP, so it interoperates with perftest on Linux siw.
// The protocol is perftest 6.06's (Debian bookworm's perftest 4.5+0.17); the wire formats
// are in perftest_wire.go.
//
// Sequence (every "xchg" is one message each way on the communication QP, client first):
//
//	comm     rdma_cm connection #1 to the port (the communication QP)
//	         xchg version, xchg cycle buffer, xchg cache line, xchg MTU
//	         xchg dest (zeroes); data connection #2 to the same port; xchg dest (zeroes)
//	write/read:
//	         xchg dest (keys), xchg dest (again, printed as "remote"), xchg dest (after RTR)
//	         client runs the test; xchg dest; 5 × xchg report; xchg dest (close)
//	         the server waits in the xchg after RTR+1 and prints the client's report
//	send:    on iWARP both sides advertise a 4-byte credit counter in their dest
//	         (ctx_alloc_credit; there is no RNR retry to fall back on)
//	         xchg dest (keys), xchg dest (after connect), xchg dest (remote), server posts
//	         rx-depth receives, xchg dest; client sends iters messages, never more than
//	         rx-depth beyond the credit the server RDMA-WRITEs (a little-endian uint32
//	         receive count, every rx-depth/3 receives); xchg dest (close)
//
// Then the client disconnects the data and the communication connections.
//
// With --roce both connections are RoCEv2 RC connections made with the IB CM (rnic/rocev2,
// UDP 4791), as perftest -R does on Linux rxe; only write and read are supported there (a
// Send test on RoCE relies on RNR retries instead of iWARP's credits, not implemented).
// The RoCE address is --bind on the server and the route to the server on the client.
//
// As with perftest, both ends must be given the same -n for Send tests (the server counts
// receives) and the server's -s must cover the client's. Not supported: -q > 1, UD/UC,
// bidirectional (-b), -a, events, -D for Send tests; the peak bandwidth is the best rate
// between two completions rather than perftest's per-WR timestamps, and the remote
// address does not walk through the cycle buffer.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

func init() {
	register(command{name: "perftest", usage: "perftest ib_{write,read,send}_bw -R over iWARP: perftest write|read|send [-s size] [-n iters] [-p port] [server]", run: runPerftest})
}

// ptVerb is the test: RDMA Write, RDMA Read or Send bandwidth.
type ptVerb int

const (
	ptWrite ptVerb = iota
	ptRead
	ptSend
)

// String is perftest's name of the verb (testsStr).
func (v ptVerb) String() string {
	switch v {
	case ptWrite:
		return "RDMA_Write"
	case ptRead:
		return "RDMA_Read"
	}
	return "Send"
}

// perftest defaults (perftest_parameters.h).
const (
	ptDefSize    = 65536 // DEF_SIZE_BW
	ptDefIters   = 1000  // DEF_ITERS
	ptDefItersWB = 5000  // DEF_ITERS_WB (write BW)
	ptDefTx      = 128   // DEF_TX_BW
	ptDefRxSend  = 512   // DEF_RX_SEND
	ptDefCQMod   = 100   // DEF_CQ_MOD
	ptMinIters   = 5     // MIN_ITER
	ptMaxSize    = 1 << 30
	ptCommRecvs  = 4                // receives kept posted on the communication QP
	ptCommSlot   = 64               // bytes per communication receive buffer (messages are ≤ 56)
	ptDefSettle  = time.Duration(0) // accepted and ignored: rnic/iwarp nudges siw instead
)

type ptOpts struct {
	verb       ptVerb
	server     string // client: the server's address; "" runs the server
	bind       string // server: local address to listen on
	port       int
	size       int
	iters      int
	duration   time.Duration // -D: client Write/Read tests run this long instead of -n
	txDepth    int
	rxDepth    int
	cqMod      int
	outReads   int
	gbits      bool
	crc        bool
	roce       bool // --roce: RoCEv2 with the IB CM instead of iWARP
	timeout    time.Duration
	settle     time.Duration // client: pause after the communication connection is up
	linger     time.Duration // client: wait for the server to close before disconnecting
	stdout     io.Writer
	stderr     io.Writer
	listening  func(net.Addr)      // tests: called once the server listens
	gotReport  func(ptReport)      // tests: the report printed at the end
	testCredit func(uint32) uint32 // tests: rewrite the credit the server sends
}

func perftestUsage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic perftest write|read|send [options]            (server)
       softrnic perftest write|read|send [options] <server>   (client)
  like ib_write_bw / ib_read_bw / ib_send_bw -R (perftest 6.06) over iWARP:
	-R, --rdma_cm		connect with rdma_cm (always on; accepted for compatibility)
	-s, --size n		message size (default 65536)
	-n, --iters n		iterations (default 5000 for write, 1000 otherwise)
	-D, --duration s	client write/read: run s seconds instead of -n iterations
	-p, --port n		port (default 18515)
	-q, --qp n		number of QPs (only 1)
	-t, --tx-depth n	send queue depth (default 128)
	-r, --rx-depth n	receive depth of send tests (default 512)
	-Q, --cq-mod n		completion every n work requests (default 100)
	-o, --outs n		outstanding reads (default 128)
	--report_gbits		report Gb/s instead of MB/s
	--bind addr		server: listen on this address (default all)
	--crc			request MPA CRC32c (siw follows the request)
	--roce			RoCEv2 + IB CM (as perftest -R on rxe); write and read only;
				the server needs --bind (its RoCE address)
	--timeout d		give up after the duration d (e.g. 60s)
	--settle d		accepted for compatibility and ignored (rnic/iwarp handles siw's
			accept race without a delay)
  ignored: -F, --CPU-freq, -d/--ib-dev, -x/--gid-index, -c RC, -i/--ib-port
`)
}

// parsePerftestArgs parses perftest's getopt_long-style flags.
func parsePerftestArgs(args []string) (ptOpts, error) {
	o := ptOpts{port: ptDefPort, size: ptDefSize, txDepth: ptDefTx, cqMod: ptDefCQMod, outReads: 128, settle: ptDefSettle, linger: time.Second}
	if len(args) == 0 {
		return o, errors.New("missing test: write, read or send")
	}
	switch args[0] {
	case "write", "ib_write_bw":
		o.verb = ptWrite
	case "read", "ib_read_bw":
		o.verb = ptRead
	case "send", "ib_send_bw":
		o.verb = ptSend
	default:
		return o, fmt.Errorf("unknown test %q (want write, read or send)", args[0])
	}
	o.iters = ptDefIters
	if o.verb == ptWrite {
		o.iters = ptDefItersWB
	}
	o.rxDepth = 1
	if o.verb == ptSend {
		o.rxDepth = ptDefRxSend
	}
	long := map[string]byte{"size": 's', "iters": 'n', "port": 'p', "qp": 'q', "tx-depth": 't', "rx-depth": 'r',
		"cq-mod": 'Q', "outs": 'o', "ib-dev": 'd', "gid-index": 'x', "connection": 'c', "ib-port": 'i', "duration": 'D'}
	var positional []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		var name byte
		var val string
		hasVal := false
		switch {
		case strings.HasPrefix(a, "--"):
			n, v, ok := strings.Cut(a[2:], "=")
			switch n {
			case "rdma_cm", "CPU-freq":
				continue
			case "report_gbits":
				o.gbits = true
				continue
			case "crc":
				o.crc = true
				continue
			case "roce":
				o.roce = true
				continue
			case "timeout", "bind", "settle":
				if !ok {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option --%s needs a value", n)
					}
					i++
					v = args[i]
				}
				if n == "bind" {
					o.bind = v
					continue
				}
				d, err := parseDurationOpt(n, v)
				if err != nil {
					return o, err
				}
				if n == "settle" {
					o.settle = d
				} else {
					o.timeout = d
				}
				continue
			}
			c, known := long[n]
			if !known {
				return o, fmt.Errorf("unknown option %s", a)
			}
			name, val, hasVal = c, v, ok
		case len(a) >= 2 && a[0] == '-':
			name = a[1]
			switch name {
			case 'R', 'F':
				if len(a) > 2 {
					return o, fmt.Errorf("unknown option %s", a)
				}
				continue
			}
			if len(a) > 2 {
				val, hasVal = a[2:], true
			}
		default:
			positional = append(positional, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return o, fmt.Errorf("option -%c needs a value", name)
			}
			i++
			val = args[i]
		}
		if err := o.set(name, val); err != nil {
			return o, err
		}
	}
	if len(positional) > 1 {
		return o, fmt.Errorf("unexpected argument %q", positional[1])
	}
	if len(positional) == 1 {
		o.server = positional[0]
	}
	// force_dependecies: depths never exceed the iterations; CQ moderation ≤ TX depth;
	// an odd receive depth of a Send test is rounded up (perftest's workaround).
	if o.duration == 0 {
		o.txDepth = min(o.txDepth, o.iters)
	}
	if o.verb == ptSend {
		o.rxDepth = min(o.rxDepth, o.iters)
		if o.rxDepth%2 == 1 {
			o.rxDepth++
		}
	}
	o.cqMod = min(o.cqMod, o.txDepth)
	switch {
	case o.roce && o.verb == ptSend:
		return o, errors.New("--roce: only write and read are supported")
	case o.roce && o.server == "" && o.bind == "":
		return o, errors.New("--roce: the server needs --bind addr (its RoCE address)")
	case o.roce && o.crc:
		return o, errors.New("--crc is an MPA option")
	}
	return o, nil
}

func (o *ptOpts) set(c byte, v string) error {
	switch c {
	case 'd', 'x', 'i':
		return nil // device, GID index and port are meaningless here
	case 'c':
		if v != "RC" {
			return fmt.Errorf("connection type %s is not supported (only RC)", v)
		}
		return nil
	case 'D':
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("invalid -D %q", v)
		}
		if o.verb == ptSend {
			return errors.New("-D (duration) is supported for write and read tests only; use -n")
		}
		o.duration = time.Duration(n) * time.Second
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("invalid -%c %q", c, v)
	}
	bad := func(lo, hi int) error {
		if n < lo || n > hi {
			return fmt.Errorf("invalid -%c %d (range %d..%d)", c, n, lo, hi)
		}
		return nil
	}
	var p *int
	var lo, hi int
	switch c {
	case 's':
		p, lo, hi = &o.size, 1, ptMaxSize
	case 'n':
		p, lo, hi = &o.iters, ptMinIters, 1<<31-1
	case 'p':
		p, lo, hi = &o.port, 0, 65535
	case 'q':
		p, lo, hi = new(int), 1, 1
	case 't':
		p, lo, hi = &o.txDepth, 1, 15000
	case 'r':
		p, lo, hi = &o.rxDepth, 1, 16384
	case 'Q':
		p, lo, hi = &o.cqMod, 1, 1024
	case 'o':
		p, lo, hi = &o.outReads, 1, 128
	default:
		return fmt.Errorf("unknown option -%c", c)
	}
	if err := bad(lo, hi); err != nil {
		return err
	}
	*p = n
	return nil
}

func runPerftest(args []string) int {
	return runTool("perftest", args, parsePerftestArgs, perftestUsage,
		func(o *ptOpts) { o.stdout, o.stderr = os.Stdout, os.Stderr }, perftest)
}

// perftest runs one test in the role the options select.
func perftest(ctx context.Context, o ptOpts) error {
	ctx, cancel := toolContext(ctx, &o.stdout, &o.stderr, o.timeout)
	defer cancel()
	s, err := newPtSession(o)
	if err != nil {
		return err
	}
	defer s.close()
	return s.run(ctx)
}

// ptSession holds the verbs resources of one test (perftest's pingpong_context and the
// communication context).
type ptSession struct {
	o        ptOpts
	isServer bool
	dev      *rnic.Device
	pd       *rnic.PD
	commCQ   *rnic.CQ
	dataCQ   *rnic.CQ
	commQP   *rnic.QP
	dataQP   *rnic.QP
	ln       *iwarp.Listener
	commConn *iwarp.Conn
	dataConn *iwarp.Conn
	ep       *rocev2.Endpoint // --roce
	rln      *rocev2.Listener

	commRecv   []byte
	commRecvMR *rnic.MR
	commSend   []byte
	commSendMR *rnic.MR
	pending    [][]byte // received communication messages not yet consumed
	commErr    error    // first failed completion on the communication QP

	buf      []byte // data buffer: Write target / Read source / Send source and sink
	bufMR    *rnic.MR
	credit   []byte // Send tests: credit counter (client: written by the server; server: source)
	creditMR *rnic.MR

	closeCtx   context.Context // run's context without the data-QP watch (finish)
	remVersion float64
	cycle      int
	cacheLine  int
	my, rem    ptDest
	wc         [64]rnic.Completion
}

func newPtSession(o ptOpts) (*ptSession, error) {
	s := &ptSession{o: o, isServer: o.server == "", cycle: ptDefPageSize, cacheLine: ptDefCacheLn}
	var err error
	fail := func(e error) (*ptSession, error) { s.close(); return nil, e }
	if s.dev, s.ep, err = openToolDevice(o.roce, func() (netip.Addr, error) { return ptLocalAddr(o) }); err != nil {
		return fail(err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.commCQ, err = s.dev.CreateCQ(4 * ptCommRecvs); err != nil {
		return fail(err)
	}
	if s.dataCQ, err = s.dev.CreateCQ(o.txDepth + o.rxDepth + 64); err != nil {
		return fail(err)
	}
	if s.commQP, err = s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.commCQ, RecvCQ: s.commCQ, Cap: rnic.QPCap{
		MaxSendWR: ptCommRecvs, MaxRecvWR: ptCommRecvs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: ptCommSlot}}); err != nil {
		return fail(err)
	}
	if s.dataQP, err = s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.dataCQ, RecvCQ: s.dataCQ, Cap: rnic.QPCap{
		MaxSendWR: o.txDepth + 16, MaxRecvWR: max(o.rxDepth, 1), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 8}}); err != nil {
		return fail(err)
	}
	s.commRecv = make([]byte, ptCommRecvs*ptCommSlot)
	if s.commRecvMR, err = s.pd.RegMR(s.commRecv, rnic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	s.commSend = make([]byte, ptCommSlot)
	if s.commSendMR, err = s.pd.RegMR(s.commSend, 0); err != nil {
		return fail(err)
	}
	s.credit = make([]byte, 8)
	if s.creditMR, err = s.pd.RegMR(s.credit, rnic.AccessLocalWrite|rnic.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	for i := 0; i < ptCommRecvs; i++ {
		if err := s.postCommRecv(i); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

func (s *ptSession) close() {
	for _, c := range []*iwarp.Conn{s.dataConn, s.commConn} {
		if c != nil {
			_ = c.Close()
		}
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.rln != nil {
		_ = s.rln.Close()
	}
	for _, q := range []*rnic.QP{s.dataQP, s.commQP} {
		if q != nil {
			_ = q.Destroy()
		}
	}
	if s.ep != nil {
		_ = s.ep.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
}

// ptLocalAddr is the RoCE link's local address: --bind, else the route to the server.
func ptLocalAddr(o ptOpts) (netip.Addr, error) {
	if o.bind != "" {
		a, err := netip.ParseAddr(o.bind)
		if err != nil {
			return a, fmt.Errorf("--roce: --bind must be an IP address: %w", err)
		}
		return a.Unmap(), nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(o.server, strconv.Itoa(roce.UDPPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", o.server, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func (s *ptSession) printf(format string, args ...any) { fmt.Fprintf(s.o.stdout, format, args...) }

// config is the MPA configuration perftest gets from siw through rdma_cm: rev 2 with the
// IRD/ORD word, client-server model, CRC only when asked.
func (s *ptSession) config() *iwarp.Config {
	return &iwarp.Config{MPA: mpa.Config{Rev: 2, CRC: s.o.crc, MaxPrivateData: mpa.SiwMaxPrivateData}}
}

func (s *ptSession) postCommRecv(i int) error {
	return s.commQP.PostRecv(&rnic.RecvWR{WRID: uint64(i), SGL: []rnic.SGE{s.commRecvMR.SGE(i*ptCommSlot, ptCommSlot)}})
}

// sendComm sends msg on the communication QP (inline: the buffer is free on return).
func (s *ptSession) sendComm(msg []byte) error {
	n := copy(s.commSend, msg)
	return s.commQP.PostSend(&rnic.SendWR{WRID: 1 << 32, Opcode: rnic.OpSend, Flags: rnic.Signaled | rnic.Inline,
		SGL: []rnic.SGE{s.commSendMR.SGE(0, n)}})
}

// recvComm returns the next message received on the communication QP. A batch of
// completions can hold the peer's last message followed by the flushes of the remaining
// receives (perftest's server disconnects right after its closing-sync message); the
// message is returned first and the error only when no message is left.
func (s *ptSession) recvComm(ctx context.Context) ([]byte, error) {
	for len(s.pending) == 0 {
		if s.commErr != nil {
			return nil, s.commErr
		}
		n, err := s.commCQ.Wait(ctx, s.wc[:])
		if err != nil {
			if c := context.Cause(ctx); c != nil {
				return nil, c
			}
			return nil, err
		}
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				if s.commErr == nil {
					s.commErr = s.qpError(s.commQP, "communication QP", wc)
				}
				continue
			}
			if wc.Opcode != rnic.WCRecv || s.commErr != nil {
				continue
			}
			i := int(wc.WRID)
			if i < 0 || i >= ptCommRecvs {
				return nil, fmt.Errorf("bad receive completion %d", wc.WRID)
			}
			msg := append([]byte(nil), s.commRecv[i*ptCommSlot:i*ptCommSlot+min(int(wc.ByteLen), ptCommSlot)]...)
			s.pending = append(s.pending, msg)
			if err := s.postCommRecv(i); err != nil {
				s.commErr = err
			}
		}
	}
	m := s.pending[0]
	s.pending = s.pending[1:]
	return m, nil
}

// xchg is ctx_xchg_data / ctx_hand_shake over rdma_cm: the client sends, then receives;
// the server receives, then sends.
func (s *ptSession) xchg(ctx context.Context, msg []byte) ([]byte, error) {
	if !s.isServer {
		if err := s.sendComm(msg); err != nil {
			return nil, err
		}
		return s.recvComm(ctx)
	}
	r, err := s.recvComm(ctx)
	if err != nil {
		return nil, err
	}
	return r, s.sendComm(msg)
}

// handshake exchanges pingpong_dest messages (ctx_hand_shake) and returns the peer's.
func (s *ptSession) handshake(ctx context.Context, my *ptDest) (ptDest, error) {
	r, err := s.xchg(ctx, my.Append(nil))
	if err != nil {
		return ptDest{}, err
	}
	return parsePtDest(r)
}

// qpError explains a failed completion on q.
func (s *ptSession) qpError(q *rnic.QP, which string, wc rnic.Completion) error {
	select {
	case <-q.Done():
	case <-time.After(2 * time.Second):
	}
	var te *iwarp.TermError
	if err := q.Err(); errors.As(err, &te) {
		dir := "received"
		if te.Sent {
			dir = "sent"
		}
		return fmt.Errorf("%s: completion %v status %v: Terminate %s: %v", which, wc.Opcode, wc.Status, dir, te.TerminateError)
	} else if err != nil {
		return fmt.Errorf("%s: completion %v status %v: %v", which, wc.Opcode, wc.Status, err)
	}
	return fmt.Errorf("%s: completion %v status %v (peer disconnected)", which, wc.Opcode, wc.Status)
}

func (s *ptSession) run(ctx context.Context) error {
	o := s.o
	// The communication connection (establish_connection).
	if s.isServer {
		host := o.bind
		if host == "" {
			host = "0.0.0.0"
		}
		if o.roce {
			ln, err := rocev2.Listen(s.ep, net.JoinHostPort(host, strconv.Itoa(o.port)), nil)
			if err != nil {
				return fmt.Errorf("rdma_bind_addr: %w", err)
			}
			s.rln = ln
			if o.listening != nil {
				o.listening(net.UDPAddrFromAddrPort(ln.Addr()))
			}
		} else {
			ln, err := iwarp.Listen(s.dev, net.JoinHostPort(host, strconv.Itoa(o.port)), s.config())
			if err != nil {
				return fmt.Errorf("rdma_bind_addr: %w", err)
			}
			s.ln = ln
			if o.listening != nil {
				o.listening(ln.Addr())
			}
		}
		s.printf("\n************************************\n* Waiting for client to connect... *\n************************************\n")
		if err := s.accept(ctx, s.commQP, 1, &s.commConn); err != nil {
			return fmt.Errorf("communication connection: %w", err)
		}
	} else {
		if err := s.dial(ctx, s.commQP, 1, &s.commConn); err != nil {
			return fmt.Errorf("communication connection: %w", err)
		}
	}
	// exchange_versions, check_version_compatibility, check_sys_data, check_mtu.
	r, err := s.xchg(ctx, ptVersionMsg(ptVersion))
	if err != nil {
		return fmt.Errorf("version exchange: %w", err)
	}
	rv, f, err := parsePtVersion(r)
	if err != nil {
		return err
	}
	if f < ptMinVersion {
		return fmt.Errorf("peer perftest version %q is older than %.2f (not supported, as in perftest)", rv, ptMinVersion)
	}
	s.remVersion = f
	for _, p := range []*int{&s.cycle, &s.cacheLine} {
		r, err := s.xchg(ctx, ptInt32Msg(*p))
		if err != nil {
			return fmt.Errorf("system data exchange: %w", err)
		}
		v, err := parsePtInt32(r)
		if err != nil {
			return err
		}
		*p = max(*p, v)
	}
	mtu := ptMTUEnum1024
	if r, err = s.xchg(ctx, ptMTUMsg(mtu)); err != nil {
		return fmt.Errorf("MTU exchange: %w", err)
	}
	if m := parsePtMTU(r); m != 0 {
		mtu = min(mtu, m)
	}
	// The data buffer: BUFF_SIZE(size, cycle buffer).
	s.buf = make([]byte, max(o.size, s.cycle))
	for i := range s.buf {
		s.buf[i] = byte(i)
	}
	if s.bufMR, err = s.pd.RegMR(s.buf, rnic.AccessLocalWrite|rnic.AccessRemoteRead|rnic.AccessRemoteWrite); err != nil {
		return err
	}
	// create_rdma_cm_connection: a handshake, the data connection, a handshake.
	var zero ptDest
	if _, err := s.handshake(ctx, &zero); err != nil {
		return fmt.Errorf("sync before the data connection: %w", err)
	}
	if err := s.connectData(ctx); err != nil {
		return fmt.Errorf("data connection: %w", err)
	}
	// From here an error on the data QP ends waits on the communication QP, except in the
	// closing sync (finish), when the peer may already be tearing the data connection down.
	s.closeCtx = ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.dataQP.Done():
			err := s.dataQP.Err()
			if err == nil {
				err = errors.New("data connection closed")
			}
			cancel(fmt.Errorf("data QP: %w", err))
		case <-ctx.Done():
		}
	}()
	if _, err := s.handshake(ctx, &zero); err != nil {
		return fmt.Errorf("sync after the data connection: %w", err)
	}
	// set_up_connection.
	s.my = ptDest{QPN: s.dataQP.Num(), PSN: rand.Uint32() & 0xffffff, RKey: s.bufMR.RKey(), VAddr: s.bufMR.Addr(),
		OutReads: uint32(o.outReads), GIDIndex: 0xffffffff}
	if o.verb == ptSend {
		// iWARP has no RNR retry: the receiver grants credits (ctx_alloc_credit).
		s.my.RKey, s.my.VAddr = s.creditMR.RKey(), s.creditMR.Addr()
	}
	s.printInfo(mtu)
	if o.verb == ptSend {
		return s.runSend(ctx)
	}
	return s.runRDMA(ctx)
}

func (s *ptSession) addr() string { return net.JoinHostPort(s.o.server, strconv.Itoa(s.o.port)) }

// accept waits for the next connection request and accepts it on qp (an iWARP connection
// is stored in *c; a RoCE one lives in the endpoint).
func (s *ptSession) accept(ctx context.Context, qp *rnic.QP, depth int, c **iwarp.Conn) error {
	if s.o.roce {
		req, err := s.rln.Accept(ctx)
		if err != nil {
			return err
		}
		_, err = req.Accept(qp, rocev2.ConnParam{IRD: depth, ORD: depth})
		return err
	}
	req, err := s.ln.Accept(ctx)
	if err != nil {
		return err
	}
	// The responder takes min(initiator ORD, our IRD) and min(initiator IRD, our ORD).
	*c, err = req.Accept(qp, iwarp.ConnParam{IRD: depth, ORD: depth})
	return err
}

// dial connects qp to the server (rdma_connect).
func (s *ptSession) dial(ctx context.Context, qp *rnic.QP, depth int, c **iwarp.Conn) error {
	if s.o.roce {
		_, err := rocev2.Dial(ctx, s.ep, qp, s.addr(), nil, rocev2.ConnParam{IRD: depth, ORD: depth})
		return err
	}
	var err error
	*c, err = iwarp.Dial(ctx, qp, s.addr(), s.config(), iwarp.ConnParam{IRD: depth, ORD: depth})
	return err
}

// connectData makes the data connection: the server accepts the next request on its
// listener (perftest listens again on the same port); the client retries as
// rdma_cm_client_connection does (10 times, 100 ms apart) while the server gets ready.
func (s *ptSession) connectData(ctx context.Context) error {
	depth := 1
	if s.o.verb == ptRead {
		depth = s.o.outReads
	}
	if s.isServer {
		ird := s.dev.Config().MaxIRD
		return s.accept(ctx, s.dataQP, ird, &s.dataConn)
	}
	var err error
	for i := 0; i < 10; i++ {
		if err = s.dial(ctx, s.dataQP, depth, &s.dataConn); err == nil {
			return nil
		}
		if ctx.Err() != nil || s.dataQP.State() != rnic.QPIdle {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return err
}

func (s *ptSession) printInfo(mtu int) {
	o := s.o
	s.printf("%s                    %v BW Test\n", ptResultLine, o.verb)
	s.printf(" Dual-port       : OFF\t\tDevice         : %s\n", s.dev.Name())
	tt := "IW"
	if o.roce {
		tt = "IB"
	}
	s.printf(" Number of qps   : 1\t\tTransport type : %s\n", tt)
	s.printf(" Connection type : RC\t\tUsing SRQ      : OFF\n")
	if !s.isServer || o.verb == ptSend {
		s.printf(" TX depth        : %d\n", o.txDepth)
	}
	if o.verb == ptSend {
		s.printf(" RX depth        : %d\n", o.rxDepth)
	}
	s.printf(" CQ Moderation   : %d\n", o.cqMod)
	s.printf(" Mtu             : %d[B]\n", 128<<mtu)
	s.printf(" Link type       : Ethernet\n")
	if o.verb == ptRead {
		s.printf(" Outstand reads  : %d\n", o.outReads)
	}
	s.printf(" rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n")
	if s.dataConn != nil {
		p := s.dataConn.Params()
		s.printf(" MPA             : rev %d, CRC %v, IRD %d ORD %d\n", p.Rev, p.CRC, p.IRD, p.ORD)
	}
	s.printf("%s", ptResultLine)
}

const ptResultLine = "---------------------------------------------------------------------------------------\n"

func (s *ptSession) printDest(side string, d *ptDest) {
	s.printf(" %s address: LID %#04x QPN %#06x PSN %#06x", side, d.LID, d.QPN, d.PSN)
	if s.o.verb == ptRead {
		s.printf(" OUT %#04x", d.OutReads)
	}
	s.printf(" RKey %#08x VAddr %#016x\n", d.RKey, d.VAddr)
}

func (s *ptSession) printHeader() {
	if s.o.gbits {
		s.printf("%s #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n", ptResultLine)
	} else {
		s.printf("%s #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n", ptResultLine)
	}
}

// printReport prints a report line in perftest's format (REPORT_FMT, or REPORT_FMT_EXT
// for averages below 0.1 Gb/s).
func (s *ptSession) printReport(r ptReport) {
	if s.o.gotReport != nil {
		s.o.gotReport(r)
	}
	if s.o.gbits && r.Avg < 0.1 {
		s.printf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRateAvg)
		return
	}
	s.printf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRateAvg)
}

// bwMeter turns completion times into perftest's report: the average over the whole run
// and the peak, here the best rate over any interval between two completions.
type bwMeter struct {
	size       int
	gbits      bool
	start, end time.Time
	last       time.Time
	peak       float64 // bytes per second
}

func (m *bwMeter) begin(t time.Time) { m.start, m.last = t, t }

// done records that n messages completed at t.
func (m *bwMeter) done(n uint64, t time.Time) {
	if d := t.Sub(m.last).Seconds(); d > 0 {
		m.peak = max(m.peak, float64(n)*float64(m.size)/d)
	}
	m.last, m.end = t, t
}

func (m *bwMeter) report(iters uint64) ptReport {
	unit := float64(0x100000) // MB/s as perftest counts them
	if m.gbits {
		unit = 125e6
	}
	r := ptReport{Size: uint64(m.size), Iters: iters}
	if d := m.end.Sub(m.start).Seconds(); d > 0 {
		r.Avg = float64(iters) * float64(m.size) / d / unit
		r.MsgRateAvg = float64(iters) / d / 1e6
	}
	r.Peak = max(m.peak/unit, r.Avg)
	return r
}

// runRDMA is the RDMA Write / RDMA Read test after set_up_connection.
func (s *ptSession) runRDMA(ctx context.Context) error {
	rem, err := s.handshake(ctx, &s.my)
	if err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.printDest("local", &s.my)
	if rem, err = s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.rem = rem
	s.printDest("remote", &s.rem)
	if _, err := s.handshake(ctx, &s.my); err != nil { // "additional handshake after RTR"
		return fmt.Errorf("sync after RTR: %w", err)
	}
	s.printHeader()
	var mine ptReport
	if s.isServer {
		// The server only waits for the client to finish.
		if _, err := s.handshake(ctx, &s.my); err != nil {
			return fmt.Errorf("waiting for the client's test: %w", err)
		}
	} else {
		if mine, err = s.postRDMA(ctx); err != nil {
			return err
		}
		s.printReport(mine)
		s.printf("%s", ptResultLine)
		if _, err := s.handshake(ctx, &s.my); err != nil {
			return fmt.Errorf("sync after the test: %w", err)
		}
	}
	// xchg_bw_reports; the server prints the client's.
	var theirs ptReport
	for i, m := range mine.messages(s.remVersion) {
		r, err := s.xchg(ctx, m)
		if err != nil {
			return fmt.Errorf("report exchange: %w", err)
		}
		if err := theirs.setField(i, r, s.remVersion); err != nil {
			return err
		}
	}
	if s.isServer {
		s.printReport(theirs)
	}
	return s.finish(ctx)
}

// finish is ctx_close_connection and the teardown. The client gives the server a moment
// (linger) to close the communication connection itself, as perftest servers do, because
// siw fails a SEND whose connection closes before its transmit thread has reported it
// complete (siw_sq_flush: IBV_WC_LOC_QP_OP_ERR), which makes perftest's server exit 1
// after its final message; then it disconnects both connections. The server waits (at
// most 5 s each) for the client's disconnects.
//
// The closing sync waits on the context without the data-QP watch: a perftest server
// destroys its data QP right after answering it, and that disconnect can overtake the
// answer on the communication connection.
func (s *ptSession) finish(ctx context.Context) error {
	if s.closeCtx != nil {
		ctx = s.closeCtx
	}
	if _, err := s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("closing sync: %w", err)
	}
	if s.isServer {
		s.printf("%s", ptResultLine)
	} else {
		select {
		case <-s.commQP.Done():
		case <-time.After(s.o.linger):
		}
	}
	for _, q := range []*rnic.QP{s.dataQP, s.commQP} {
		if !s.isServer {
			q.Disconnect()
		}
		select {
		case <-q.Done():
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}

// postRDMA posts iters RDMA Writes or Reads of size bytes to the server's buffer, at most
// TX depth outstanding, a completion requested every CQ-moderation WRs and on the last
// (run_iter_bw). Unlike perftest it does not walk the remote address through the cycle
// buffer (that only matters for CPU caches).
func (s *ptSession) postRDMA(ctx context.Context) (ptReport, error) {
	o := s.o
	op := rnic.OpWrite
	if o.verb == ptRead {
		op = rnic.OpRead
	}
	wr := rnic.SendWR{Opcode: op, SGL: []rnic.SGE{s.bufMR.SGE(0, o.size)}, RemoteAddr: s.rem.VAddr, RKey: s.rem.RKey}
	m := bwMeter{size: o.size, gbits: o.gbits}
	iters, depth, mod := uint64(o.iters), uint64(o.txDepth), uint64(o.cqMod)
	var scnt, ccnt, lastSig uint64
	start := time.Now()
	m.begin(start)
	if o.duration > 0 {
		// -D: post until the time is up, then count what the last completion covers
		// (the unsignaled tail finishes before the disconnect but is not counted).
		iters = math.MaxUint64
	}
	for ccnt < iters {
		for scnt < iters && scnt-ccnt < depth {
			if o.duration > 0 && time.Since(start) >= o.duration {
				iters = lastSig
				break
			}
			wr.Flags = 0
			if (scnt+1)%mod == 0 || scnt+1 == iters {
				wr.Flags = rnic.Signaled
				wr.WRID = scnt + 1 - lastSig // how many WRs this completion covers
				lastSig = scnt + 1
			}
			if err := s.dataQP.PostSend(&wr); err != nil {
				return ptReport{}, fmt.Errorf("post send (scnt=%d): %w", scnt, err)
			}
			scnt++
		}
		if ccnt >= iters {
			break
		}
		n, err := s.dataCQ.Wait(ctx, s.wc[:])
		if err != nil {
			return ptReport{}, fmt.Errorf("poll CQ (ccnt=%d): %w", ccnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return ptReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			ccnt += wc.WRID
			m.done(wc.WRID, now)
		}
	}
	return m.report(ccnt), nil
}

// causeOf prefers the cancellation cause of ctx to err.
func causeOf(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

// runSend is the Send test after set_up_connection.
func (s *ptSession) runSend(ctx context.Context) error {
	o := s.o
	rem, err := s.handshake(ctx, &s.my) // keys (the credit buffers)
	if err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	if _, err := s.handshake(ctx, &s.my); err != nil { // where ctx_connect would be
		return fmt.Errorf("sync: %w", err)
	}
	s.printDest("local", &s.my)
	if rem, err = s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("key exchange: %w", err)
	}
	s.rem = rem
	s.printDest("remote", &s.rem)
	s.printHeader()
	recv := rnic.RecvWR{SGL: []rnic.SGE{s.bufMR.SGE(0, o.size)}}
	if s.isServer {
		for i := 0; i < o.rxDepth; i++ { // ctx_set_recv_wqes
			if err := s.dataQP.PostRecv(&recv); err != nil {
				return fmt.Errorf("post recv: %w", err)
			}
		}
	}
	if _, err := s.handshake(ctx, &s.my); err != nil {
		return fmt.Errorf("sync before the test: %w", err)
	}
	var r ptReport
	if s.isServer {
		r, err = s.recvSends(ctx, &recv)
	} else {
		r, err = s.postSends(ctx)
	}
	if err != nil {
		return err
	}
	s.printReport(r)
	if !s.isServer {
		s.printf("%s", ptResultLine)
	}
	return s.finish(ctx)
}

// recvSends receives iters messages, re-posting each receive and granting credits with a
// 4-byte RDMA Write of the receive count every rx-depth/3 receives (run_iter_bw_server).
func (s *ptSession) recvSends(ctx context.Context, recv *rnic.RecvWR) (ptReport, error) {
	o := s.o
	iters, rx := uint64(o.iters), uint64(o.rxDepth)
	creditCnt := max(rx/3, 1)
	credit := rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Inline, SGL: []rnic.SGE{s.creditMR.SGE(0, 4)},
		RemoteAddr: s.rem.VAddr, RKey: s.rem.RKey}
	m := bwMeter{size: o.size, gbits: o.gbits}
	var rcnt uint64
	posted := rx
	for rcnt < iters {
		n, err := s.dataCQ.Wait(ctx, s.wc[:])
		if err != nil {
			return ptReport{}, fmt.Errorf("poll CQ (rcnt=%d): %w", rcnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return ptReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			if wc.Opcode != rnic.WCRecv {
				continue // a credit Write
			}
			if rcnt == 0 {
				m.begin(now)
			}
			rcnt++
			m.done(1, now)
			if posted < iters {
				if err := s.dataQP.PostRecv(recv); err != nil {
					return ptReport{}, fmt.Errorf("post recv (rcnt=%d): %w", rcnt, err)
				}
				posted++
			}
			if (rcnt%rx)%creditCnt == 0 {
				v := uint32(rcnt)
				if o.testCredit != nil {
					v = o.testCredit(v)
				}
				// Inline: the value is copied at post time, so the buffer is free at once.
				binary.LittleEndian.PutUint32(s.credit[:4], v)
				if err := s.postRetry(ctx, &credit); err != nil {
					return ptReport{}, fmt.Errorf("post credit (rcnt=%d): %w", rcnt, err)
				}
			}
		}
	}
	return m.report(iters), nil
}

// postRetry posts wr, waiting while the send queue is full of (unsignaled) credit Writes.
func (s *ptSession) postRetry(ctx context.Context, wr *rnic.SendWR) error {
	for {
		err := s.dataQP.PostSend(wr)
		if !errors.Is(err, rnic.ErrQueueFull) {
			return err
		}
		if ctx.Err() != nil {
			return causeOf(ctx, ctx.Err())
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// postSends sends iters messages, at most TX depth outstanding and never more than
// rx-depth beyond the server's credit (run_iter_bw with send_rcredit).
func (s *ptSession) postSends(ctx context.Context) (ptReport, error) {
	o := s.o
	wr := rnic.SendWR{Opcode: rnic.OpSend, SGL: []rnic.SGE{s.bufMR.SGE(0, o.size)}}
	m := bwMeter{size: o.size, gbits: o.gbits}
	iters, depth, mod, rx := uint64(o.iters), uint64(o.txDepth), uint64(o.cqMod), uint32(o.rxDepth)
	var scnt, ccnt, lastSig uint64
	spins := 0
	m.begin(time.Now())
	for ccnt < iters {
		waitCredit := false
		for scnt < iters && scnt-ccnt < depth {
			if uint32(scnt+1)-loadCredit(&s.credit[0]) >= rx {
				waitCredit = true
				break
			}
			wr.Flags = 0
			if (scnt+1)%mod == 0 || scnt+1 == iters {
				wr.Flags = rnic.Signaled
				wr.WRID = scnt + 1 - lastSig
				lastSig = scnt + 1
			}
			if err := s.dataQP.PostSend(&wr); err != nil {
				return ptReport{}, fmt.Errorf("post send (scnt=%d): %w", scnt, err)
			}
			scnt++
		}
		var n int
		var err error
		if waitCredit {
			// Completions may never come for the unsignaled tail: poll, and spin on the
			// credit.
			if n, err = s.dataCQ.Poll(s.wc[:]); err == nil && n == 0 {
				if ctx.Err() != nil {
					return ptReport{}, fmt.Errorf("waiting for credits (scnt=%d): %w", scnt, causeOf(ctx, ctx.Err()))
				}
				if s.dataQP.State() != rnic.QPRTS {
					return ptReport{}, fmt.Errorf("data QP left RTS while waiting for credits: %v", s.dataQP.Err())
				}
				if spins++; spins%64 == 0 {
					time.Sleep(20 * time.Microsecond)
				} else {
					runtime.Gosched()
				}
				continue
			}
		} else {
			n, err = s.dataCQ.Wait(ctx, s.wc[:])
		}
		if err != nil {
			return ptReport{}, fmt.Errorf("poll CQ (ccnt=%d): %w", ccnt, causeOf(ctx, err))
		}
		now := time.Now()
		for _, wc := range s.wc[:n] {
			if wc.Status != rnic.StatusSuccess {
				return ptReport{}, s.qpError(s.dataQP, "data QP", wc)
			}
			ccnt += wc.WRID
			m.done(wc.WRID, now)
		}
	}
	return m.report(iters), nil
}
