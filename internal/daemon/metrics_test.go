package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/host"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/cm"
)

// TestMetricsAndAttach: a process attaches to the daemon's RoCEv2 device (package host),
// connects a QP to the daemon's memory target and WRITEs to it; the status lists the
// process and its QP (pid, state, peer), and the -metrics endpoint, scraped over HTTP,
// reports the attachment, the process's QP count, the MADs routed and the steered
// packets in the Prometheus text format.
func TestMetricsAndAttach(t *testing.T) {
	d, sock := startDaemon(t, "-rocev2", "127.0.0.1:0", "-target-mib", "1", "-name", "m0", "-metrics", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := uapi.GetStatus(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	hd, err := host.Open("m0", &host.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	pd, _ := hd.RNIC().AllocPD()
	cq, _ := hd.RNIC().CreateCQ(16)
	qp, err := hd.RNIC().CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := hd.Transport().Dial(ctx, qp, fmt.Sprintf("127.0.0.1:%d@%d", st.RoCEv2CMPort, hd.Addr().Port()), cm.Param{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rb, err := rnic.ParseRemoteBuffer(conn.PrivateData())
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte("metrics!"), 8192)
	mr, _ := pd.RegMR(buf, rnic.AccessLocalWrite)
	if err := qp.PostSend(&rnic.SendWR{Opcode: rnic.OpWrite, Flags: rnic.Signaled, SGL: []rnic.SGE{mr.SGE(0, len(buf))},
		RemoteAddr: rb.Addr, RKey: rb.RKey}); err != nil {
		t.Fatal(err)
	}
	wc := make([]rnic.Completion, 1)
	if _, err := cq.Wait(ctx, wc); err != nil || wc[0].Status != rnic.StatusSuccess {
		t.Fatalf("WRITE to the target: %+v %v", wc[0], err)
	}
	if !bytes.Equal(d.mem[:len(buf)], buf) {
		t.Fatal("the target does not hold the WRITE's bytes")
	}
	st, err = uapi.GetStatus(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	var mine *uapi.QPStatus
	for i := range st.QPs {
		if st.QPs[i].QPN == qp.Num() {
			mine = &st.QPs[i]
		}
	}
	if st.Netdev != "lo" || st.PortState != "ACTIVE" || st.MTU == 0 || !slices.Contains(st.GIDs, "::ffff:127.0.0.1") {
		t.Fatalf("port: netdev %q state %q mtu %d gids %q", st.Netdev, st.PortState, st.MTU, st.GIDs)
	}
	if len(st.Processes) != 1 || st.Processes[0].PID != pid || st.Processes[0].QPs != 1 || st.Steering == "" ||
		mine == nil || mine.PID != pid || mine.State != "RTS" || !strings.HasPrefix(mine.Peer, "127.0.0.1:") || mine.Counters.TxBytes != uint64(len(buf)) {
		t.Fatalf("status with an attached process: processes %+v steering %q, its QP %+v", st.Processes, st.Steering, mine)
	}

	resp, err := http.Get("http://" + d.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("scrape: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	metrics := map[string]string{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("malformed sample %q", l)
		}
		metrics[f[0]] = f[1]
	}
	want := map[string]func(string) bool{
		`softrnic_attached{device="m0"}`: func(v string) bool { return v == "1" },
		fmt.Sprintf(`softrnic_process_qps{device="m0",pid="%d",comm="%s"}`, pid, procComm()): func(v string) bool { return v == "1" },
		`softrnic_mads_in_total{device="m0"}`:                                                func(v string) bool { return v != "0" },
		`softrnic_mads_out_total{device="m0"}`:                                               func(v string) bool { return v != "0" },
		`softrnic_steered_total{device="m0"}`:                                                func(v string) bool { return v != "0" },
		`softrnic_rx_bytes_total{device="m0"}`:                                               func(v string) bool { return v == fmt.Sprint(len(buf)) },
		`softrnic_port_active{device="m0",netdev="lo"}`:                                      func(v string) bool { return v == "1" },
		`softrnic_attach_refused_total{device="m0"}`:                                         func(v string) bool { return v == "0" },
	}
	for k, ok := range want {
		if v, found := metrics[k]; !found || !ok(v) {
			t.Errorf("metric %s = %q (found %v)", k, v, found)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// procComm is this process's name as the kernel has it (what the daemon reports).
func procComm() string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
