package daemon

// -metrics: the daemon's counters as Prometheus text exposition (format 0.0.4, which
// OpenMetrics scrapers also read), on GET /metrics. Off by default; it serves counters
// only (no QP contents, no addresses of peers).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/softrnic/softrnic/internal/uapi"
)

// serveMetrics listens on addr and serves /metrics until Close.
func (d *Daemon) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		d.writeMetrics(w)
	})
	d.met = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 8 << 10}
	d.metAddr = ln.Addr()
	d.log.Info("metrics", "addr", ln.Addr().String())
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.met.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("metrics server stopped", "err", err)
		}
	}()
	return nil
}

// MetricsAddr is the -metrics listener's address (nil without one).
func (d *Daemon) MetricsAddr() net.Addr {
	if d.met == nil {
		return nil
	}
	return d.metAddr
}

// writeMetrics writes every counter: the device's traffic, the daemon's bounds, the
// attached processes (one series per process), and the QP count.
func (d *Daemon) writeMetrics(w io.Writer) {
	dev := d.dev.Name()
	lbl := fmt.Sprintf("device=%q", dev)
	counter := func(name, help string, v uint64, labels string) {
		fmt.Fprintf(w, "# HELP softrnic_%s %s\n# TYPE softrnic_%s counter\nsoftrnic_%s_total{%s} %d\n", name, help, name, name, labels, v)
	}
	gauge := func(name, help string, v uint64, labels string) {
		fmt.Fprintf(w, "# HELP softrnic_%s %s\n# TYPE softrnic_%s gauge\nsoftrnic_%s{%s} %d\n", name, help, name, name, labels, v)
	}
	c := countersOf(d.dev.Counters().Snapshot())
	counter("tx_bytes", "Payload bytes sent by the daemon's own QPs.", c.TxBytes, lbl)
	counter("rx_bytes", "Payload bytes received by the daemon's own QPs.", c.RxBytes, lbl)
	counter("tx_segments", "FPDUs or packets sent by the daemon's own QPs.", c.TxSegments, lbl)
	counter("rx_segments", "FPDUs or packets received by the daemon's own QPs.", c.RxSegments, lbl)
	counter("retransmits", "RoCEv2 retransmissions of the daemon's own QPs.", c.Retransmits, lbl)
	dc := d.counters()
	gauges := map[string]bool{"ctl_clients": true, "rping_sessions": true, "attached": true}
	for i, k := range uapi.DaemonKeys() {
		help := "Daemon counter " + k + " (see the README's limits table)."
		if gauges[k] {
			gauge(k, help, dc.Field(i), lbl)
		} else {
			counter(k, help, dc.Field(i), lbl)
		}
	}
	d.mu.Lock()
	own := uint64(len(d.qpns))
	d.mu.Unlock()
	gauge("daemon_qps", "QPs of the daemon's own services (memory target).", own, lbl)
	if d.prt != nil {
		name, state, mtu, gids := d.prt.status()
		var up uint64
		if state == portActive {
			up = 1
		}
		pl := fmt.Sprintf("%s,netdev=%q", lbl, promLabel(name))
		gauge("port_active", "1 while the device's netdev is up and carries its address.", up, pl)
		gauge("port_mtu", "The MTU of the device's netdev.", uint64(mtu), pl)
		gauge("port_gids", "RoCEv2 GIDs of the device's port (addresses of its netdev).", uint64(len(gids)), pl)
	}
	if d.br != nil {
		ps := d.br.Processes()
		fmt.Fprintf(w, "# HELP softrnic_process_qps QPs of an attached process.\n# TYPE softrnic_process_qps gauge\n")
		for _, p := range ps {
			fmt.Fprintf(w, "softrnic_process_qps{%s,pid=\"%d\",comm=%q} %d\n", lbl, p.PID, promLabel(p.Comm), p.QPs)
		}
	}
}

// promLabel keeps a label value inside the exposition format's escaping rules.
func promLabel(s string) string { return strings.ToValidUTF8(s, "?") }
