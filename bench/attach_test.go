package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/broker"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
	"github.com/softrnic/softrnic/rnic/rocev2"
	"github.com/softrnic/softrnic/rnic/rocev2/steer"
)

// writePair is a connected RC QP pair and the WRITE that moves size bytes from the
// client's region to the server's.
type writePair struct {
	name  string
	cq    *rnic.CQ
	qp    *rnic.QP
	wr    rnic.SendWR
	close func()
}

// run posts n WRITEs with depth in flight and waits for all.
func (p *writePair) run(ctx context.Context, n, depth int) error {
	wc := make([]rnic.Completion, 64)
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < depth {
			if err := p.qp.PostSend(&p.wr); err != nil {
				return err
			}
			posted++
		}
		k, err := p.cq.Wait(ctx, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != rnic.StatusSuccess {
				return fmt.Errorf("%s: completion %+v", p.name, c)
			}
		}
		done += k
	}
	return nil
}

// pairOn connects a QP of client to a listener of server's transport and registers the
// regions of a WRITE of size bytes.
func pairOn(b *testing.B, name string, client, server *rnic.Device, ct, st *cm.Transport, dial string, size int) *writePair {
	b.Helper()
	mk := func(d *rnic.Device) (*rnic.PD, *rnic.CQ, *rnic.QP) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(4096)
		qp, err := d.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq, Cap: rnic.QPCap{MaxSendWR: 1024, MaxRecvWR: 16}})
		if err != nil {
			b.Fatal(err)
		}
		return pd, cq, qp
	}
	cpd, ccq, cqp := mk(client)
	spd, _, sqp := mk(server)
	ln, err := st.Listen(":0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			_, _ = req.Accept(sqp, cm.Param{})
		}
	}()
	if _, err := ct.Dial(ctx, cqp, fmt.Sprintf(dial, ln.Port()), cm.Param{}); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	src, dst := filled(size), make([]byte, size)
	smr, _ := cpd.RegMR(src, rnic.AccessLocalWrite)
	dmr, _ := spd.RegMR(dst, rnic.AccessLocalWrite|rnic.AccessRemoteWrite)
	return &writePair{name: name, cq: ccq, qp: cqp, wr: rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled,
		SGL: []rnic.SGE{smr.SGE(0, size)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey()}}
}

// attachedPair runs a broker (the daemon's device) with the given steering and two
// devices attached to it, one QP pair between them.
func attachedPair(b *testing.B, mode steer.Mode, size int) *writePair {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "b0.sock")
	br, err := broker.New(broker.Config{Name: "b0", Addr: netip.MustParseAddrPort("127.0.0.1:0"), Socket: attach.Path(sock), Mode: mode,
		Logger: slog.New(slog.DiscardHandler)}) // its log lines would split the benchmark's output line
	if err != nil {
		b.Fatal(err)
	}
	ddev, _ := rnic.Open(rnic.Config{QPNumbers: br.QPNumbers()})
	dep := rocev2.NewEndpoint(ddev, br.Link(), nil) // the daemon's own endpoint: QP1 routing
	var devs [2]*host.Device
	for i := range devs {
		if devs[i], err = host.Open("b0", &host.Options{Socket: sock}); err != nil {
			b.Fatal(err)
		}
	}
	name := "attached-" + br.Mode().String()
	p := pairOn(b, name, devs[0].RNIC(), devs[1].RNIC(), devs[0].Transport(), devs[1].Transport(),
		"127.0.0.1:%d@"+fmt.Sprint(br.Addr().Port()), size)
	p.close = func() {
		devs[0].Close()
		devs[1].Close()
		dep.Close()
		ddev.Close()
		br.Close()
	}
	return p
}

// inProcessPair is two in-process devices on their own UDP sockets on 127.0.0.1, with
// udp's offloads: those of an attached link (GSO; a steered socket takes no GRO) for the
// steering's cost, or nil (rocev2.ListenUDP's defaults, GRO too) for what an attached
// process gives up against a device of its own.
func inProcessPair(b *testing.B, name string, udp *rocev2.UDPOptions, size int) *writePair {
	b.Helper()
	var devs [2]*rnic.Device
	var ts [2]*cm.Transport
	for i := range devs {
		devs[i], _ = rnic.Open(rnic.Config{})
		var err error
		if ts[i], err = cm.Open(devs[i], cm.RoCEv2, "127.0.0.1:0", &cm.Options{UDP: udp}); err != nil {
			b.Fatal(err)
		}
	}
	p := pairOn(b, name, devs[0], devs[1], ts[0], ts[1], "127.0.0.1:%d@"+fmt.Sprint(ts[1].Endpoint().LocalAddr().Port()), size)
	p.close = func() {
		for i := range devs {
			ts[i].Close()
			devs[i].Close()
		}
	}
	return p
}

// BenchmarkAttachedWrite measures RC RDMA WRITE bandwidth (64 KiB, 64 in flight) between
// two devices attached to the daemon's device — BPF steering, and the relay — beside two
// in-process devices on sockets of their own with the attached links' offloads (GSO, no
// GRO), in alternating rounds of the same run; it reports each one's median MB/s over the
// rounds and the ratios to in-process (issue 11: the steering path costs no copy; the
// relay's cost is measured). A third in-process pair with rocev2.ListenUDP's defaults
// ("in-process-gro": GRO too, which a steered socket cannot use) shows what an attached
// process gives up against a device of its own.
func BenchmarkAttachedWrite(b *testing.B) {
	const size, depth, perRound = 64 << 10, 64, 512 // 32 MiB per pair per round
	pairs := []*writePair{inProcessPair(b, "in-process", &rocev2.UDPOptions{GSO: true}, size), attachedPair(b, steer.ModeAuto, size),
		attachedPair(b, steer.ModeRelay, size), inProcessPair(b, "in-process-gro", nil, size)}
	defer func() {
		for _, p := range pairs {
			p.close()
		}
	}()
	ctx := context.Background()
	for _, p := range pairs { // warm up
		if err := p.run(ctx, depth, depth); err != nil {
			b.Fatal(err)
		}
	}
	rates := make([][]float64, len(pairs))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, p := range pairs {
			start := time.Now()
			if err := p.run(ctx, perRound, depth); err != nil {
				b.Fatal(err)
			}
			rates[j] = append(rates[j], float64(perRound*size)/time.Since(start).Seconds()/1e6)
		}
	}
	b.StopTimer()
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base := med(rates[0])
	for j, p := range pairs {
		m := med(rates[j])
		b.ReportMetric(m, p.name+"-MB/s")
		if j > 0 && base > 0 {
			b.ReportMetric(m/base, p.name+"/in-process")
		}
	}
}
