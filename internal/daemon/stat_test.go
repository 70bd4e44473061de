package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/tools/stat"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
)

// synthQP is a QP table entry with no QP behind it, for scale tests of the control
// protocol.
type synthQP struct{ c rnic.Counters }

func (q *synthQP) State() rnic.QPState      { return rnic.QPRTS }
func (q *synthQP) Counters() *rnic.Counters { return &q.c }
func (q *synthQP) Disconnect()              {}

// addSynthetic puts n synthetic QPs numbered from first (step 2) in d's table; QP k's
// TxBytes is 3k and its RxSegments k%1000.
func addSynthetic(d *Daemon, first uint32, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range n {
		qpn := first + 2*uint32(i)
		q := &synthQP{}
		q.c.TxBytes.Store(3 * uint64(qpn))
		q.c.RxSegments.Store(uint64(qpn % 1000))
		d.addConn(&daemonConn{qpn: qpn, info: q, transport: "rocev2", peer: fmt.Sprintf("10.0.%d.%d:4791", qpn>>8&255, qpn&255)})
	}
}

// TestStat100kQPs: "softrnic stat" reads a daemon with 100,000 QPs (synthetic table
// entries) — as a table and as JSON — and one QP can be asked for by number. A get answer
// of every QP at once would need 1.3 million lines; the control protocol caps a message at
// uapi.MaxPairs, so the QPs come in pages.
func TestStat100kQPs(t *testing.T) {
	const n, first = 100000, 1000
	sock := testSock(t)
	o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-target-mib", "0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	addSynthetic(d, first, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t0 := time.Now()
	var b bytes.Buffer
	if err := stat.Run(ctx, stat.Options{Sock: sock}, &b, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("table of %d QPs (%d bytes) in %v", n, b.Len(), time.Since(t0))
	table := b.String()
	if !strings.Contains(table, "\nqps 100000 ") {
		t.Fatalf("no QP count line:\n%.400s", table)
	}
	rows := 0
	sc := bufio.NewScanner(strings.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		qpn, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			continue // header, device and daemon lines
		}
		if want := first + 2*uint32(rows); uint32(qpn) != want || f[1] != strconv.Itoa(os.Getpid()) || f[2] != "softrnic" ||
			f[3] != "rocev2" || f[4] != "RTS" || f[6] != strconv.FormatUint(3*qpn, 10) || f[9] != strconv.FormatUint(qpn%1000, 10) {
			t.Fatalf("row %d: %q, want QP %d", rows, f, want)
		}
		rows++
	}
	if rows != n {
		t.Fatalf("%d QP rows, want %d", rows, n)
	}

	b.Reset()
	if err := stat.Run(ctx, stat.Options{Sock: sock, JSON: true}, &b, nil); err != nil {
		t.Fatal(err)
	}
	var js uapi.Status
	if err := json.Unmarshal(b.Bytes(), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.QPs) != n || js.QPCount != n || js.QPs[n-1].QPN != first+2*(n-1) || js.QPs[n-1].Counters.TxBytes != 3*uint64(first+2*(n-1)) {
		t.Fatalf("JSON: %d QPs, count %d, last %+v", len(js.QPs), js.QPCount, js.QPs[len(js.QPs)-1])
	}

	q, err := uapi.GetQP(ctx, sock, first+2*777)
	if err != nil || q.QPN != first+2*777 || q.Counters.TxBytes != 3*uint64(first+2*777) {
		t.Fatal(q, err)
	}
	var e *uapi.Error
	if _, err := uapi.GetQP(ctx, sock, first+1); !errors.As(err, &e) || e.Errno != uapi.ENOENT {
		t.Fatalf("absent QP: %v", err)
	}
}
