package pingpong

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
	"os/signal"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/roce"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "ibv_rc_pingpong over RoCEv2 ([-p port] [-d dev] [-g gid] [-s size] [-n iters] [-m mtu] [host])"

const (
	recvWRID = 1
	sendWRID = 2
)

// DefaultPort is ibv_rc_pingpong's TCP port of the address exchange.
const DefaultPort = 18515

// Options are ibv_rc_pingpong's settings and softrnic's own (-a, -u).
type Options struct {
	Port    int              // -p: TCP port of the address exchange
	Dev     string           // -d: device name
	IBPort  int              // -i: port of the device (only 1)
	Size    int              // -s: message size
	MTU     int              // -m: path MTU in bytes
	RxDepth int              // -r: receives posted at a time
	Iters   int              // -n: exchanges
	SL      int              // -l: service level (ignored)
	Events  bool             // -e: sleep on CQ events (softrnic always does)
	GIDIdx  int              // -g: local GID index (-1: none)
	Local   string           // -a: local IP address of the RoCE link
	UDPPort int              // -u: UDP port of both ends (4791)
	Peer    string           // host to connect to; "" runs the server
	Link    hostlink.Options // --xdp, --xdp-mode, --pcap (internal/hostlink)
}

// DefaultOptions are ibv_rc_pingpong's defaults.
func DefaultOptions() Options {
	return Options{Port: DefaultPort, Dev: tool.DefaultDevice, IBPort: 1, Size: 4096, MTU: 1024, RxDepth: 500,
		Iters: 1000, GIDIdx: -1, UDPPort: roce.UDPPort}
}

// ParseArgs builds Options from ibv_rc_pingpong's command line; flag errors and the usage
// go to errOut.
func ParseArgs(args []string, errOut io.Writer) (Options, error) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.IntVar(&o.Port, "p", o.Port, "listen on/connect to port")
	fs.StringVar(&o.Dev, "d", o.Dev, "device name")
	fs.IntVar(&o.IBPort, "i", o.IBPort, "port of the device (only 1)")
	fs.IntVar(&o.Size, "s", o.Size, "size of message to exchange")
	fs.IntVar(&o.MTU, "m", o.MTU, "path MTU")
	fs.IntVar(&o.RxDepth, "r", o.RxDepth, "number of receives to post at a time")
	fs.IntVar(&o.Iters, "n", o.Iters, "number of exchanges")
	fs.IntVar(&o.SL, "l", o.SL, "service level (ignored)")
	fs.BoolVar(&o.Events, "e", o.Events, "sleep on CQ events (softrnic always does)")
	fs.IntVar(&o.GIDIdx, "g", o.GIDIdx, "local port gid index")
	fs.StringVar(&o.Local, "a", o.Local, "softrnic: local IP address for RoCEv2")
	fs.IntVar(&o.UDPPort, "u", o.UDPPort, "softrnic: UDP port of both ends")
	o.Link.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.Peer = fs.Arg(0)
	default:
		return o, errors.New("usage: softrnic pingpong [options] [host]")
	}
	return o, o.check()
}

func (o *Options) check() error {
	if o.Port < 0 || o.Port > 65535 || o.IBPort != 1 || o.Size < 0 || o.RxDepth < 2 || o.Iters < 1 ||
		o.UDPPort < 0 || o.UDPPort > 65535 {
		return errors.New("pingpong: invalid option value")
	}
	if roce.MTUFromBytes(o.MTU) == 0 || roce.MTUFromBytes(o.MTU).Bytes() != o.MTU {
		return errors.New("pingpong: MTU must be 256, 512, 1024, 2048 or 4096")
	}
	return nil
}

// Main is the "softrnic pingpong" command; like ibv_rc_pingpong it exits with status 1
// on bad arguments too.
func Main(args []string) int {
	o, err := ParseArgs(args, os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		return 1
	}
	return hostlink.Main("pingpong", o.Link, os.Stderr, func() int { // --xdp, --pcap
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := Run(ctx, o, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	})
}

// localAddr picks the local IP address of the RoCE link: -a, else the route to the
// server, else the first non-loopback IPv4 address, else 127.0.0.1.
func localAddr(o *Options) (netip.Addr, error) {
	if o.Local != "" {
		return tool.ParseIP("-a", o.Local)
	}
	if o.Peer != "" {
		if a, err := tool.RouteSource(o.Peer, o.UDPPort); err == nil {
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

// Run runs one ibv_rc_pingpong exchange in the role the options select, printing the
// addresses and the results to stdout.
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	out := tool.Output(stdout)
	laddr, err := localAddr(&o)
	if err != nil {
		return err
	}
	dev, err := rnic.Open(rnic.Config{Name: o.Dev, LocalAddr: laddr.String()})
	if err != nil {
		return err
	}
	defer dev.Close()
	link, err := hostlink.Process().RoCELink(netip.AddrPortFrom(laddr, uint16(o.UDPPort)), nil) // --xdp, --pcap
	if err != nil {
		return fmt.Errorf("couldn't open the RoCEv2 UDP socket: %w", err)
	}
	cfg := rocev2.DefaultConfig()
	cfg.MTU = roce.MTUFromBytes(o.MTU)
	cfg.MaxRdAtomic, cfg.MaxDestRd = 1, 1
	ep := rocev2.NewEndpoint(dev, link, cfg)
	defer ep.Close()

	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	buf := make([]byte, max(o.Size, 1))
	for i := range buf {
		buf[i] = 0x7b
	}
	mr, err := pd.RegMR(buf, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(o.RxDepth + 2)
	if err != nil {
		return err
	}
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq,
		Cap: rnic.QPCap{MaxSendWR: 1, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy()
	sendFlags := rnic.Signaled
	if o.Size <= qp.Attr().Cap.MaxInline {
		sendFlags |= rnic.Inline
	}
	sge := rnic.SGE{Addr: mr.Addr(), Length: uint32(o.Size), LKey: mr.LKey()}
	postRecv := func(n int) int {
		for i := range n {
			if qp.PostRecv(&rnic.RecvWR{WRID: recvWRID, SGL: []rnic.SGE{sge}}) != nil {
				return i
			}
		}
		return n
	}
	routs := postRecv(o.RxDepth)
	if routs < o.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", routs)
	}

	my := Dest{QPN: qp.Num(), PSN: rand.Uint32() & 0xFFFFFF}
	if o.GIDIdx >= 0 {
		my.GID = roce.GIDFromAddr(laddr)
	}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.LID, my.QPN, my.PSN, GIDString(my.GID))
	rem, err := exchange(ctx, &o, my, func(rem Dest, peer netip.Addr) error {
		return connectQP(ep, qp, &o, cfg.MTU, my, rem, peer)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, GIDString(rem.GID))

	pending := recvWRID
	send := func() error {
		if err := qp.PostSend(&rnic.SendWR{WRID: sendWRID, Opcode: rnic.OpSend, Flags: sendFlags, SGL: []rnic.SGE{sge}}); err != nil {
			return errors.New("Couldn't post send")
		}
		return nil
	}
	if o.Peer != "" {
		if err := send(); err != nil {
			return err
		}
		pending |= sendWRID
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	wc := make([]rnic.Completion, 2)
	for rcnt < o.Iters || scnt < o.Iters {
		n, err := cq.Wait(ctx, wc)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for _, c := range wc[:n] {
			if c.Status != rnic.StatusSuccess {
				code, s := tool.IBVStatus(c.Status)
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", s, code, int(c.WRID))
			}
			switch c.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				routs--
				if routs <= 1 {
					routs += postRecv(o.RxDepth - routs)
					if routs < o.RxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", int(c.WRID))
			}
			pending &^= int(c.WRID)
			if scnt < o.Iters && pending == 0 {
				if err := send(); err != nil {
					return err
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	bytes := int64(o.Size) * int64(o.Iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.Iters, usec/1e6, usec/float64(o.Iters))
	// Let the last ACK leave before the QP goes away (ibv_rc_pingpong destroys at once too,
	// but a kernel peer still has the ACK in flight; a short drain is harmless).
	time.Sleep(10 * time.Millisecond)
	return nil
}
