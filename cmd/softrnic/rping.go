package main

// softrnic rping speaks the protocol of rdma-core's rping (librdmacm/examples/rping.c) over
// iWARP, so it interoperates with rping on Linux siw in either role.
//
// The protocol, per ping (the client's count; the server loops until the client leaves):
//
//	client → server  SEND 16 bytes {be64 addr, be32 rkey, be32 size}: the client's source buffer
//	server           RDMA READ size bytes from it into its own buffer
//	server → client  SEND 16 bytes ("go ahead"; the content is not looked at)
//	client → server  SEND 16 bytes advertising the client's sink buffer
//	server           RDMA WRITE strlen(data)+1 bytes into it
//	server → client  SEND 16 bytes ("go ahead")
//	client           with -V, compares the sink with the source (size bytes)
//
// The source holds "rdma-ping-%d: " followed by printable ASCII 'A'..'z' starting at a
// letter that advances by one per ping (wrapping after 'z'), NUL-terminated in its last byte.
// Connection: MPA rev 2 with the RFC 6581 IRD/ORD word (IRD = ORD = 1, as rping's
// rdma_conn_param asks), no CRC, client-server model, like siw's default; --crc asks for CRC.
//
// With --roce the same protocol runs over RoCEv2 (rnic/rocev2), as rping does on Linux rxe:
// rdma_cm's IB CM exchange (REQ with the cma_hdr and the TCP port-space service ID, REP,
// RTU; DREQ/DREP on disconnect) as UD MADs to QP1, the RC QP's packets on UDP 4791. The
// local address is -a for the server (a RoCE link binds one address; the ICRC covers it)
// and --local or the route to -a for the client.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
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
	register(command{name: "rping", usage: "rdma-core rping over iWARP or RoCEv2 (-s | -c -a addr) [-p port] [-C n] [-S size] [-vVd] [--roce]", run: runRping})
}

// rping constants (rping.c): default port and size, the message prefix, and the size range.
const (
	rpingPort       = 7174
	rpingSize       = 64
	rpingMsgFmt     = "rdma-ping-%d: "
	rpingMinSize    = 11 + 15 // sizeof("2147483647") + sizeof("rdma-ping-%d: ")
	rpingMaxSize    = 64*1024 - 1
	rpingInfoLen    = 16 // struct rping_rdma_info
	rpingFirstChar  = 'A'
	rpingLastChar   = 'z'
	rpingRecvDepth  = 2
	rpingSendDepth  = 16
	rpingCQDepth    = 2 * rpingSendDepth
	rpingGoAheadLen = rpingInfoLen

	// defaultSettle: --settle is accepted and ignored; rnic/iwarp handles Linux siw's
	// responder race without a delay.
	defaultSettle = time.Duration(0)
)

// rpingOpts are the parsed command-line options.
type rpingOpts struct {
	server, client   bool
	addr             string
	port             int
	count            int // 0: forever
	size             int
	verbose          bool
	validate         bool
	debug            bool
	crc              bool          // --crc: request MPA CRC (C bit)
	timeout          time.Duration // --timeout: bound on the whole run (0: none)
	fault            string        // --fault: deliberate protocol faults for error tests
	settle           time.Duration // --settle: client pause between connect and the first Send
	roce             bool          // --roce: RoCEv2 with the IB CM instead of iWARP
	local            string        // --local: client's local IP address for RoCEv2
	stdout, stderr   io.Writer
	listening        func(net.Addr) // tests: called once the server listens
	collectNegotiate func(mpa.Params, *rnic.Counters)
}

// Faults that --fault can inject (for interop error tests).
const (
	faultWriteBadSTag = "write-bad-stag" // server: RDMA WRITE with a corrupted remote STag
	faultReadBadSTag  = "read-bad-stag"  // server: RDMA READ with a corrupted remote STag
	faultSinkOOB      = "sink-oob"       // client: advertise the sink half a buffer past its start, so the server's Write overruns it
)

func rpingUsage(w io.Writer) {
	fmt.Fprint(w, `usage: softrnic rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
       softrnic rping -c [-vVd] [-S size] [-C count] -a addr [-p port]
	-c		client side
	-s		server side
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size		ping data size (`+strconv.Itoa(rpingMinSize)+` to `+strconv.Itoa(rpingMaxSize)+`, default 64)
	-C count	ping count times (default: forever)
	-a addr		address
	-p port		port (default 7174)
	--crc		request MPA CRC32c (rping has no such flag; siw follows the request)
	--timeout d	give up after the duration d (e.g. 30s)
	--settle d	accepted for compatibility and ignored (rnic/iwarp handles siw's
			accept race without a delay)
	--fault f	inject a fault: write-bad-stag, read-bad-stag (server), sink-oob (client)
	--roce		RoCEv2 (IB CM over UDP 4791, as rping on rxe) instead of iWARP;
			the server needs -a (its RoCE address)
	--local ip	RoCEv2 client: local IP address (default: the route to -a)
`)
}

// parseRpingArgs parses rping's getopt-style flags ("-vV", "-S64", "-S 64") and the
// softrnic long options.
func parseRpingArgs(args []string) (rpingOpts, error) {
	o := rpingOpts{port: rpingPort, size: rpingSize, settle: defaultSettle}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			needVal := func() (string, error) {
				if hasVal {
					return val, nil
				}
				if i+1 >= len(args) {
					return "", fmt.Errorf("option --%s needs a value", name)
				}
				i++
				return args[i], nil
			}
			switch name {
			case "crc":
				o.crc = true
			case "roce":
				o.roce = true
			case "local":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				if _, err := netip.ParseAddr(v); err != nil {
					return o, fmt.Errorf("invalid --local %q", v)
				}
				o.local = v
			case "timeout", "settle":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				d, err := parseDurationOpt(name, v)
				if err != nil {
					return o, err
				}
				if name == "settle" {
					o.settle = d
				} else {
					o.timeout = d
				}
			case "fault":
				v, err := needVal()
				if err != nil {
					return o, err
				}
				switch v {
				case faultWriteBadSTag, faultReadBadSTag, faultSinkOOB:
				default:
					return o, fmt.Errorf("unknown --fault %q", v)
				}
				o.fault = v
			default:
				return o, fmt.Errorf("unknown option %s", a)
			}
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			return o, fmt.Errorf("unexpected argument %q", a)
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 's':
				o.server = true
			case 'c':
				o.client = true
			case 'v':
				o.verbose = true
			case 'V':
				o.validate = true
			case 'd':
				o.debug = true
			case 'a', 'p', 'C', 'S':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option -%c needs a value", c)
					}
					i++
					v = args[i]
				}
				if err := o.setValue(c, v); err != nil {
					return o, err
				}
				j = len(a)
			default:
				return o, fmt.Errorf("unknown option -%c", c)
			}
		}
	}
	switch {
	case o.server == o.client:
		return o, errors.New("exactly one of -s and -c is required")
	case o.client && o.addr == "":
		return o, errors.New("-c needs -a addr")
	case o.roce && o.server && o.addr == "":
		return o, errors.New("--roce -s needs -a addr (the RoCE link's local address)")
	case o.roce && o.crc:
		return o, errors.New("--crc is an MPA option; RoCEv2 always has the ICRC")
	case o.roce && o.fault != "":
		return o, errors.New("--fault is for iWARP only")
	case o.fault == faultSinkOOB && !o.client,
		(o.fault == faultWriteBadSTag || o.fault == faultReadBadSTag) && !o.server:
		return o, fmt.Errorf("--fault %s does not apply to this role", o.fault)
	}
	return o, nil
}

func (o *rpingOpts) setValue(c byte, v string) error {
	if c == 'a' {
		o.addr = v
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("invalid -%c %q", c, v)
	}
	switch c {
	case 'p':
		if n < 0 || n > 65535 {
			return fmt.Errorf("invalid port %d", n)
		}
		o.port = n
	case 'C':
		if n < 0 {
			return fmt.Errorf("invalid count %d", n)
		}
		o.count = n
	case 'S':
		if n < rpingMinSize || n > rpingMaxSize {
			return fmt.Errorf("invalid size %d (valid range is %d to %d)", n, rpingMinSize, rpingMaxSize)
		}
		o.size = n
	}
	return nil
}

func runRping(args []string) int {
	return runTool("rping", args, parseRpingArgs, rpingUsage,
		func(o *rpingOpts) { o.stdout, o.stderr = os.Stdout, os.Stderr }, rping)
}

// rping runs one server connection or one client session.
func rping(ctx context.Context, o rpingOpts) error {
	ctx, cancel := toolContext(ctx, &o.stdout, &o.stderr, o.timeout)
	defer cancel()
	s, err := newRpingSession(o)
	if err != nil {
		return err
	}
	defer s.close()
	if o.server {
		return s.runServer(ctx)
	}
	return s.runClient(ctx)
}

// rpingSession holds the verbs resources of one rping run (rping.c's control block).
type rpingSession struct {
	o      rpingOpts
	dev    *rnic.Device
	pd     *rnic.PD
	cq     *rnic.CQ
	qp     *rnic.QP
	conn   *iwarp.Conn
	ln     *iwarp.Listener
	ep     *rocev2.Endpoint // --roce
	rconn  *rocev2.Conn
	rln    *rocev2.Listener
	recv   []byte // 16-byte receive buffer
	send   []byte // 16-byte send buffer
	rdma   []byte // server: RDMA Read sink / Write source; client: RDMA Write sink
	start  []byte // client: RDMA Read source
	recvMR *rnic.MR
	sendMR *rnic.MR
	rdmaMR *rnic.MR
	startM *rnic.MR
	wc     [8]rnic.Completion

	// Work requests reused for every post (the engine copies them), so a ping allocates
	// nothing here.
	recvWR  rnic.RecvWR
	sendWR  rnic.SendWR
	rdmaWR  rnic.SendWR
	recvSGE [1]rnic.SGE
	sendSGE [1]rnic.SGE
	rdmaSGE [1]rnic.SGE
}

func newRpingSession(o rpingOpts) (*rpingSession, error) {
	s := &rpingSession{o: o}
	var err error
	fail := func(e error) (*rpingSession, error) { s.close(); return nil, e }
	if s.dev, s.ep, err = openToolDevice(o.roce, func() (netip.Addr, error) { return rpingLocalAddr(o) }); err != nil {
		return fail(err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail(err)
	}
	if s.cq, err = s.dev.CreateCQ(rpingCQDepth); err != nil {
		return fail(err)
	}
	s.qp, err = s.dev.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: rnic.QPCap{
		MaxSendWR: rpingSendDepth, MaxRecvWR: rpingRecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	s.recv = make([]byte, rpingInfoLen)
	s.send = make([]byte, rpingInfoLen)
	s.rdma = make([]byte, o.size)
	if s.recvMR, err = s.pd.RegMR(s.recv, rnic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if s.sendMR, err = s.pd.RegMR(s.send, 0); err != nil {
		return fail(err)
	}
	remote := rnic.AccessLocalWrite | rnic.AccessRemoteRead | rnic.AccessRemoteWrite
	if s.rdmaMR, err = s.pd.RegMR(s.rdma, remote); err != nil {
		return fail(err)
	}
	if o.client {
		s.start = make([]byte, o.size)
		if s.startM, err = s.pd.RegMR(s.start, remote); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

func (s *rpingSession) close() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.rln != nil {
		_ = s.rln.Close()
	}
	if s.qp != nil {
		_ = s.qp.Destroy()
	}
	if s.ep != nil {
		_ = s.ep.Close()
	}
	if s.dev != nil {
		_ = s.dev.Close()
	}
}

// rpingLocalAddr is the local IP address of the RoCE link: the server's -a, else --local,
// else the source address of the route to the client's -a.
func rpingLocalAddr(o rpingOpts) (netip.Addr, error) {
	switch {
	case o.server:
		a, err := netip.ParseAddr(o.addr)
		if err != nil {
			return a, fmt.Errorf("--roce: -a must be an IP address: %w", err)
		}
		return a.Unmap(), nil
	case o.local != "":
		return netip.ParseAddr(o.local)
	}
	c, err := net.Dial("udp", net.JoinHostPort(o.addr, strconv.Itoa(roce.UDPPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", o.addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// done is closed when the transport connection has finished.
func (s *rpingSession) done() <-chan struct{} {
	if s.rconn != nil {
		return s.rconn.Done()
	}
	return s.conn.Done()
}

func (s *rpingSession) debugf(format string, args ...any) {
	if s.o.debug {
		fmt.Fprintf(s.o.stdout, format+"\n", args...)
	}
}

// config is the MPA configuration rping uses on siw: rev 2 (enhanced, IRD/ORD word),
// client-server model, CRC only when asked.
func (s *rpingSession) config() *iwarp.Config {
	return &iwarp.Config{MPA: mpa.Config{Rev: 2, CRC: s.o.crc, MaxPrivateData: mpa.SiwMaxPrivateData}}
}

func (s *rpingSession) postRecv() error {
	s.recvSGE[0] = s.recvMR.SGE(0, rpingInfoLen)
	s.recvWR = rnic.RecvWR{WRID: 1, SGL: s.recvSGE[:]}
	return s.qp.PostRecv(&s.recvWR)
}

// postInfo sends the 16-byte advertisement of mr's first n bytes (rping_format_send).
func (s *rpingSession) postInfo(mr *rnic.MR, n int) error {
	binary.BigEndian.PutUint64(s.send[0:], mr.Addr())
	binary.BigEndian.PutUint32(s.send[8:], mr.RKey())
	binary.BigEndian.PutUint32(s.send[12:], uint32(n))
	if s.o.debug {
		s.debugf("RDMA addr %x rkey %x len %d", mr.Addr(), mr.RKey(), n)
	}
	return s.postSend()
}

// postSink advertises the client's sink buffer (with --fault sink-oob, half a buffer past
// its start, so the peer's RDMA Write of -S bytes runs off the end of the region).
func (s *rpingSession) postSink() error {
	off := 0
	if s.o.fault == faultSinkOOB {
		off = s.o.size / 2
	}
	binary.BigEndian.PutUint64(s.send[0:], s.rdmaMR.Addr()+uint64(off))
	binary.BigEndian.PutUint32(s.send[8:], s.rdmaMR.RKey())
	binary.BigEndian.PutUint32(s.send[12:], uint32(s.o.size))
	if s.o.debug {
		s.debugf("RDMA addr %x rkey %x len %d", s.rdmaMR.Addr()+uint64(off), s.rdmaMR.RKey(), s.o.size)
	}
	return s.postSend()
}

func (s *rpingSession) postSend() error {
	s.sendSGE[0] = s.sendMR.SGE(0, rpingInfoLen)
	s.sendWR = rnic.SendWR{WRID: 2, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: s.sendSGE[:]}
	return s.qp.PostSend(&s.sendWR)
}

// postRDMA posts the server's RDMA Read or Write of n bytes of its buffer at the peer's
// addr/rkey.
func (s *rpingSession) postRDMA(op rnic.Opcode, n uint32, addr uint64, rkey uint32) error {
	s.rdmaSGE[0] = rnic.SGE{Addr: s.rdmaMR.Addr(), Length: n, LKey: s.rdmaMR.LKey()}
	s.rdmaWR = rnic.SendWR{WRID: 3, Opcode: op, Flags: rnic.Signaled, SGL: s.rdmaSGE[:], RemoteAddr: addr, RKey: rkey}
	return s.qp.PostSend(&s.rdmaWR)
}

// errDisconnected reports that the peer closed the connection (rping's DISCONNECTED state).
var errDisconnected = errors.New("disconnected")

// qpError explains why the QP stopped: the peer closed the connection (errDisconnected), a
// Terminate was sent or received, or another error.
func (s *rpingSession) qpError() error {
	err := s.qp.Err()
	var llp *iwarp.LLPError
	var te *iwarp.TermError
	switch {
	case errors.As(err, &te):
		dir := "received"
		if te.Sent {
			dir = "sent"
		}
		return fmt.Errorf("Terminate %s: %v", dir, te.TerminateError)
	case err == nil, errors.As(err, &llp), errors.Is(err, io.EOF):
		return errDisconnected
	}
	return err
}

// await waits for a completion of the given kind (WCRecv, WCRDMARead, WCRDMAWrite); send
// completions in between are consumed. A receive is re-posted as rping does.
func (s *rpingSession) await(ctx context.Context, want rnic.WCOpcode) (rnic.Completion, error) {
	for {
		n, err := s.cq.Wait(ctx, s.wc[:])
		if err != nil {
			if ctx.Err() != nil {
				return rnic.Completion{}, fmt.Errorf("timed out waiting for %v: %w", want, ctx.Err())
			}
			return rnic.Completion{}, err
		}
		var got rnic.Completion
		found := false
		for i := 0; i < n; i++ {
			wc := s.wc[i]
			if wc.Status != rnic.StatusSuccess {
				if wc.Status == rnic.StatusWRFlushErr {
					// Wait for the transport to say why (Terminate or disconnect).
					select {
					case <-s.qp.Done():
					case <-time.After(2 * time.Second):
					}
					if err := s.qpError(); err != nil {
						return wc, err
					}
					return wc, errDisconnected
				}
				qerr := s.qpError()
				if qerr == errDisconnected {
					qerr = nil
				}
				return wc, fmt.Errorf("cq completion failed status %d (%v) opcode %v: %v", wc.Status, wc.Status, wc.Opcode, qerr)
			}
			switch wc.Opcode {
			case rnic.WCSend:
				s.debugf("send completion")
			case rnic.WCRecv:
				s.debugf("recv completion")
				if wc.ByteLen != rpingInfoLen {
					return wc, fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
				}
			default:
				if s.o.debug {
					s.debugf("%v completion", wc.Opcode)
				}
			}
			if wc.Opcode == want && !found {
				got, found = wc, true
			} else if wc.Opcode != rnic.WCSend {
				return wc, fmt.Errorf("unexpected %v completion while waiting for %v", wc.Opcode, want)
			}
		}
		if found {
			if want == rnic.WCRecv {
				if err := s.postRecv(); err != nil {
					return got, fmt.Errorf("post recv error: %w", err)
				}
			}
			return got, nil
		}
	}
}

// fillSource writes ping number ping into the client's source buffer (rping_test_client).
func fillSource(buf []byte, ping int, start byte) {
	var pre [32]byte // "rdma-ping-%d: " without fmt, so a ping allocates nothing
	p := append(pre[:0], "rdma-ping-"...)
	p = strconv.AppendInt(p, int64(ping), 10)
	p = append(p, ':', ' ')
	cc := copy(buf, p)
	c := start
	for i := cc; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > rpingLastChar {
			c = rpingFirstChar
		}
	}
	buf[len(buf)-1] = 0
}

// cstr returns b up to its first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func (s *rpingSession) report() {
	if s.o.debug && s.rconn != nil {
		s.debugf("counters: %+v", s.qp.Counters().Snapshot())
	}
	if s.o.collectNegotiate != nil && s.conn != nil {
		s.o.collectNegotiate(s.conn.Params(), s.qp.Counters())
	}
	if s.o.debug && s.conn != nil {
		p := s.conn.Params()
		st := s.qp.Counters().Snapshot()
		s.debugf("mpa: rev %d enhanced %v crc %v markers tx %v rx %v ird %d ord %d peer ird %d ord %d p2p %v",
			p.Rev, p.Enhanced, p.CRC, p.TxMarkers, p.RxMarkers, p.IRD, p.ORD, p.PeerIRD, p.PeerORD, p.P2P)
		s.debugf("counters: %+v", st)
	}
}

func (s *rpingSession) runClient(ctx context.Context) error {
	addr := net.JoinHostPort(s.o.addr, strconv.Itoa(s.o.port))
	if err := s.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	if s.o.roce {
		conn, err := rocev2.Dial(ctx, s.ep, s.qp, addr, nil, rocev2.ConnParam{IRD: 1, ORD: 1})
		if err != nil {
			return fmt.Errorf("connect error: %w", err)
		}
		s.rconn = conn
	} else {
		conn, err := iwarp.Dial(ctx, s.qp, addr, s.config(), iwarp.ConnParam{IRD: 1, ORD: 1})
		if err != nil {
			return fmt.Errorf("connect error: %w", err)
		}
		s.conn = conn
	}
	defer s.report()
	s.debugf("rdma_connect successful")
	start := byte(rpingFirstChar)
	for ping := 0; s.o.count == 0 || ping < s.o.count; ping++ {
		fillSource(s.start, ping, start)
		start++
		if start > rpingLastChar {
			start = rpingFirstChar
		}
		if err := s.postInfo(s.startM, s.o.size); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return s.clientErr("wait for RDMA_WRITE_ADV", err)
		}
		if err := s.postSink(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return s.clientErr("wait for RDMA_WRITE_COMPLETE", err)
		}
		if s.o.validate && !bytes.Equal(s.start, s.rdma) {
			return errors.New("data mismatch!")
		}
		if s.o.verbose {
			fmt.Fprintf(s.o.stdout, "ping data: %s\n", cstr(s.rdma))
		}
	}
	s.disconnect()
	return nil
}

func (s *rpingSession) clientErr(where string, err error) error {
	if err == errDisconnected {
		fmt.Fprintln(s.o.stderr, "client DISCONNECT EVENT...")
	}
	return fmt.Errorf("%s: %w", where, err)
}

// disconnect closes the connection gracefully (rdma_disconnect) and waits for the flush.
func (s *rpingSession) disconnect() {
	s.qp.Disconnect()
	select {
	case <-s.done():
	case <-time.After(10 * time.Second):
	}
}

func (s *rpingSession) runServer(ctx context.Context) error {
	host := s.o.addr
	if host == "" {
		host = "0.0.0.0"
	}
	if s.o.roce {
		if err := s.acceptRoCE(ctx, host); err != nil {
			return err
		}
	} else {
		ln, err := iwarp.Listen(s.dev, net.JoinHostPort(host, strconv.Itoa(s.o.port)), s.config())
		if err != nil {
			return fmt.Errorf("rdma_bind_addr: %w", err)
		}
		s.ln = ln
		if s.o.listening != nil {
			s.o.listening(ln.Addr())
		}
		s.debugf("listening on %v", ln.Addr())
		req, err := ln.Accept(ctx)
		if err != nil {
			return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
		}
		s.debugf("connect request from %v ird %d ord %d", req.RemoteAddr(), req.IRD(), req.ORD())
		if err := s.postRecv(); err != nil {
			return fmt.Errorf("ibv_post_recv failed: %w", err)
		}
		conn, err := req.Accept(s.qp, iwarp.ConnParam{IRD: 1, ORD: 1})
		if err != nil {
			return fmt.Errorf("rdma_accept: %w", err)
		}
		s.conn = conn
	}
	defer s.report()
	err := s.serve(ctx)
	if err == errDisconnected {
		fmt.Fprintln(s.o.stderr, "server DISCONNECT EVENT...")
		return nil
	}
	if err != nil {
		return err
	}
	return nil
}

// acceptRoCE listens on the RoCE endpoint and accepts one IB CM connection request.
func (s *rpingSession) acceptRoCE(ctx context.Context, host string) error {
	ln, err := rocev2.Listen(s.ep, net.JoinHostPort(host, strconv.Itoa(s.o.port)), nil)
	if err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	s.rln = ln
	if s.o.listening != nil {
		s.o.listening(net.UDPAddrFromAddrPort(ln.Addr()))
	}
	s.debugf("listening on %v (RoCEv2)", ln.Addr())
	req, err := ln.Accept(ctx)
	if err != nil {
		return fmt.Errorf("wait for CONNECT_REQUEST: %w", err)
	}
	s.debugf("connect request from %v ird %d ord %d", req.RemoteAddr(), req.IRD(), req.ORD())
	if err := s.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	conn, err := req.Accept(s.qp, rocev2.ConnParam{IRD: 1, ORD: 1})
	if err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	s.rconn = conn
	return nil
}

// serve is rping_test_server: Read the client's source, go ahead, Write it back, go ahead.
func (s *rpingSession) serve(ctx context.Context) error {
	for {
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return wrapState("wait for RDMA_READ_ADV", err)
		}
		addr, rkey, n := s.info()
		if s.o.debug {
			s.debugf("Received rkey %x addr %x len %d from peer", rkey, addr, n)
		}
		if s.o.fault == faultReadBadSTag {
			rkey ^= 0xff
		}
		// The sink is the local buffer; a client advertising more than -S overruns it, which
		// the engine reports as a local length/protection error, as the kernel would.
		if err := s.postRDMA(rnic.OpRead, n, addr, rkey); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRead); err != nil {
			return wrapState("wait for RDMA_READ_COMPLETE", err)
		}
		if s.o.verbose {
			fmt.Fprintf(s.o.stdout, "server ping data: %s\n", cstr(s.rdma))
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return wrapState("wait for RDMA_WRITE_ADV", err)
		}
		addr, rkey, _ = s.info()
		if s.o.fault == faultWriteBadSTag {
			rkey ^= 0xff
		}
		wlen := len(cstr(s.rdma)) + 1
		if wlen > len(s.rdma) {
			wlen = len(s.rdma)
		}
		if err := s.postRDMA(rnic.OpWrite, uint32(wlen), addr, rkey); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCWrite); err != nil {
			return wrapState("wait for RDMA_WRITE_COMPLETE", err)
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
	}
}

func wrapState(where string, err error) error {
	if err == errDisconnected {
		return err
	}
	return fmt.Errorf("%s: %w", where, err)
}

// info decodes the received struct rping_rdma_info.
func (s *rpingSession) info() (addr uint64, rkey, n uint32) {
	return binary.BigEndian.Uint64(s.recv[0:]), binary.BigEndian.Uint32(s.recv[8:]), binary.BigEndian.Uint32(s.recv[12:])
}
