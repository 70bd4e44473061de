package interop

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RoCEv2 over an impaired link (issue 10): netem on the guest's eth1 (rxe0's netdev)
// loses, duplicates and reorders what rxe sends to softrnic — CM MADs, requests,
// responses, ACKs and NAKs. The host kernel has no sch_netem, so only the guest →
// host direction is impaired; softrnic's own packets are impaired in effect when
// their ACKs are.
//
// Two impairments:
//   - cmImpair: only CM MADs (UDP 4791, BTH destination QP 1, selected with a u32
//     filter into a netem band) are lost or duplicated, heavily: the IB CM's
//     retransmission, duplicate handling (REQ → REP again or MRA, REP → RTU
//     again, DREQ → DREP again) and the "first packet establishes" rule carry the
//     connection through on both sides;
//   - dataImpair: every packet, lightly, for RC reliability both ways.
//
// rxe as the sender on a lossy link is slow: once a NAK has started a retry, its
// completer ignores every further NAK (comp.started_retry) until a whole work request
// has been acknowledged (reset_retry_counters), so a second loss within one 64-packet
// WRITE waits for the retransmit timer (~2 s). That is rxe's behaviour (rxe_comp.c), not
// something the responder can change: softrnic NAKs each sequence error once (IBTA
// §9.7.5.1.1: the first out-of-sequence packet; the rest are dropped until the expected
// PSN comes). The rxe-sending perftest therefore moves fewer WRITEs (rxeIters) than the
// softrnic-sending one, and the timeouts allow for it.

const (
	cmImpair   = "loss 30% duplicate 30%"
	dataImpair = "delay 1ms reorder 10% 50% loss 2% duplicate 2%"
)

// impair puts netem with spec on the guest's eth1 (rxe0's link) until the test ends;
// with cmOnly, only CM MADs (to QP1 on UDP 4791) go through it.
func impair(t *testing.T, g *Guest, spec string, cmOnly bool) { impairDev(t, g, "eth1", spec, cmOnly) }

// impairDev is impair on the guest's netdev dev (eth0: siw0's link, eth1: rxe0's).
func impairDev(t *testing.T, g *Guest, dev, spec string, cmOnly bool) {
	t.Helper()
	script := "set -e\nmodprobe sch_netem\ntc qdisc del dev " + dev + " root 2>/dev/null || true\n"
	if cmOnly {
		// The BTH starts at IP offset 28 (a 20-byte IPv4 header, then UDP); its
		// second word holds the destination QP in the low 24 bits: QP1, the GSI,
		// carries the CM MADs.
		script += "modprobe sch_prio\nmodprobe cls_u32\n" +
			"tc qdisc add dev " + dev + " root handle 1: prio\n" +
			"tc qdisc add dev " + dev + " parent 1:3 handle 30: netem " + spec + "\n" +
			"tc filter add dev " + dev + " parent 1:0 protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff " +
			"match u32 0x00000001 0x00ffffff at 32 flowid 1:3\n"
	} else {
		script += "tc qdisc add dev " + dev + " root netem " + spec + "\n"
	}
	script += "tc qdisc show dev " + dev + "\n"
	out, err := g.MustRun(script, 30*time.Second)
	if err != nil {
		t.Fatalf("netem on the guest: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		r, err := g.Run("tc -s qdisc show dev "+dev+"; tc qdisc del dev "+dev+" root", 30*time.Second)
		if err != nil {
			t.Errorf("removing netem: %v", err)
			return
		}
		t.Logf("guest %s qdiscs at the end:\n%s", dev, Tail(r.Output, 1500))
	})
}

// impairedCases are the rping interop runs on an impaired link.
var impairedCases = []struct {
	name   string
	spec   string
	cmOnly bool
	count  int
}{
	{"cm-mads", cmImpair, true, 20},
	{"all-packets", dataImpair, false, 50},
}

// TestRxeImpairedRping: rping (RDMA-CM connection, SEND/READ/WRITE, disconnect)
// between the guest's rxe and softrnic rping --roce over an impaired link, in both
// roles; the payload checks are those of the clean-link tests.
func TestRxeImpairedRping(t *testing.T) {
	g := guest(t)
	bin := softrnic(t)
	const size = 4096
	for _, c := range impairedCases {
		t.Run(c.name+"/guest-client", func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("rping -C %d -S %d over netem %q%s (guest client)", c.count, size, c.spec, cmOnlyNote(c.cmOnly)), "server")
			p := port()
			srv, err := g.StartHost(6*time.Minute, bin, "rping", "--roce", "-s", "-a", HostRxeAddr, "-p", strconv.Itoa(p),
				"-S", strconv.Itoa(size), "-v", "-d", "--timeout", "300s")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if !srv.WaitOutput("listening on", 30*time.Second) {
				t.Fatalf("softrnic server did not listen:\n%s", srv.Output())
			}
			impair(t, g, c.spec, c.cmOnly)
			args := fmt.Sprintf("-c -a %s -p %d -C %d -S %d -V -v", HostRxeAddr, p, c.count, size)
			cli, err := g.Run(guestRping(args, "icli", "ping data: "), 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := srv.Wait(2 * time.Minute)
			if err != nil {
				t.Fatalf("softrnic server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			// The guest's rping disconnects and exits at once: if its one DREQ is lost,
			// Linux's CM does not resend it (cm_destroy_id in DREQ_SENT goes to
			// timewait), so the server learns that the peer's QP is gone from its
			// keepalive probe exhausting the retries — the clean ending otherwise.
			dreqLost := sr.Code != 0 && strings.Contains(sr.Output, "transport retry count exceeded")
			if cli.Code != 0 || sr.Code != 0 && !dreqLost {
				t.Fatalf("guest rping client exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkGuestSummary(t, "guest rping client", cli.Output, "ping data: ", c.count, size)
			checkHostPings(t, "softrnic server", sr.Output, "server ping data: ", c.count, size)
			switch {
			case dreqLost:
				t.Logf("the guest's DREQ was lost: the softrnic server found the peer gone by keepalive (%s)", Tail(sr.Output, 200))
			case !strings.Contains(sr.Output, "server DISCONNECT EVENT..."):
				t.Errorf("softrnic server did not report the client's disconnect:\n%s", Tail(sr.Output, 2000))
			}
		})
		t.Run(c.name+"/softrnic-client", func(t *testing.T) {
			record(t, PeerRxe, fmt.Sprintf("rping -C %d -S %d over netem %q%s (guest server)", c.count, size, c.spec, cmOnlyNote(c.cmOnly)), "client")
			p := port()
			srv, err := g.Start(guestRping(fmt.Sprintf("-s -a %s -p %d -S %d -v", GuestRxeAddr, p, size), "isrv", "server ping data: "), 6*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Kill()
			if err := g.WaitCMListen(p, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			impair(t, g, c.spec, c.cmOnly)
			cli, err := g.StartHost(6*time.Minute, bin, "rping", "--roce", "-c", "-a", GuestRxeAddr, "-p", strconv.Itoa(p),
				"-C", strconv.Itoa(c.count), "-S", strconv.Itoa(size), "-V", "-v", "-d", "--timeout", "300s")
			if err != nil {
				t.Fatal(err)
			}
			cr, err := cli.Wait(5 * time.Minute)
			if err != nil {
				t.Fatalf("softrnic client: %v\n%s", err, Tail(cr.Output, 3000))
			}
			sr, err := srv.Wait(2 * time.Minute)
			if err != nil {
				t.Fatalf("guest rping server: %v\n%s", err, Tail(sr.Output, 3000))
			}
			if cr.Code != 0 || (sr.Code != 0 && !rpingChannelRace(t, "guest rping server", sr.Code, sr.Output)) {
				t.Fatalf("softrnic client exit %d:\n%s\nguest rping server exit %d:\n%s", cr.Code, Tail(cr.Output, 3000), sr.Code, Tail(sr.Output, 3000))
			}
			checkHostPings(t, "softrnic client", cr.Output, "ping data: ", c.count, size)
			checkGuestSummary(t, "guest rping server", sr.Output, "server ping data: ", c.count, size)
		})
	}
}

// TestRxeImpairedPerftest: ib_write_bw -R against softrnic perftest write --roce over
// the lightly impaired link, both roles: with softrnic sending, rxe's ACKs are lost,
// duplicated and reordered; with rxe sending, its WRITEs are.
func TestRxeImpairedPerftest(t *testing.T) {
	g := guest(t)
	// rxeIters: each 64 KiB WRITE is 64 packets, so 64 of them meet ~80 losses at 2 %
	// (and as many duplicates and reorderings); at rxe's pace of 0.04-0.08 MB/s that ran
	// 97 s on a loaded machine, where 200 took 150-220 s in CI.
	const size, iters, rxeIters = 65536, 200, 64
	t.Run("write/guest-client", func(t *testing.T) {
		iters := rxeIters
		record(t, PeerRxe, fmt.Sprintf("ib_write_bw -R -x 1 -s %d -n %d over netem %q (guest client)", size, iters, dataImpair), "server")
		port := ptPort()
		srv := ptStartHost(t, g, 6*time.Minute, "perftest", "write", "--roce", "-R", "--bind", HostRxeAddr, "-p", strconv.Itoa(port),
			"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "--timeout", "300s")
		if !srv.WaitOutput("Waiting for client to connect", 30*time.Second) {
			t.Fatalf("softrnic perftest server did not start:\n%s", srv.Output())
		}
		impair(t, g, dataImpair, false)
		cli, err := g.Run(fmt.Sprintf("ib_write_bw -R -x 1 -d rxe0 -F -s %d -n %d -p %d %s", size, iters, port, HostRxeAddr), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		code := ptExit(srv, 2*time.Minute)
		if cli.Code != 0 || code != 0 {
			t.Fatalf("guest ib_write_bw exit %d:\n%s\nsoftrnic server exit %d:\n%s", cli.Code, Tail(cli.Output, 3000), code, Tail(srv.Output(), 3000))
		}
		bw := ptParseReport(t, "guest ib_write_bw", cli.Output, size, iters, false)
		t.Logf("ib_write_bw (rxe sending) over netem: %.2f MB/s", bw)
	})
	t.Run("write/softrnic-client", func(t *testing.T) {
		record(t, PeerRxe, fmt.Sprintf("ib_write_bw -R -x 1 -s %d -n %d over netem %q (guest server)", size, iters, dataImpair), "client")
		port := ptPort()
		srv, err := g.Start(fmt.Sprintf("exec ib_write_bw -R -x 1 -d rxe0 -F -s %d -n %d -p %d", size, iters, port), 6*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		if err := g.WaitCMListen(port, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		impair(t, g, dataImpair, false)
		cli := ptStartHost(t, g, 6*time.Minute, "perftest", "write", "--roce", "-R", "-p", strconv.Itoa(port),
			"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "--timeout", "300s", GuestRxeAddr)
		code := ptExit(cli, 5*time.Minute)
		sr, err := srv.Wait(2 * time.Minute)
		if err != nil || code != 0 || sr.Code != 0 {
			t.Fatalf("%v: softrnic client exit %d:\n%s\nguest ib_write_bw server exit %d:\n%s", err, code, Tail(cli.Output(), 3000), sr.Code, Tail(sr.Output, 3000))
		}
		bw := ptParseReport(t, "softrnic client", cli.Output(), size, iters, true)
		t.Logf("perftest write (softrnic sending, rxe's ACKs impaired) over netem: %.2f MB/s", bw)
	})
}

func cmOnlyNote(cmOnly bool) string {
	if cmOnly {
		return " on CM MADs only"
	}
	return ""
}
