package uapi

import (
	"fmt"
	"strconv"
	"strings"
)

// Counters are the traffic counters of a QP or device as the protocol carries them (the
// fields of rnic.Stats).
type Counters struct {
	TxBytes     uint64 `json:"tx_bytes"`
	RxBytes     uint64 `json:"rx_bytes"`
	TxSegments  uint64 `json:"tx_segments"`
	RxSegments  uint64 `json:"rx_segments"`
	CRCErrors   uint64 `json:"crc_errors"`
	TermSent    uint64 `json:"term_sent"`
	TermRecv    uint64 `json:"term_recv"`
	Retransmits uint64 `json:"retransmits"`
	NAKs        uint64 `json:"naks"`
}

// counterKeys are the keys of Counters' fields, in order.
var counterKeys = [...]string{"tx_bytes", "rx_bytes", "tx_segments", "rx_segments", "crc_errors",
	"term_sent", "term_recv", "retransmits", "naks"}

func (c *Counters) field(i int) *uint64 {
	return [...]*uint64{&c.TxBytes, &c.RxBytes, &c.TxSegments, &c.RxSegments, &c.CRCErrors,
		&c.TermSent, &c.TermRecv, &c.Retransmits, &c.NAKs}[i]
}

// DaemonCounters are the daemon's own counters: how often each of its bounds and
// timeouts acted (see the README's limits table).
type DaemonCounters struct {
	CtlClients      uint64 `json:"ctl_clients"`       // control connections open now
	CtlAcceptErrors uint64 `json:"ctl_accept_errors"` // failed accepts on the control socket (EMFILE…), retried
	CtlRefused      uint64 `json:"ctl_refused"`       // control connections refused at the cap
	CtlIdleClosed   uint64 `json:"ctl_idle_closed"`   // control connections closed after the idle timeout
	ListenRefused   uint64 `json:"listen_refused"`    // listen_iwarp refused at the listener cap
	TargetRefused   uint64 `json:"target_refused"`    // memory target connections refused at the cap
	RpingSessions   uint64 `json:"rping_sessions"`    // rping server sessions open now
	RpingRefused    uint64 `json:"rping_refused"`     // rping clients refused at the session cap
	RpingIdleClosed uint64 `json:"rping_idle_closed"` // rping sessions closed after the idle timeout

	// The RoCEv2 device processes attach to (internal/broker.Counters, steer.Stats).
	Attached        uint64 `json:"attached"`         // processes attached now
	AttachRefused   uint64 `json:"attach_refused"`   // attach attempts refused (process cap, bad hello)
	QPNRefused      uint64 `json:"qpn_refused"`      // QP numbers refused (per-process cap, steering map full)
	ClaimRefused    uint64 `json:"claim_refused"`    // listens refused: another process has the port
	MADsIn          uint64 `json:"mads_in"`          // CM MADs routed to processes
	MADsOut         uint64 `json:"mads_out"`         // CM MADs sent for processes
	MADDropped      uint64 `json:"mad_dropped"`      // MADs dropped: a process's queue full
	MADRefused      uint64 `json:"mad_refused"`      // MADs a process sent naming what it does not own
	CommFull        uint64 `json:"comm_full"`        // connections refused: the comm ID table full
	DREQsSent       uint64 `json:"dreqs_sent"`       // DREQs sent for connections of processes that ended
	DREQRetries     uint64 `json:"dreq_retries"`     // those DREQs sent again, no DREP having come
	DREQsUnanswered uint64 `json:"dreqs_unanswered"` // those given up after every retry
	Steered         uint64 `json:"steered"`          // packets steered (or relayed) to processes
	RelayDropped    uint64 `json:"relay_dropped"`    // relayed packets dropped: a process's queue full
}

// daemonKeys are the keys of DaemonCounters' fields, in order.
var daemonKeys = [...]string{"ctl_clients", "ctl_accept_errors", "ctl_refused", "ctl_idle_closed", "listen_refused", "target_refused",
	"rping_sessions", "rping_refused", "rping_idle_closed",
	"attached", "attach_refused", "qpn_refused", "claim_refused", "mads_in", "mads_out", "mad_dropped", "mad_refused",
	"comm_full", "dreqs_sent", "dreq_retries", "dreqs_unanswered", "steered", "relay_dropped"}

func (c *DaemonCounters) field(i int) *uint64 {
	return [...]*uint64{&c.CtlClients, &c.CtlAcceptErrors, &c.CtlRefused, &c.CtlIdleClosed, &c.ListenRefused, &c.TargetRefused,
		&c.RpingSessions, &c.RpingRefused, &c.RpingIdleClosed,
		&c.Attached, &c.AttachRefused, &c.QPNRefused, &c.ClaimRefused, &c.MADsIn, &c.MADsOut, &c.MADDropped, &c.MADRefused,
		&c.CommFull, &c.DREQsSent, &c.DREQRetries, &c.DREQsUnanswered, &c.Steered, &c.RelayDropped}[i]
}

// DaemonKeys are the keys of DaemonCounters' fields, in order (for the metrics).
func DaemonKeys() []string { return daemonKeys[:] }

// Field returns DaemonCounters' field i (of DaemonKeys).
func (c *DaemonCounters) Field(i int) uint64 { return *c.field(i) }

// QPStatus is one QP in a get response.
type QPStatus struct {
	QPN       uint32   `json:"qpn"`
	Transport string   `json:"transport"` // "iwarp" or "rocev2"
	State     string   `json:"state"`     // rnic.QPState.String()
	Peer      string   `json:"peer"`      // the peer's address (host:port)
	PID       int      `json:"pid"`       // the process that owns the QP (the daemon's own: its pid)
	Comm      string   `json:"comm"`      // that process's name
	Counters  Counters `json:"counters"`
}

// ProcStatus is a process attached to the device, carried as one line
// "proc=PID,SLOT,QPS,SINCE,COMM" (SINCE in Unix seconds; COMM last, it may hold commas).
type ProcStatus struct {
	PID   int    `json:"pid"`
	Slot  int    `json:"slot"`
	QPs   int    `json:"qps"`
	Since int64  `json:"since"`
	Comm  string `json:"comm"`
}

// ResKinds are the resources a get with res= lists.
var ResKinds = []string{"cq", "mr", "pd"}

// MaxPageRes is the most resources one get answer holds (one line each).
const MaxPageRes = 3072

// Res is one CQ, MR or PD of a process on the device, as a get with res=KIND lists it,
// carried as one line "KIND=PID,NUM,PD,SIZE,USED,IOVA,FLAGS,COMM" (COMM last: it may
// hold commas).
type Res struct {
	Kind  string `json:"kind"`
	PID   int    `json:"pid"`
	Comm  string `json:"comm"`
	Num   uint32 `json:"num"`   // cqn, pdn, or an MR's STag (its L_Key and R_Key)
	PD    uint32 `json:"pdn"`   // mr: the number of its PD
	Size  uint64 `json:"size"`  // cq: entries; mr: bytes
	Used  uint64 `json:"used"`  // cq: completions waiting; pd: the MRs, MWs, QPs and SRQs using it
	IOVA  uint64 `json:"iova"`  // mr: the address of its first byte
	Flags string `json:"flags"` // mr: access rights, "|FastReg", "|Invalid"; cq: "overflow"
}

// Key orders a device's resources of one kind: by process, then number.
func (r *Res) Key() uint64 { return uint64(r.PID)<<32 | uint64(r.Num) }

func (r *Res) line() Pair {
	return Pair{r.Kind, Sanitize(fmt.Sprintf("%d,%d,%d,%d,%d,%d,%s,%s", r.PID, r.Num, r.PD, r.Size, r.Used, r.IOVA,
		strings.ReplaceAll(r.Flags, ",", "|"), r.Comm))}
}

func parseRes(kind, v string) (Res, error) {
	f := strings.SplitN(v, ",", 8)
	if len(f) != 8 {
		return Res{}, ErrMalformed
	}
	var n [6]uint64
	for i, bits := range []int{31, 32, 32, 64, 64, 64} {
		x, err := strconv.ParseUint(f[i], 10, bits)
		if err != nil {
			return Res{}, ErrMalformed
		}
		n[i] = x
	}
	return Res{Kind: kind, PID: int(n[0]), Num: uint32(n[1]), PD: uint32(n[2]), Size: n[3], Used: n[4], IOVA: n[5],
		Flags: f[6], Comm: f[7]}, nil
}

// Status is the decoded answer to get=1.
//
// Its lines are, in order: the device keys ("device", then "listen_iwarp" and
// "listen_rocev2" once per listener (the RoCEv2 link's UDP address), "rocev2_cm_port" (the
// RDMA-CM port of the RoCEv2 listener), "target_addr", "target_rkey", "target_len", the
// device counters, the daemon counters, "qp_count" (the QPs the device has) and, when the
// answer is a page that does not reach the last QP, "qp_next" (the QP number to ask for
// next with qp_from)), then for each QP of the page a section that starts with "qp=N" and
// holds that QP's "transport", "state", "peer" and counters. Unknown keys are ignored, so
// the daemon can add some without breaking older readers.
type Status struct {
	Device       string         `json:"device"`
	ListenIWARP  []string       `json:"listen_iwarp"`
	ListenRoCEv2 []string       `json:"listen_rocev2"`
	RoCEv2CMPort uint16         `json:"rocev2_cm_port"`
	TargetAddr   uint64         `json:"target_addr"`
	TargetRKey   uint32         `json:"target_rkey"`
	TargetLen    uint64         `json:"target_len"`
	Counters     Counters       `json:"counters"`
	Daemon       DaemonCounters `json:"daemon"`
	QPCount      uint64         `json:"qp_count"`
	// Steering and Processes describe the RoCEv2 device processes attach to: "bpf" or
	// "relay" ("" without one), and the attached processes.
	Steering  string       `json:"steering,omitempty"`
	Processes []ProcStatus `json:"processes"`
	// Netdev, PortState, MTU and GIDs describe the device's port: the network device
	// carrying its address, ACTIVE or DOWN, its MTU, and its RoCEv2 GIDs (one per
	// address of the netdev, IPv4 as ::ffff:a.b.c.d).
	Netdev    string     `json:"netdev,omitempty"`
	PortState string     `json:"port_state,omitempty"`
	MTU       int        `json:"mtu,omitempty"`
	GIDs      []string   `json:"gids"`
	QPs       []QPStatus `json:"qps"`

	// Res, ResCount and ResNext answer a get with res=KIND: a page of the resources
	// (no QPs then), how many the device has, and the res_from of the next page (set
	// when ResNextSet).
	Res        []Res  `json:"res,omitempty"`
	ResCount   uint64 `json:"-"`
	ResNext    uint64 `json:"-"`
	ResNextSet bool   `json:"-"`

	// QPNext is set in a page that does not reach the last QP: the qp_from of the next
	// page (a page ends before it).
	QPNext    uint32 `json:"-"`
	QPNextSet bool   `json:"-"`
}

func appendCounters(ps []Pair, c *Counters) []Pair {
	for i, k := range counterKeys {
		ps = append(ps, Pair{k, strconv.FormatUint(*c.field(i), 10)})
	}
	return ps
}

// Pairs encodes the status as response pairs. Strings that are not valid values are
// sanitized.
func (s *Status) Pairs() []Pair {
	ps := []Pair{{"device", Sanitize(s.Device)}}
	for _, a := range s.ListenIWARP {
		ps = append(ps, Pair{"listen_iwarp", Sanitize(a)})
	}
	for _, a := range s.ListenRoCEv2 {
		ps = append(ps, Pair{"listen_rocev2", Sanitize(a)})
	}
	ps = append(ps, Pair{"rocev2_cm_port", strconv.FormatUint(uint64(s.RoCEv2CMPort), 10)},
		Pair{"target_addr", strconv.FormatUint(s.TargetAddr, 10)},
		Pair{"target_rkey", strconv.FormatUint(uint64(s.TargetRKey), 10)},
		Pair{"target_len", strconv.FormatUint(s.TargetLen, 10)})
	ps = appendCounters(ps, &s.Counters)
	for i, k := range daemonKeys {
		ps = append(ps, Pair{k, strconv.FormatUint(*s.Daemon.field(i), 10)})
	}
	if s.Steering != "" {
		ps = append(ps, Pair{"steering", Sanitize(s.Steering)})
	}
	if s.Netdev != "" {
		ps = append(ps, Pair{"netdev", Sanitize(s.Netdev)}, Pair{"port_state", Sanitize(s.PortState)},
			Pair{"mtu", strconv.Itoa(s.MTU)})
	}
	for _, g := range s.GIDs {
		ps = append(ps, Pair{"gid", Sanitize(g)})
	}
	for _, p := range s.Processes {
		ps = append(ps, Pair{"proc", Sanitize(fmt.Sprintf("%d,%d,%d,%d,%s", p.PID, p.Slot, p.QPs, p.Since, p.Comm))})
	}
	if s.Res != nil || s.ResCount != 0 {
		ps = append(ps, Pair{"res_count", strconv.FormatUint(s.ResCount, 10)})
		if s.ResNextSet {
			ps = append(ps, Pair{"res_next", strconv.FormatUint(s.ResNext, 10)})
		}
		for i := range s.Res {
			ps = append(ps, s.Res[i].line())
		}
	}
	ps = append(ps, Pair{"qp_count", strconv.FormatUint(s.QPCount, 10)})
	if s.QPNextSet {
		ps = append(ps, Pair{"qp_next", strconv.FormatUint(uint64(s.QPNext), 10)})
	}
	for i := range s.QPs {
		q := &s.QPs[i]
		ps = append(ps, Pair{"qp", strconv.FormatUint(uint64(q.QPN), 10)},
			Pair{"transport", Sanitize(q.Transport)}, Pair{"state", Sanitize(q.State)},
			Pair{"peer", Sanitize(q.Peer)}, Pair{"pid", strconv.Itoa(q.PID)}, Pair{"comm", Sanitize(q.Comm)})
		ps = appendCounters(ps, &q.Counters)
	}
	return ps
}

// DecodeStatus decodes the pairs of a get response. A number that does not parse, a
// duplicate "device" or a QP key before the first "qp" line is ErrMalformed.
func DecodeStatus(ps []Pair) (Status, error) {
	s := Status{ListenIWARP: []string{}, ListenRoCEv2: []string{}, Processes: []ProcStatus{}, GIDs: []string{}, QPs: []QPStatus{}}
	var q *QPStatus
	seenDev := false
	num := func(v string, bits int) (uint64, error) {
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil {
			return 0, ErrMalformed
		}
		return n, nil
	}
	for _, p := range ps {
		if p.Key == "qp" {
			n, err := num(p.Value, 32)
			if err != nil {
				return Status{}, err
			}
			s.QPs = append(s.QPs, QPStatus{QPN: uint32(n)})
			q = &s.QPs[len(s.QPs)-1]
			continue
		}
		cs := &s.Counters
		if q != nil {
			cs = &q.Counters
		}
		if i := counterIndex(p.Key); i >= 0 {
			n, err := num(p.Value, 64)
			if err != nil {
				return Status{}, err
			}
			*cs.field(i) = n
			continue
		}
		if q != nil {
			switch p.Key {
			case "transport":
				q.Transport = p.Value
			case "state":
				q.State = p.Value
			case "peer":
				q.Peer = p.Value
			case "pid":
				n, err := num(p.Value, 31)
				if err != nil {
					return Status{}, err
				}
				q.PID = int(n)
			case "comm":
				q.Comm = p.Value
			case "device", "listen_iwarp", "listen_rocev2", "rocev2_cm_port", "target_addr", "target_rkey", "target_len",
				"qp_count", "qp_next", "steering", "proc", "netdev", "port_state", "mtu", "gid", "res_count", "res_next", "cq", "mr", "pd":
				return Status{}, ErrMalformed
			default:
				if daemonIndex(p.Key) >= 0 {
					return Status{}, ErrMalformed
				}
			}
			continue
		}
		switch p.Key {
		case "device":
			if seenDev {
				return Status{}, ErrMalformed
			}
			seenDev = true
			s.Device = p.Value
		case "listen_iwarp":
			s.ListenIWARP = append(s.ListenIWARP, p.Value)
		case "steering":
			s.Steering = p.Value
		case "netdev":
			s.Netdev = p.Value
		case "port_state":
			s.PortState = p.Value
		case "gid":
			s.GIDs = append(s.GIDs, p.Value)
		case "mtu":
			n, err := num(p.Value, 31)
			if err != nil {
				return Status{}, err
			}
			s.MTU = int(n)
		case "proc":
			f := strings.SplitN(p.Value, ",", 5)
			if len(f) != 5 {
				return Status{}, ErrMalformed
			}
			var ns [4]int64
			for i := range 4 {
				n, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil || n < 0 || i < 3 && n > 1<<31-1 {
					return Status{}, ErrMalformed
				}
				ns[i] = n
			}
			s.Processes = append(s.Processes, ProcStatus{PID: int(ns[0]), Slot: int(ns[1]), QPs: int(ns[2]), Since: ns[3], Comm: f[4]})
		case "listen_rocev2":
			s.ListenRoCEv2 = append(s.ListenRoCEv2, p.Value)
		case "cq", "mr", "pd":
			r, err := parseRes(p.Key, p.Value)
			if err != nil {
				return Status{}, err
			}
			s.Res = append(s.Res, r)
		case "res_count", "res_next":
			n, err := num(p.Value, 64)
			if err != nil {
				return Status{}, err
			}
			if p.Key == "res_count" {
				s.ResCount = n
			} else {
				s.ResNext, s.ResNextSet = n, true
			}
		case "target_addr", "target_len":
			n, err := num(p.Value, 64)
			if err != nil {
				return Status{}, err
			}
			if p.Key == "target_addr" {
				s.TargetAddr = n
			} else {
				s.TargetLen = n
			}
		case "rocev2_cm_port":
			n, err := num(p.Value, 16)
			if err != nil {
				return Status{}, err
			}
			s.RoCEv2CMPort = uint16(n)
		case "target_rkey":
			n, err := num(p.Value, 32)
			if err != nil {
				return Status{}, err
			}
			s.TargetRKey = uint32(n)
		case "qp_count":
			n, err := num(p.Value, 64)
			if err != nil {
				return Status{}, err
			}
			s.QPCount = n
		case "qp_next":
			n, err := num(p.Value, 32)
			if err != nil {
				return Status{}, err
			}
			s.QPNext, s.QPNextSet = uint32(n), true
		case "transport", "state", "peer", "pid", "comm":
			return Status{}, ErrMalformed
		default:
			if i := daemonIndex(p.Key); i >= 0 {
				n, err := num(p.Value, 64)
				if err != nil {
					return Status{}, err
				}
				*s.Daemon.field(i) = n
			}
		}
	}
	return s, nil
}

func counterIndex(k string) int {
	for i, c := range counterKeys {
		if c == k {
			return i
		}
	}
	return -1
}

func daemonIndex(k string) int {
	for i, c := range daemonKeys {
		if c == k {
			return i
		}
	}
	return -1
}
