package daemon

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
)

func countersOf(s rnic.Stats) uapi.Counters {
	return uapi.Counters{TxBytes: s.TxBytes, RxBytes: s.RxBytes, TxSegments: s.TxSegments, RxSegments: s.RxSegments,
		CRCErrors: s.CRCErrors, TermSent: s.TermSent, TermRecv: s.TermRecv, Retransmits: s.Retransmits, NAKs: s.NAKs}
}

// status collects the device's state and the QPs q selects.
func (d *Daemon) status(q uapi.Query) (uapi.Status, error) {
	s := uapi.Status{Device: d.dev.Name()}
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
	sel, next, more := q.Select(d.qpns)
	conns := make([]*daemonConn, len(sel))
	for i, n := range sel {
		conns[i] = d.conns[n]
	}
	s.QPCount = uint64(len(d.qpns))
	d.mu.Unlock()
	if q.One && len(conns) == 0 {
		return s, uapi.Errorf(uapi.ENOENT, "qp=%d: no such QP", q.QP)
	}
	s.QPNext, s.QPNextSet = next, more
	for _, c := range conns {
		s.QPs = append(s.QPs, uapi.QPStatus{QPN: c.qpn, Transport: c.transport, State: c.info.State().String(),
			Peer: c.peer, Counters: countersOf(c.info.Counters().Snapshot())})
	}
	// The device counters last: they are never behind the QPs' (they count everything the
	// QPs count, and only grow).
	s.Counters = countersOf(d.dev.Counters().Snapshot())
	s.Daemon = d.counters()
	return s, nil
}

// counters collects the daemon's own counters.
func (d *Daemon) counters() uapi.DaemonCounters {
	var c uapi.DaemonCounters
	if d.srv != nil {
		st := d.srv.Stats()
		c.CtlClients, c.CtlAcceptErrors, c.CtlRefused, c.CtlIdleClosed = uint64(st.Clients), st.AcceptErrors, st.Refused, st.IdleClosed
	}
	c.ListenRefused = d.listenRefused.Load()
	if d.rping != nil {
		st := d.rping.Stats()
		c.RpingSessions, c.RpingRefused, c.RpingIdleClosed = uint64(st.Sessions), st.Refused, st.IdleClosed
	}
	return c
}

// Get implements uapi.Handler: the device section and the QPs q selects (a page, or one).
func (d *Daemon) Get(q uapi.Query) ([]uapi.Pair, error) {
	s, err := d.status(q)
	if err != nil {
		return nil, err
	}
	return s.Pairs(), nil
}

// Set implements uapi.Handler: listen_iwarp=ip:port adds an iWARP listener (an IP
// literal, EINVAL for a name; EBUSY past MaxListeners); close_qp=N disconnects QP N
// gracefully.
func (d *Daemon) Set(ps []uapi.Pair) error {
	for _, p := range ps {
		switch p.Key {
		case "listen_iwarp":
			if _, err := parseListenAddr(p.Value); err != nil {
				return uapi.Errorf(uapi.EINVAL, "listen_iwarp=%s: %v", p.Value, err)
			}
			if err := d.listenIWARP(p.Value); err != nil {
				errno := uapi.EIO
				switch {
				case errors.Is(err, errTooManyListeners):
					errno = uapi.EBUSY
				case errors.Is(err, syscall.EADDRINUSE):
					errno = uapi.EADDRINUSE
				}
				return uapi.Errorf(errno, "listen_iwarp=%s: %v", p.Value, err)
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
			c.info.Disconnect()
		default:
			return uapi.Errorf(uapi.EPROTO, "unknown key %q", p.Key)
		}
	}
	return nil
}
