package interop

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// Row is one line of the interop results table: peer × operation × softrnic role → result.
type Row struct {
	Peer      string // "siw (Linux 6.1)", "rxe (Linux 6.1)"
	Operation string // e.g. "rping -C 100 -S 4096 -V"
	Role      string // softrnic's role ("server", "client", "-" for guest-only sanity checks)
	Result    string // "pass", "FAIL: …", "skip: …"
	Test      string // Go test name
}

// Results collects rows from the tests of one run.
type Results struct {
	mu   sync.Mutex
	rows []Row
}

// Add records a row.
func (r *Results) Add(row Row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, row)
}

// Markdown renders the table sorted by peer, then test order.
func (r *Results) Markdown(header string) string {
	r.mu.Lock()
	rows := append([]Row(nil), r.rows...)
	r.mu.Unlock()
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Peer < rows[j].Peer })
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n\n| peer | operation | softrnic role | result | test |\n|---|---|---|---|---|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.Peer, esc(x.Operation), x.Role, esc(x.Result), x.Test)
	}
	return b.String()
}

func esc(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// WriteFile writes the table to path.
func (r *Results) WriteFile(path, header string) error {
	return os.WriteFile(path, []byte(r.Markdown(header)), 0o644)
}

// Tail returns at most the last n bytes of s (for failure messages: rping -v output is large).
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
