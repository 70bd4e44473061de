package main

// softrnic pingpong is rdma-core's ibv_rc_pingpong (libibverbs/examples/rc_pingpong.c) over
// softrnic's RoCEv2 transport, so it interoperates with ibv_rc_pingpong on Linux rxe in
// either role:
//
//   - both sides create an RC QP, post rx-depth receives of size bytes and pick a random PSN;
//   - they exchange "%04x:%06x:%06x:%s" (LID:QPN:PSN:GID) messages of 52 bytes over TCP
//     (default port 18515): the client sends first, the server connects its QP and answers,
//     the client connects and sends "done";
//   - the client SENDs size bytes, and each side SENDs again once its previous SEND completed
//     and a message arrived, iters times; receives are reposted when one or fewer remain;
//   - both print the byte rate and the per-iteration latency.
//
// The QP attributes are rc_pingpong's: timeout 14, retry_cnt 7, rnr_retry 7, min_rnr_timer
// 12, max_rd_atomic 1. softrnic has no GID table of its own: any -g index names the RoCEv2
// GID of the local address (-a, else the route to the server, else the first non-loopback
// IPv4 address), as rxe's IPv4 GID (index 1). RoCE packets go to UDP port 4791 (-u).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

func init() {
	register(command{name: "pingpong", usage: "ibv_rc_pingpong over RoCEv2 ([-p port] [-d dev] [-g gid] [-s size] [-n iters] [-m mtu] [host])", run: runPingpong})
}

const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

type ppOpts struct {
	port    int
	dev     string
	ibPort  int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	events  bool
	gidx    int
	local   string // softrnic: local IP address of the RoCE link
	udpPort int    // softrnic: UDP port of both ends (4791)
	server  string // host to connect to; "" = server
}

func parsePingpongArgs(args []string, errOut io.Writer) (ppOpts, error) {
	var o ppOpts
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.IntVar(&o.port, "p", 18515, "listen on/connect to port")
	fs.StringVar(&o.dev, "d", "softrnic0", "device name")
	fs.IntVar(&o.ibPort, "i", 1, "port of the device (only 1)")
	fs.IntVar(&o.size, "s", 4096, "size of message to exchange")
	fs.IntVar(&o.mtu, "m", 1024, "path MTU")
	fs.IntVar(&o.rxDepth, "r", 500, "number of receives to post at a time")
	fs.IntVar(&o.iters, "n", 1000, "number of exchanges")
	fs.IntVar(&o.sl, "l", 0, "service level (ignored)")
	fs.BoolVar(&o.events, "e", false, "sleep on CQ events (softrnic always does)")
	fs.IntVar(&o.gidx, "g", -1, "local port gid index")
	fs.StringVar(&o.local, "a", "", "softrnic: local IP address for RoCEv2")
	fs.IntVar(&o.udpPort, "u", roce.UDPPort, "softrnic: UDP port of both ends")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.server = fs.Arg(0)
	default:
		return o, errors.New("usage: softrnic pingpong [options] [host]")
	}
	if o.port < 0 || o.port > 65535 || o.ibPort != 1 || o.size < 0 || o.rxDepth < 2 || o.iters < 1 {
		return o, errors.New("pingpong: invalid option value")
	}
	if roce.MTUFromBytes(o.mtu) == 0 || roce.MTUFromBytes(o.mtu).Bytes() != o.mtu {
		return o, errors.New("pingpong: MTU must be 256, 512, 1024, 2048 or 4096")
	}
	return o, nil
}

func runPingpong(args []string) int {
	o, err := parsePingpongArgs(args, os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		return 1
	}
	if err := pingpong(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// localAddrFor picks the local IP address of the RoCE link.
func localAddrFor(o ppOpts) (netip.Addr, error) {
	if o.local != "" {
		return netip.ParseAddr(o.local)
	}
	if o.server != "" {
		c, err := net.Dial("udp", net.JoinHostPort(o.server, strconv.Itoa(o.udpPort)))
		if err == nil {
			defer c.Close()
			a := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
			return a, nil
		}
	}
	ifs, _ := net.InterfaceAddrs()
	for _, ia := range ifs {
		if pn, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(pn.IP); ok && a.Unmap().Is4() && !a.IsLoopback() {
				return a.Unmap(), nil
			}
		}
	}
	return netip.MustParseAddr("127.0.0.1"), nil
}

func pingpong(ctx context.Context, o ppOpts, out io.Writer) error {
	laddr, err := localAddrFor(o)
	if err != nil {
		return err
	}
	dev, err := rnic.Open(rnic.Config{Name: o.dev, LocalAddr: laddr.String()})
	if err != nil {
		return err
	}
	defer dev.Close()
	link, err := rocev2.ListenUDP(netip.AddrPortFrom(laddr, uint16(o.udpPort)), nil)
	if err != nil {
		return fmt.Errorf("couldn't open the RoCEv2 UDP socket: %w", err)
	}
	cfg := rocev2.DefaultConfig()
	cfg.MTU = roce.MTUFromBytes(o.mtu)
	cfg.MaxRdAtomic, cfg.MaxDestRd = 1, 1
	ep := rocev2.NewEndpoint(dev, link, cfg)
	defer ep.Close()

	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	buf := make([]byte, max(o.size, 1))
	for i := range buf {
		buf[i] = 0x7b
	}
	mr, err := pd.RegMR(buf, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(o.rxDepth + 2)
	if err != nil {
		return err
	}
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq,
		Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()
	sendFlags := rnic.Signaled
	if o.size <= qp.Attr().Cap.MaxInline {
		sendFlags |= rnic.Inline
	}
	sge := rnic.SGE{Addr: mr.Addr(), Length: uint32(o.size), LKey: mr.LKey()}
	postRecv := func(n int) int {
		for i := range n {
			if qp.PostRecv(&rnic.RecvWR{WRID: ppRecvWRID, SGL: []rnic.SGE{sge}}) != nil {
				return i
			}
		}
		return n
	}
	routs := postRecv(o.rxDepth)
	if routs < o.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", routs)
	}

	my := rocev2.PingpongDest{QPN: qp.Num(), PSN: rand.Uint32() & 0xFFFFFF}
	if o.gidx >= 0 {
		my.GID = roce.GIDFromAddr(laddr)
	}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.LID, my.QPN, my.PSN, rocev2.GIDString(my.GID))

	connectQP := func(rem rocev2.PingpongDest, peer netip.Addr) error {
		if a, ok := rem.Addr(); ok {
			peer = a
		}
		_, err := ep.Connect(qp, rocev2.ConnAttr{Type: rocev2.RC, Remote: netip.AddrPortFrom(peer, uint16(o.udpPort)),
			RemoteQPN: rem.QPN, SendPSN: roce.PSN(my.PSN), RecvPSN: roce.PSN(rem.PSN), MTU: cfg.MTU})
		if err != nil {
			return fmt.Errorf("Couldn't connect to remote QP: %w", err)
		}
		return nil
	}
	var rem rocev2.PingpongDest
	if o.server != "" {
		rem, err = ppClientExchange(ctx, o, my, connectQP)
	} else {
		rem, err = ppServerExchange(ctx, o, my, connectQP)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, rocev2.GIDString(rem.GID))

	pending := ppRecvWRID
	send := func() error {
		if err := qp.PostSend(&rnic.SendWR{WRID: ppSendWRID, Opcode: rnic.OpSend, Flags: sendFlags, SGL: []rnic.SGE{sge}}); err != nil {
			return errors.New("Couldn't post send")
		}
		return nil
	}
	if o.server != "" {
		if err := send(); err != nil {
			return err
		}
		pending |= ppSendWRID
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	wc := make([]rnic.Completion, 2)
	for rcnt < o.iters || scnt < o.iters {
		n, err := cq.Wait(ctx, wc)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for _, c := range wc[:n] {
			if c.Status != rnic.StatusSuccess {
				code, s := rocev2.IBVStatus(c.Status)
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", s, code, int(c.WRID))
			}
			switch c.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				routs--
				if routs <= 1 {
					routs += postRecv(o.rxDepth - routs)
					if routs < o.rxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", int(c.WRID))
			}
			pending &^= int(c.WRID)
			if scnt < o.iters && pending == 0 {
				if err := send(); err != nil {
					return err
				}
				pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	// Let the last ACK leave before the QP goes away (ibv_rc_pingpong destroys at once too,
	// but a kernel peer still has the ACK in flight; a short drain is harmless).
	time.Sleep(10 * time.Millisecond)
	return nil
}

func readFull(c net.Conn, b []byte) error {
	_, err := io.ReadFull(c, b)
	return err
}

func ppClientExchange(ctx context.Context, o ppOpts, my rocev2.PingpongDest, connect func(rocev2.PingpongDest, netip.Addr) error) (rocev2.PingpongDest, error) {
	var rem rocev2.PingpongDest
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(o.server, strconv.Itoa(o.port)))
	if err != nil {
		return rem, fmt.Errorf("Couldn't connect to %s:%d", o.server, o.port)
	}
	defer c.Close()
	if _, err := c.Write(my.Append(nil)); err != nil {
		return rem, errors.New("Couldn't send local address")
	}
	msg := make([]byte, rocev2.PingpongMsgLen)
	if err := readFull(c, msg); err != nil {
		return rem, errors.New("Couldn't read/write remote address")
	}
	if _, err := c.Write([]byte(rocev2.PingpongDone)); err != nil {
		return rem, errors.New("Couldn't read/write remote address")
	}
	if rem, err = rocev2.ParsePingpongDest(msg); err != nil {
		return rem, err
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	return rem, connect(rem, peer)
}

func ppServerExchange(ctx context.Context, o ppOpts, my rocev2.PingpongDest, connect func(rocev2.PingpongDest, netip.Addr) error) (rocev2.PingpongDest, error) {
	var rem rocev2.PingpongDest
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(o.port))
	if err != nil {
		return rem, fmt.Errorf("Couldn't listen to port %d", o.port)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		return rem, errors.New("accept() failed")
	}
	defer c.Close()
	msg := make([]byte, rocev2.PingpongMsgLen)
	if err := readFull(c, msg); err != nil {
		return rem, errors.New("Couldn't read remote address")
	}
	if rem, err = rocev2.ParsePingpongDest(msg); err != nil {
		return rem, err
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if err := connect(rem, peer); err != nil {
		return rem, err
	}
	if _, err := c.Write(my.Append(nil)); err != nil {
		return rem, errors.New("Couldn't send/recv local address")
	}
	if err := readFull(c, msg[:len(rocev2.PingpongDone)]); err != nil {
		return rem, errors.New("Couldn't send/recv local address")
	}
	return rem, nil
}
