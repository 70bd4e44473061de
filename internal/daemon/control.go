package daemon

import (
	"errors"
	"net"
	"sort"
	"strconv"
	"syscall"

	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
)

func countersOf(s rnic.Stats) uapi.Counters {
	return uapi.Counters{TxBytes: s.TxBytes, RxBytes: s.RxBytes, TxSegments: s.TxSegments, RxSegments: s.RxSegments,
		CRCErrors: s.CRCErrors, TermSent: s.TermSent, TermRecv: s.TermRecv, Retransmits: s.Retransmits, NAKs: s.NAKs}
}

// status collects the device's state for get=1.
func (d *Daemon) status() uapi.Status {
	s := uapi.Status{Device: d.dev.Name(), Counters: countersOf(d.dev.Counters().Snapshot())}
	if d.mr != nil {
		s.TargetAddr, s.TargetRKey, s.TargetLen = d.mr.Addr(), d.mr.RKey(), uint64(d.mr.Len())
	}
	d.mu.Lock()
	for _, ln := range d.iwLns {
		s.ListenIWARP = append(s.ListenIWARP, ln.addr())
	}
	if d.roLn != nil {
		s.ListenRoCEv2 = append(s.ListenRoCEv2, d.ep.LocalAddr().String())
		s.RoCEv2CMPort = d.roLn.cmPort()
	}
	conns := make([]*daemonConn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].qp.Num() < conns[j].qp.Num() })
	for _, c := range conns {
		q := uapi.QPStatus{QPN: c.qp.Num(), Transport: c.transport, State: c.qp.State().String(),
			Peer: c.peer, Counters: countersOf(c.qp.Counters().Snapshot())}
		s.QPs = append(s.QPs, q)
	}
	return s
}

// Get implements uapi.Handler.
func (d *Daemon) Get() ([]uapi.Pair, error) {
	s := d.status()
	return s.Pairs(), nil
}

// Set implements uapi.Handler: listen_iwarp=host:port adds an iWARP listener;
// close_qp=N disconnects QP N gracefully.
func (d *Daemon) Set(ps []uapi.Pair) error {
	for _, p := range ps {
		switch p.Key {
		case "listen_iwarp":
			if _, _, err := net.SplitHostPort(p.Value); err != nil {
				return uapi.Errorf(uapi.EINVAL, "listen_iwarp=%s: %v", p.Value, err)
			}
			if err := d.listenIWARP(p.Value); err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					return uapi.Errorf(uapi.EADDRINUSE, "listen_iwarp=%s: %v", p.Value, err)
				}
				return uapi.Errorf(uapi.EIO, "listen_iwarp=%s: %v", p.Value, err)
			}
			d.log.Info("listening", "transport", transportIWARP, "addr", p.Value)
		case "close_qp":
			n, err := strconv.ParseUint(p.Value, 10, 32)
			if err != nil {
				return uapi.Errorf(uapi.EINVAL, "close_qp=%s: not a QP number", p.Value)
			}
			d.mu.Lock()
			c := d.conns[uint32(n)]
			d.mu.Unlock()
			if c == nil {
				return uapi.Errorf(uapi.ENOENT, "close_qp=%d: no such QP", n)
			}
			c.qp.Disconnect()
		default:
			return uapi.Errorf(uapi.EPROTO, "unknown key %q", p.Key)
		}
	}
	return nil
}
