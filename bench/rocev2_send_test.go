package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/softrnic/softrnic/rnic"
)

// BenchmarkRoCEv2Send measures a one-way stream of RC SENDs (64 in flight, each
// signaled) over loopback UDP beside the raw UDP GSO baseline of BenchmarkRoCEv2Write
// (ratio = RoCEv2 ÷ raw). The receiver reposts each receive from its CQ waiter, so every
// SEND completes a Wait there.
//
// In "drive" both Waits run their endpoint's receive (Config.WaitDrivesReceive): the
// receiver's ACKs are then deferred (rocev2.Endpoint.AcksDeferred), each across one
// receive batch at most, since it answers none of the SENDs; acks-deferred and
// ack-timer report the receiver's counters over the whole run (warm-up included).
func BenchmarkRoCEv2Send(b *testing.B) {
	for _, m := range []struct {
		name string
		cfg  rnic.Config
	}{{"default", rnic.Config{}}, {"drive", rnic.Config{WaitDrivesReceive: driveHold}}} {
		for _, size := range []int{4 << 10, 64 << 10} {
			b.Run(m.name+"/"+roceSizeName(size), func(b *testing.B) { benchRoCEv2Send(b, m.cfg, size) })
		}
	}
}

func benchRoCEv2Send(b *testing.B, dcfg rnic.Config, size int) {
	cli, srv := roceConnect(b, dcfg)
	defer cli.close()
	defer srv.close()
	local := filled(size)
	lmr, _ := cli.pd.RegMR(local, rnic.AccessLocalWrite)
	// The receiver keeps the QP's 1,024 receives posted, all into one buffer (the bytes
	// are not checked), and reposts each from its CQ waiter. In the default mode it still
	// runs out a few times a second (naks: the responder's RNR NAKs, which the sender
	// waits out), its ACKs having let the sender go on while its reposts waited for the
	// waiter (not traced further).
	const recvs = 1024
	remote := make([]byte, size)
	rmr, _ := srv.pd.RegMR(remote, rnic.AccessLocalWrite)
	rwr := rnic.RecvWR{SGL: []rnic.SGE{rmr.SGE(0, size)}}
	for range recvs {
		if err := srv.qp.PostRecv(&rwr); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- repostLoop(ctx, srv.qp, srv.cq, &rwr) }()
	wr := rnic.SendWR{Opcode: rnic.OpSend, Flags: rnic.Signaled, SGL: []rnic.SGE{lmr.SGE(0, size)}}
	roceWriteRun(b, cli.qp, cli.cq, &wr, size, func() float64 { return rawUDPGSO(b, 256<<20, size, nil) }, nil)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cli.qp.Counters().Retransmits.Load()), "retransmits")
	b.ReportMetric(float64(cli.qp.Counters().NAKs.Load()), "naks")
	b.ReportMetric(float64(cli.ep.WindowCuts.Load()), "window-cuts")
	b.ReportMetric(float64(srv.ep.AcksDeferred.Load()), "acks-deferred")
	b.ReportMetric(float64(srv.ep.AckDeferTimeouts.Load()), "ack-timer")
}

// repostLoop waits on cq and reposts wr for each receive completion until ctx ends.
func repostLoop(ctx context.Context, qp *rnic.QP, cq *rnic.CQ, wr *rnic.RecvWR) error {
	wc := make([]rnic.Completion, 64)
	for {
		k, err := cq.Wait(ctx, wc)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != rnic.StatusSuccess {
				return fmt.Errorf("completion %+v", c)
			}
			if err := qp.PostRecv(wr); err != nil {
				return err
			}
		}
	}
}
