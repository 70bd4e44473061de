package perftest

// perftest's output, byte for byte where scripts look: the banner (ctx_print_test_info),
// the address lines (ctx_print_pingpong_data), the result headers and rows (REPORT_FMT,
// REPORT_FMT_EXT, REPORT_FMT_LAT, REPORT_FMT_LAT_DUR), all from perftest 4.5's
// perftest_parameters.[ch] and perftest_communication.[ch].

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// resultLine is RESULT_LINE: 87 dashes.
const resultLine = "---------------------------------------------------------------------------------------\n"

// Result headers (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT, RESULT_FMT_LAT_DUR), each
// printed after RESULT_LINE and followed by "\n" (RESULT_EXT).
const (
	bwHeaderMB     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwHeaderGb     = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latHeader      = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latHeaderDur   = " #bytes        #iterations       t_avg[usec]    tps average"
	waitingBanner  = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
	waitingRDMACM  = " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP"
	deviceMaxReads = 128 // max_qp_rd_atom of softrnic's device (siw's and rxe's too)
)

// cHexAlt formats v as C's "%#Nx" does: 0 is N zeros (no 0x); any other value is "0x"
// and the digits, zero-padded so that the whole field is N characters wide. Go's "#"
// flag pads the digits alone, so it cannot produce these lines.
func cHexAlt(width int, v uint64) string {
	if v == 0 {
		return strings.Repeat("0", width)
	}
	h := strconv.FormatUint(v, 16)
	if n := width - 2 - len(h); n > 0 {
		h = strings.Repeat("0", n) + h
	}
	return "0x" + h
}

// cFloat formats v as C's "%-W.Pf" does, including C's "inf", "-inf" and "nan".
func cFloat(width, prec int, v float64) string {
	switch {
	case math.IsNaN(v):
		return fmt.Sprintf("%-*s", width, "nan")
	case math.IsInf(v, 1):
		return fmt.Sprintf("%-*s", width, "inf")
	case math.IsInf(v, -1):
		return fmt.Sprintf("%-*s", width, "-inf")
	}
	return fmt.Sprintf("%-*.*f", width, prec, v)
}

// banner describes the run for ctx_print_test_info.
type banner struct {
	verb      Verb
	atomic    AtomicType
	latency   bool
	bidir     bool
	device    string
	qps       int
	iwarp     bool // Transport type IW (else IB)
	client    bool
	txDepth   int
	rxDepth   int
	cqMod     int
	mtuBytes  int
	gidIndex  int
	outReads  int
	rdmaCM    bool // -R: data QPs through rdma_cm
	commCM    bool // -R or -z: the exchange over rdma_cm
	noRelaxed bool // PCIe relax order OFF (ib_write_lat, --disable_pcie_relaxed)
}

// String is the banner as ctx_print_test_info prints it on siw and rxe (Debian's
// perftest has HAVE_RO; both devices use the old post-send API).
func (b *banner) String() string {
	var s strings.Builder
	s.WriteString(resultLine)
	s.WriteString("                    ")
	s.WriteString(b.verb.String() + " ")
	if b.verb == Atomic {
		s.WriteString(b.atomic.String() + " ")
	}
	if b.latency {
		s.WriteString("Latency ")
	} else {
		if b.bidir {
			s.WriteString("Bidirectional ")
		}
		s.WriteString("BW ")
	}
	s.WriteString("Test\n")
	fmt.Fprintf(&s, " Dual-port       : OFF\t\tDevice         : %s\n", b.device)
	tt := "IB"
	if b.iwarp {
		tt = "IW"
	}
	fmt.Fprintf(&s, " Number of qps   : %d\t\tTransport type : %s\n", b.qps, tt)
	s.WriteString(" Connection type : RC\t\tUsing SRQ      : OFF\n")
	if b.noRelaxed {
		s.WriteString(" PCIe relax order: OFF\n")
	} else {
		s.WriteString(" PCIe relax order: ON\n")
	}
	s.WriteString(" ibv_wr* API     : OFF\n")
	if b.client || b.bidir {
		fmt.Fprintf(&s, " TX depth        : %d\n", b.txDepth)
	}
	if b.verb == Send && (!b.client || b.bidir) {
		fmt.Fprintf(&s, " RX depth        : %d\n", b.rxDepth)
	}
	if !b.latency {
		fmt.Fprintf(&s, " CQ Moderation   : %d\n", b.cqMod)
	}
	fmt.Fprintf(&s, " Mtu             : %d[B]\n", b.mtuBytes)
	s.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&s, " GID index       : %d\n", b.gidIndex)
	if b.verb != Read && b.verb != Atomic {
		s.WriteString(" Max inline data : 0[B]\n")
	} else {
		fmt.Fprintf(&s, " Outstand reads  : %d\n", b.outReads)
	}
	fmt.Fprintf(&s, " rdma_cm QPs\t : %s\n", onOff(b.rdmaCM))
	method := "Ethernet"
	if b.commCM {
		method = "rdma_cm"
	}
	s.WriteString(" Data ex. method : " + method)
	if b.rdmaCM && !b.client {
		s.WriteString("\n" + resultLine + waitingRDMACM)
	}
	s.WriteString("\n" + resultLine)
	return s.String()
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// destLine is one address line of ctx_print_pingpong_data (BASIC_ADDR_FMT, then READ_FMT
// and RDMA_FMT by the exchange's verb, which -R and -z force to Send) and its GID line
// (PERF_GID_FMT: the 16 bytes in decimal).
func destLine(side string, d *dest, verb Verb, commCM bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, " %s address: LID %s QPN %s PSN %s", side, cHexAlt(4, uint64(d.LID)), cHexAlt(6, uint64(d.QPN)), cHexAlt(6, uint64(d.PSN)))
	if !commCM {
		if verb == Read {
			fmt.Fprintf(&s, " OUT %s", cHexAlt(4, uint64(d.OutReads)))
		}
		if verb == Read || verb == Write {
			fmt.Fprintf(&s, " RKey %s VAddr %s", cHexAlt(8, uint64(d.RKey)), cHexAlt(16, d.VAddr))
		}
	}
	s.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02d", g)
	}
	s.WriteString("\n")
	return s.String()
}

// bwRow is a bandwidth result row: REPORT_FMT, or REPORT_FMT_EXT for averages below 0.1
// Gb/s with --report_gbits.
func bwRow(r bwReport, gbits bool) string {
	if gbits && r.Avg < 0.1 {
		return fmt.Sprintf(" %-7d    %d           %s            %s            %s\n", r.Size, r.Iters,
			cFloat(7, 6, r.Peak), cFloat(7, 6, r.Avg), cFloat(7, 6, r.MsgRateAvg))
	}
	return fmt.Sprintf(" %-7d    %-10d       %s            %s\t\t   %s\n", r.Size, r.Iters,
		cFloat(7, 2, r.Peak), cFloat(7, 2, r.Avg), cFloat(7, 6, r.MsgRateAvg))
}

// latRow is a latency result row (REPORT_FMT_LAT).
func latRow(r latReport) string {
	f := func(v float64) string { return cFloat(7, 2, v) }
	return fmt.Sprintf(" %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n", r.Size, r.Iters,
		f(r.Min), f(r.Max), f(r.Typical), f(r.Avg), f(r.Stdev), f(r.P99), f(r.P999))
}

// latDurRow is a -D latency result row (REPORT_FMT_LAT_DUR).
func latDurRow(size, iters uint64, avg, tps float64) string {
	return fmt.Sprintf(" %-7d       %d            %s        %s\n", size, iters, cFloat(7, 2, avg), cFloat(7, 2, tps))
}
