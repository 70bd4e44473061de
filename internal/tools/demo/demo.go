// Package demo is "softrnic demo": in one process, a softrnic iWARP listener and a client
// connect over loopback TCP, register memory, exchange the server's region with a SEND, do
// an RDMA WRITE and an RDMA READ of the region, verify every byte and print what happened.
package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "in-process iWARP demo over loopback TCP: SEND, RDMA WRITE and READ of a few MiB"

// Options are the demo's settings.
type Options struct {
	Size int              // bytes to WRITE and READ (0: DefaultSize)
	CRC  bool             // use MPA CRC32c
	Link hostlink.Options // --pcap (internal/hostlink; --xdp needs an Ethernet netdev, not loopback)
}

// LinkOptions implements hostlink.Carrier.
func (o Options) LinkOptions() hostlink.Options { return o.Link }

// DefaultSize is the size of the demo's region.
const DefaultSize = 8 << 20

// DefaultOptions are the command line's defaults.
func DefaultOptions() Options { return Options{Size: DefaultSize, CRC: true} }

// ParseArgs builds Options from the command line (-size n, -crc=false).
func ParseArgs(args []string) (Options, error) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.IntVar(&o.Size, "size", o.Size, "bytes to WRITE and READ")
	fs.BoolVar(&o.CRC, "crc", o.CRC, "use MPA CRC32c")
	o.Link.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Size < 0 {
		return o, fmt.Errorf("-size %d: must not be negative", o.Size)
	}
	return o, nil
}

// Main is the "softrnic demo" command.
func Main(args []string) int { return tool.Main("demo", args, ParseArgs, nil, Run) }

// demoSide is one endpoint of the demo: device, PD, CQs and an RC QP.
type demoSide struct {
	name string
	dev  *rnic.Device
	pd   *rnic.PD
	cq   *rnic.CQ
	qp   *rnic.QP
}

func newDemoSide(name string) (*demoSide, error) {
	d, err := rnic.Open(rnic.Config{Name: name})
	if err != nil {
		return nil, err
	}
	s := &demoSide{name: name, dev: d}
	if s.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = d.CreateCQ(256); err != nil {
		return nil, err
	}
	s.qp, err = d.CreateQP(s.pd, rnic.QPAttr{SendCQ: s.cq, RecvCQ: s.cq})
	return s, err
}

func (s *demoSide) wait(ctx context.Context, what string) (rnic.Completion, error) {
	var wc [1]rnic.Completion
	if _, err := s.cq.Wait(ctx, wc[:]); err != nil {
		return wc[0], fmt.Errorf("%s: waiting for %s: %w", s.name, what, err)
	}
	if wc[0].Status != rnic.StatusSuccess {
		return wc[0], fmt.Errorf("%s: %s completed with %v", s.name, what, wc[0].Status)
	}
	return wc[0], nil
}

func mibps(n int, d time.Duration) string {
	return fmt.Sprintf("%.0f MiB/s", float64(n)/(1<<20)/d.Seconds())
}

// Run runs the demo, printing its steps to stdout; it gives up after a minute.
func Run(ctx context.Context, o Options, stdout, _ io.Writer) error {
	stdout = tool.Output(stdout)
	size, crc := o.Size, o.CRC
	if size == 0 {
		size = DefaultSize
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	srv, err := newDemoSide("server")
	if err != nil {
		return err
	}
	defer srv.dev.Close()
	cli, err := newDemoSide("client")
	if err != nil {
		return err
	}
	defer cli.dev.Close()

	cfg := iwarp.DefaultConfig()
	cfg.MPA.CRC = crc
	ln, err := hostlink.Process().IWARPListen(srv.dev, "127.0.0.1:0", cfg) // --pcap
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Fprintf(stdout, "server: listening on %s (iWARP: MPA rev %d, CRC %v, peer-to-peer)\n", ln.Addr(), cfg.MPA.Rev, crc)

	// Server memory: a region the client may write and read, and a receive buffer.
	srvBuf := make([]byte, size)
	srvMR, err := srv.pd.RegMR(srvBuf, rnic.AccessLocalWrite|rnic.AccessRemoteWrite|rnic.AccessRemoteRead)
	if err != nil {
		return err
	}
	srvMsg := make([]byte, 16)
	srvMsgMR, err := srv.pd.RegMR(srvMsg, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}

	accepted := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			accepted <- err
			return
		}
		fmt.Fprintf(stdout, "server: connection request from %s, private data %q, IRD %d ORD %d\n",
			req.RemoteAddr(), req.PrivateData(), req.IRD(), req.ORD())
		// Post the receive for the client's STag message before accepting.
		if err := srv.qp.PostRecv(&rnic.RecvWR{WRID: 1, SGL: []rnic.SGE{srvMsgMR.SGE(0, 16)}}); err != nil {
			accepted <- err
			return
		}
		_, err = req.Accept(srv.qp, iwarp.ConnParam{PrivateData: []byte("welcome"), IRD: 16, ORD: 16})
		accepted <- err
	}()

	t0 := time.Now()
	dcfg, err := hostlink.Process().IWARPConfig(cli.dev, cfg) // --pcap
	if err != nil {
		return err
	}
	conn, err := iwarp.Dial(ctx, cli.qp, ln.Addr().String(), dcfg, iwarp.ConnParam{PrivateData: []byte("hello softrnic"), IRD: 16, ORD: 16})
	if err != nil {
		return err
	}
	if err := <-accepted; err != nil {
		return err
	}
	p := conn.Params()
	fmt.Fprintf(stdout, "client: connected in %v: private data %q, IRD %d ORD %d, CRC %v, markers %v, RTR %v, MULPDU %d\n",
		time.Since(t0).Round(time.Microsecond), conn.PeerPrivateData(), conn.IRD(), conn.ORD(), p.CRC, p.TxMarkers, p.RTR, conn.MULPDU())

	// Client memory: the data to write, and a buffer to read it back into.
	src := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := 0; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(src[i:], rng.Uint64())
	}
	back := make([]byte, size)
	srcMR, err := cli.pd.RegMR(src, 0)
	if err != nil {
		return err
	}
	backMR, err := cli.pd.RegMR(back, rnic.AccessLocalWrite)
	if err != nil {
		return err
	}

	// 1. The server tells the client its STag and address with a SEND. (By RFC 5044 the
	//    responder may transmit only after the initiator's first FPDU, the RTR, which
	//    Dial sent.)
	//    The message is the region's rnic.RemoteBuffer, rping's 16-byte layout.
	var msg [rnic.RemoteBufferLen]byte
	msgMR, err := cli.pd.RegMR(msg[:], rnic.AccessLocalWrite)
	if err != nil {
		return err
	}
	if err := cli.qp.PostRecv(&rnic.RecvWR{WRID: 2, SGL: []rnic.SGE{msgMR.SGE(0, len(msg))}}); err != nil {
		return err
	}
	adv := srvMR.RemoteBuffer(0, size).Append(nil)
	advMR, err := srv.pd.RegMR(adv, 0)
	if err != nil {
		return err
	}
	if err := srv.qp.PostSend(&rnic.SendWR{WRID: 10, Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{advMR.SGE(0, len(adv))}}); err != nil {
		return err
	}
	if _, err := srv.wait(ctx, "SEND"); err != nil {
		return err
	}
	c, err := cli.wait(ctx, "receive")
	if err != nil {
		return err
	}
	region, err := rnic.ParseRemoteBuffer(msg[:c.ByteLen])
	if err != nil {
		return err
	}
	rkey, raddr := region.RKey, region.Addr
	fmt.Fprintf(stdout, "client: received SEND (%d bytes): server region STag %#x at %#x, %d bytes\n", c.ByteLen, rkey, raddr, region.Len)

	// 2. RDMA WRITE the client's data into the server region, a few times over (the
	//    first pass also pays the page faults of the fresh buffers).
	const rounds = 4
	var first, dw time.Duration
	for r := 0; r < rounds; r++ {
		t1 := time.Now()
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: 20, Opcode: rnic.OpWrite, Flags: rnic.Signaled,
			SGL: []rnic.SGE{srcMR.SGE(0, size)}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return err
		}
		if _, err := cli.wait(ctx, "RDMA WRITE"); err != nil {
			return err
		}
		// A zero-length READ after the WRITE: its response proves the WRITE was placed.
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: 21, Opcode: rnic.OpRead, Flags: rnic.Signaled, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return err
		}
		if _, err := cli.wait(ctx, "RDMA READ (flush)"); err != nil {
			return err
		}
		if r == 0 {
			first = time.Since(t1)
		} else {
			dw += time.Since(t1)
		}
	}
	fmt.Fprintf(stdout, "client: RDMA WRITE %d bytes ×%d: first %v, then %s\n",
		size, rounds, first.Round(time.Microsecond), mibps((rounds-1)*size, dw))

	// 3. RDMA READ the region back.
	var dr time.Duration
	for r := 0; r < rounds; r++ {
		t2 := time.Now()
		if err := cli.qp.PostSend(&rnic.SendWR{WRID: 30, Opcode: rnic.OpRead, Flags: rnic.Signaled,
			SGL: []rnic.SGE{backMR.SGE(0, size)}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return err
		}
		c, err = cli.wait(ctx, "RDMA READ")
		if err != nil {
			return err
		}
		if r == 0 {
			first = time.Since(t2)
		} else {
			dr += time.Since(t2)
		}
	}
	if !bytes.Equal(back, src) {
		return errors.New("data read back differs")
	}
	fmt.Fprintf(stdout, "client: RDMA READ %d bytes ×%d: first %v, then %s: verified\n", c.ByteLen, rounds, first.Round(time.Microsecond), mibps((rounds-1)*size, dr))

	cs, ss := cli.qp.Counters().Snapshot(), srv.qp.Counters().Snapshot()
	fmt.Fprintf(stdout, "client: tx %d bytes / %d FPDUs, rx %d bytes / %d FPDUs, CRC errors %d\n", cs.TxBytes, cs.TxSegments, cs.RxBytes, cs.RxSegments, cs.CRCErrors)
	fmt.Fprintf(stdout, "server: tx %d bytes / %d FPDUs, rx %d bytes / %d FPDUs, CRC errors %d\n", ss.TxBytes, ss.TxSegments, ss.RxBytes, ss.RxSegments, ss.CRCErrors)

	// 4. Graceful disconnect: both QPs end in Error with nothing outstanding.
	cli.qp.Disconnect()
	select {
	case <-cli.qp.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-srv.qp.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintf(stdout, "disconnected: client QP %v, server QP %v\n", cli.qp.State(), srv.qp.State())
	// The server's transport has stopped (Done): its region is ours to read. The WRITEs
	// were placed directly into it, with no server CPU involved in the transfer.
	if !bytes.Equal(srvBuf, src) {
		return errors.New("server region differs from the written data")
	}
	fmt.Fprintln(stdout, "server: the region holds the written bytes, placed directly by the RDMA WRITEs: verified")
	fmt.Fprintln(stdout, "demo: OK")
	return nil
}
