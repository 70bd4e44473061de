package bench

import (
	"testing"

	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// devPair is a client and a server device in one process, each with a PD and a CQ, their
// asynchronous events drained; both close when the test ends. The connection benchmarks
// and the memory-per-QP tests build on it.
type devPair struct {
	cd, sd   *rnic.Device
	cpd, spd *rnic.PD
	ccq, scq *rnic.CQ
}

func newDevPair(tb testing.TB) *devPair {
	tb.Helper()
	p := &devPair{}
	var err error
	for _, d := range []**rnic.Device{&p.cd, &p.sd} {
		if *d, err = rnic.Open(rnic.Config{}); err != nil {
			tb.Fatal(err)
		}
		dev := *d
		tb.Cleanup(func() { _ = dev.Close() })
		go func() {
			for range dev.Events() {
			}
		}()
	}
	if p.cpd, err = p.cd.AllocPD(); err == nil {
		p.spd, err = p.sd.AllocPD()
	}
	if err == nil {
		p.ccq, err = p.cd.CreateCQ(1024)
	}
	if err == nil {
		p.scq, err = p.sd.CreateCQ(1024)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// clientQP and serverQP create a QP on the client or the server device.
func (p *devPair) clientQP() (*rnic.QP, error) {
	return p.cd.CreateQP(p.cpd, rnic.QPAttr{SendCQ: p.ccq, RecvCQ: p.ccq})
}

func (p *devPair) serverQP() (*rnic.QP, error) {
	return p.sd.CreateQP(p.spd, rnic.QPAttr{SendCQ: p.scq, RecvCQ: p.scq})
}

// iwarpListen listens on the server device at 127.0.0.1 without the listener's caps (these
// tests open thousands of connections) and returns the configuration for the dialers too;
// the listener closes when the test ends.
func (p *devPair) iwarpListen(tb testing.TB) (*iwarp.Listener, *iwarp.Config) {
	tb.Helper()
	cfg := iwarp.DefaultConfig()
	cfg.MaxConns, cfg.MaxDeviceConns, cfg.Backlog = -1, -1, 1024
	ln, err := iwarp.Listen(p.sd, "127.0.0.1:0", cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	return ln, cfg
}
