package daemon

import (
	"cmp"
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/internal/attach"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

func countersOf(s rnic.Stats) uapi.Counters {
	return uapi.Counters{TxBytes: s.TxBytes, RxBytes: s.RxBytes, TxSegments: s.TxSegments, RxSegments: s.RxSegments,
		CRCErrors: s.CRCErrors, TermSent: s.TermSent, TermRecv: s.TermRecv, Retransmits: s.Retransmits, NAKs: s.NAKs}
}

// status collects the device's state and the QPs q selects.
func (d *Daemon) status(q uapi.Query) (uapi.Status, error) {
	if q.Res != "" {
		return d.resStatus(q), nil
	}
	s := uapi.Status{Device: d.dev.Name()}
	if d.mr != nil {
		s.TargetAddr, s.TargetRKey, s.TargetLen = d.mr.Addr(), d.mr.RKey(), uint64(d.mr.Len())
	}
	// the attached processes' QPs first (each process asked, within the broker's timeout;
	// the daemon's lock is not held meanwhile)
	var procs map[uint32]uapi.QPStatus
	if d.prt != nil {
		s.Netdev, s.PortState, s.MTU, s.GIDs = d.prt.status()
	}
	if d.br != nil {
		s.Steering = d.br.Mode().String()
		for _, p := range d.br.Processes() {
			s.Processes = append(s.Processes, uapi.ProcStatus{PID: p.PID, Slot: p.Slot, QPs: p.QPs, Since: p.Since.Unix(), Comm: p.Comm})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pq := d.br.ListQPs(ctx)
		cancel()
		procs = make(map[uint32]uapi.QPStatus, len(pq))
		for _, e := range pq {
			procs[e.QPN] = uapi.QPStatus{QPN: e.QPN, Transport: e.Transport, State: e.State, Peer: e.Peer, PID: e.PID, Comm: e.Comm,
				Counters: uapi.Counters{TxBytes: e.TxBytes, RxBytes: e.RxBytes, TxSegments: e.TxSegs, RxSegments: e.RxSegs,
					Retransmits: e.Retrans, NAKs: e.NAKs}}
		}
	}
	d.mu.Lock()
	for _, ln := range d.iwLns {
		s.ListenIWARP = append(s.ListenIWARP, ln.Addr().String())
	}
	if d.ro != nil {
		s.ListenRoCEv2 = append(s.ListenRoCEv2, d.ro.Endpoint().LocalAddr().String())
	}
	if d.roLn != nil {
		s.RoCEv2CMPort = uint16(d.roLn.Port())
	}
	all := d.qpns // sorted; the daemon's own QPs (the broker numbers them apart from the processes')
	if len(procs) > 0 {
		all = slices.Clone(d.qpns)
		for n := range procs {
			all = append(all, n)
		}
		slices.Sort(all)
	}
	sel, next, more := q.Select(all)
	sel = slices.Clone(sel) // all may be d.qpns: read after the lock is released
	s.QPCount = uint64(len(all))
	own := make([]*daemonConn, len(sel))
	for i, n := range sel {
		own[i] = d.conns[n]
	}
	d.mu.Unlock()
	if q.One && len(sel) == 0 {
		return s, uapi.Errorf(uapi.ENOENT, "qp=%d: no such QP", q.QP)
	}
	s.QPNext, s.QPNextSet = next, more
	pid := os.Getpid()
	for i, n := range sel {
		if c := own[i]; c != nil {
			s.QPs = append(s.QPs, uapi.QPStatus{QPN: c.qpn, Transport: c.transport, State: c.info.State().String(),
				Peer: c.peer, PID: pid, Comm: "softrnic", Counters: countersOf(c.info.Counters().Snapshot())})
			continue
		}
		s.QPs = append(s.QPs, procs[n])
	}
	// The device counters last: they are never behind the QPs' (they count everything the
	// QPs count, and only grow).
	s.Counters = countersOf(d.dev.Counters().Snapshot())
	s.Daemon = d.counters()
	return s, nil
}

// resStatus answers a res= query: the device's name and counters and a page of the
// resources of one kind, the daemon's own device's and every attached process's.
func (d *Daemon) resStatus(q uapi.Query) uapi.Status {
	all := attach.ListRes(d.dev, q.Res)
	pid := os.Getpid()
	for i := range all {
		all[i].PID, all[i].Comm = pid, "softrnic"
	}
	if d.br != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		all = append(all, d.br.ListRes(ctx, q.Res)...)
		cancel()
	}
	slices.SortFunc(all, func(x, y uapi.Res) int { return cmp.Compare(x.Key(), y.Key()) })
	s := uapi.Status{Device: d.dev.Name(), ResCount: uint64(len(all))}
	s.Res, s.ResNext, s.ResNextSet = q.SelectRes(all)
	s.Counters = countersOf(d.dev.Counters().Snapshot())
	s.Daemon = d.counters()
	return s
}

// counters collects the daemon's own counters.
func (d *Daemon) counters() uapi.DaemonCounters {
	var c uapi.DaemonCounters
	if d.srv != nil {
		st := d.srv.Stats()
		c.CtlClients, c.CtlAcceptErrors, c.CtlRefused, c.CtlIdleClosed = uint64(st.Clients), st.AcceptErrors, st.Refused, st.IdleClosed
	}
	c.ListenRefused = d.listenRefused.Load()
	if d.tgt != nil {
		c.TargetRefused = d.tgt.Stats().Refused
	}
	if b := d.br; b != nil {
		bc := b.Counters()
		c.Attached = bc.Attached.Load() - bc.Detached.Load()
		c.AttachRefused, c.QPNRefused, c.ClaimRefused = bc.AttachRefused.Load(), bc.QPNRefused.Load(), bc.ClaimRefused.Load()
		c.MADsIn, c.MADsOut, c.MADDropped, c.MADRefused = bc.MADsIn.Load(), bc.MADsOut.Load(), bc.MADDropped.Load(), bc.MADRefused.Load()
		c.CommFull, c.DREQsSent = bc.CommFull.Load(), bc.DREQsSent.Load()
		c.DREQRetries, c.DREQsUnanswered = bc.DREQRetries.Load(), bc.DREQsUnanswered.Load()
		if st, err := b.Steering(); err == nil {
			c.Steered, c.RelayDropped = st.Steered, st.RelayDropped
		}
	}
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
			d.log.Info("listening", "transport", cm.IWARP, "addr", p.Value)
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
