package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// syncBuf is a goroutine-safe log sink.
type syncBuf struct{ syncbuf.Buffer }

// records decodes the JSON log lines written so far.
func (w *syncBuf) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(w.Bytes()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q is not a JSON record: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// awaitRecord waits for a record with message msg whose attributes include want.
func (w *syncBuf) awaitRecord(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	next:
		for _, r := range w.records(t) {
			if r["msg"] != msg {
				continue
			}
			for k, v := range want {
				if fmt.Sprint(r[k]) != fmt.Sprint(v) {
					continue next
				}
			}
			return r
		}
	}
	t.Fatalf("no %q record with %v in the log:\n%s", msg, want, w.String())
	return nil
}

// TestDaemonStructuredLog: the daemon logs through log/slog; with -log-json every line is
// a JSON record, and a connection's records carry its QP number, transport and peer as
// attributes.
func TestDaemonStructuredLog(t *testing.T) {
	var logs syncBuf
	o, err := ParseArgs([]string{"-foreground", "-sock", testSock(t), "-iwarp", "127.0.0.1:0", "-target-mib", "1", "-log-json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = &logs
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := newDClient(t, 64, "")
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := iwarp.Dial(ctx, c.qp, d.iwLns[0].Addr().String(), nil, iwarp.ConnParam{})
	if err != nil {
		t.Fatal(err)
	}
	peer := conn.LocalAddr().String()
	r := logs.awaitRecord(t, "qp connected", map[string]any{"transport": "iwarp", "peer": peer})
	qpn, ok := r["qpn"].(float64)
	if !ok || qpn <= 0 || r["level"] != "INFO" || r["time"] == nil {
		t.Fatalf("record %v", r)
	}
	c.qp.Disconnect()
	logs.awaitRecord(t, "qp closed", map[string]any{"qpn": qpn})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range logs.records(t) {
		if m, _ := r["msg"].(string); strings.Contains(m, "%") {
			t.Errorf("unformatted message %q", m)
		}
	}
}
