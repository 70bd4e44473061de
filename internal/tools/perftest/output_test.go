package perftest

import (
	"math"
	"testing"
)

// TestCHexAlt: C's "%#Nx" (perftest's address lines), as gcc prints it.
func TestCHexAlt(t *testing.T) {
	for _, c := range []struct {
		w    int
		v    uint64
		want string
	}{
		{4, 0, "0000"}, {6, 0, "000000"}, {6, 0x1a, "0x001a"}, {4, 128, "0x80"}, {6, 0x11, "0x0011"},
		{6, 0x3c7a2d, "0x3c7a2d"}, {6, 0x12345678, "0x12345678"}, {8, 0x1234, "0x001234"},
		{16, 0x7f5595698000, "0x007f5595698000"}, {16, 0, "0000000000000000"},
	} {
		if got := cHexAlt(c.w, c.v); got != c.want {
			t.Errorf("%%#%dx of %#x: %q, want %q", c.w, c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{math.Inf(1), "inf    "}, {math.Inf(-1), "-inf   "}, {math.NaN(), "nan    "}, {1.5, "1.50   "}, {12345.678, "12345.68"}} {
		if got := cFloat(7, 2, c.v); got != c.want {
			t.Errorf("%%-7.2f of %v: %q, want %q", c.v, got, c.want)
		}
	}
}

// The banners below are ctx_print_test_info's output for these runs, written from
// perftest 4.5's format strings (perftest_parameters.c).
func TestBanner(t *testing.T) {
	const rl = "---------------------------------------------------------------------------------------\n"
	for _, c := range []struct {
		name string
		b    banner
		want string
	}{
		{"ib_write_bw -R server on siw", banner{verb: Write, device: "siw0", qps: 1, iwarp: true, txDepth: 128, rxDepth: 1,
			cqMod: 1, mtuBytes: 1024, outReads: 1, rdmaCM: true, commCM: true},
			rl +
				"                    RDMA_Write BW Test\n" +
				" Dual-port       : OFF\t\tDevice         : siw0\n" +
				" Number of qps   : 1\t\tTransport type : IW\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: ON\n" +
				" ibv_wr* API     : OFF\n" +
				" CQ Moderation   : 1\n" +
				" Mtu             : 1024[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 0\n" +
				" Max inline data : 0[B]\n" +
				" rdma_cm QPs\t : ON\n" +
				" Data ex. method : rdma_cm\n" +
				rl +
				" Waiting for client rdma_cm QP to connect\n" +
				" Please run the same command with the IB/RoCE interface IP\n" +
				rl},
		{"ib_send_bw -x 1 client on rxe", banner{verb: Send, device: "rxe0", qps: 4, client: true, txDepth: 128, rxDepth: 512,
			cqMod: 100, mtuBytes: 1024, gidIndex: 1, outReads: 1},
			rl +
				"                    Send BW Test\n" +
				" Dual-port       : OFF\t\tDevice         : rxe0\n" +
				" Number of qps   : 4\t\tTransport type : IB\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: ON\n" +
				" ibv_wr* API     : OFF\n" +
				" TX depth        : 128\n" +
				" CQ Moderation   : 100\n" +
				" Mtu             : 1024[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 1\n" +
				" Max inline data : 0[B]\n" +
				" rdma_cm QPs\t : OFF\n" +
				" Data ex. method : Ethernet\n" +
				rl},
		{"ib_send_bw -b server", banner{verb: Send, bidir: true, device: "d", qps: 1, txDepth: 128, rxDepth: 512, cqMod: 1,
			mtuBytes: 1024, outReads: 1, commCM: true},
			rl +
				"                    Send Bidirectional BW Test\n" +
				" Dual-port       : OFF\t\tDevice         : d\n" +
				" Number of qps   : 1\t\tTransport type : IB\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: ON\n" +
				" ibv_wr* API     : OFF\n" +
				" TX depth        : 128\n" +
				" RX depth        : 512\n" +
				" CQ Moderation   : 1\n" +
				" Mtu             : 1024[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 0\n" +
				" Max inline data : 0[B]\n" +
				" rdma_cm QPs\t : OFF\n" +
				" Data ex. method : rdma_cm\n" +
				rl},
		{"ib_atomic_bw -R client", banner{verb: Atomic, atomic: FetchAdd, device: "rxe0", qps: 1, client: true, txDepth: 128,
			cqMod: 100, mtuBytes: 4096, gidIndex: 1, outReads: 128, rdmaCM: true, commCM: true},
			rl +
				"                    Atomic FETCH_AND_ADD BW Test\n" +
				" Dual-port       : OFF\t\tDevice         : rxe0\n" +
				" Number of qps   : 1\t\tTransport type : IB\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: ON\n" +
				" ibv_wr* API     : OFF\n" +
				" TX depth        : 128\n" +
				" CQ Moderation   : 100\n" +
				" Mtu             : 4096[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 1\n" +
				" Outstand reads  : 128\n" +
				" rdma_cm QPs\t : ON\n" +
				" Data ex. method : rdma_cm\n" +
				rl},
		{"ib_write_lat -R server", banner{verb: Write, latency: true, device: "siw0", qps: 1, iwarp: true, txDepth: 1, rxDepth: 1,
			cqMod: 1, mtuBytes: 1024, outReads: 1, rdmaCM: true, commCM: true, noRelaxed: true},
			rl +
				"                    RDMA_Write Latency Test\n" +
				" Dual-port       : OFF\t\tDevice         : siw0\n" +
				" Number of qps   : 1\t\tTransport type : IW\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: OFF\n" +
				" ibv_wr* API     : OFF\n" +
				" Mtu             : 1024[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 0\n" +
				" Max inline data : 0[B]\n" +
				" rdma_cm QPs\t : ON\n" +
				" Data ex. method : rdma_cm\n" +
				rl +
				" Waiting for client rdma_cm QP to connect\n" +
				" Please run the same command with the IB/RoCE interface IP\n" +
				rl},
		{"ib_read_lat client", banner{verb: Read, latency: true, device: "siw0", qps: 1, iwarp: true, client: true, txDepth: 1,
			rxDepth: 1, cqMod: 1, mtuBytes: 1024, outReads: 128, rdmaCM: true, commCM: true},
			rl +
				"                    RDMA_Read Latency Test\n" +
				" Dual-port       : OFF\t\tDevice         : siw0\n" +
				" Number of qps   : 1\t\tTransport type : IW\n" +
				" Connection type : RC\t\tUsing SRQ      : OFF\n" +
				" PCIe relax order: ON\n" +
				" ibv_wr* API     : OFF\n" +
				" TX depth        : 1\n" +
				" Mtu             : 1024[B]\n" +
				" Link type       : Ethernet\n" +
				" GID index       : 0\n" +
				" Outstand reads  : 128\n" +
				" rdma_cm QPs\t : ON\n" +
				" Data ex. method : rdma_cm\n" +
				rl},
	} {
		if got := c.b.String(); got != c.want {
			t.Errorf("%s:\n%q\nwant\n%q", c.name, got, c.want)
		}
	}
}

func TestDestLine(t *testing.T) {
	d := dest{OutReads: 128, QPN: 0x11, PSN: 0x3c7a2d, RKey: 0x1234, VAddr: 0x7f5595698000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 78, 15: 2}}
	gid := " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:78:02\n"
	for _, c := range []struct {
		side   string
		verb   Verb
		commCM bool
		want   string
	}{
		// -R (or -z) forces the exchange's verb to Send: no OUT, RKey or VAddr.
		{"local", Read, true, " local address: LID 0000 QPN 0x0011 PSN 0x3c7a2d\n" + gid},
		{"remote", Write, false, " remote address: LID 0000 QPN 0x0011 PSN 0x3c7a2d RKey 0x001234 VAddr 0x007f5595698000\n" + gid},
		{"local", Read, false, " local address: LID 0000 QPN 0x0011 PSN 0x3c7a2d OUT 0x80 RKey 0x001234 VAddr 0x007f5595698000\n" + gid},
		{"local", Send, false, " local address: LID 0000 QPN 0x0011 PSN 0x3c7a2d\n" + gid},
		{"local", Atomic, false, " local address: LID 0000 QPN 0x0011 PSN 0x3c7a2d\n" + gid},
	} {
		if got := destLine(c.side, &d, c.verb, c.commCM); got != c.want {
			t.Errorf("%v %v: %q, want %q", c.verb, c.commCM, got, c.want)
		}
	}
}

func TestRows(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		// REPORT_FMT: " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf\n"
		{bwRow(bwReport{Size: 65536, Iters: 5000, Peak: 1226.25, Avg: 1226.25, MsgRateAvg: 0.01962}, false),
			" 65536  " + "   " + " 5000      " + "       " + "1226.25" + "            " + "1226.25" + "\t\t   " + "0.019620" + "\n"},
		{bwRow(bwReport{Size: 2, Iters: 1000, Peak: 0, Avg: 3.5, MsgRateAvg: 1.75}, false),
			" 2      " + "    " + "1000      " + "       " + "0.00   " + "            " + "3.50   " + "\t\t   " + "1.750000" + "\n"},
		// REPORT_FMT_EXT (Gb/s below 0.1): " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf\n"
		{bwRow(bwReport{Size: 2, Iters: 1000, Peak: 0.001234, Avg: 0.001, MsgRateAvg: 0.0625}, true),
			" 2      " + "    " + "1000" + "           " + "0.001234" + "            " + "0.001000" + "            " + "0.062500" + "\n"},
		{bwRow(bwReport{Size: 65536, Iters: 10, Peak: 9.87, Avg: 9.5, MsgRateAvg: 0.018}, true),
			" 65536  " + "    " + "10        " + "       " + "9.87   " + "            " + "9.50   " + "\t\t   " + "0.018000" + "\n"},
		// REPORT_FMT_LAT: " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
		{latRow(latReport{Size: 2, Iters: 1000, Min: 1.23, Max: 4.56, Typical: 1.5, Avg: 1.6, Stdev: 0.1, P99: 3, P999: 4.56}),
			" 2      " + " " + "1000" + "          " + "1.23   " + "        " + "4.56   " + "      " + "1.50   " + "  \t       " +
				"1.60   " + "     \t" + "0.10   " + "\t\t" + "3.00   " + " \t\t" + "4.56   " + "\n"},
		// REPORT_FMT_LAT_DUR: " %-7lu       %lu            %-7.2f        %-7.2f\n"
		{latDurRow(2, 123456, 1.23, 812345.678), " 2      " + "       " + "123456" + "            " + "1.23   " + "        " + "812345.68" + "\n"},
	} {
		if c.got != c.want {
			t.Errorf("%q\nwant %q", c.got, c.want)
		}
	}
}
