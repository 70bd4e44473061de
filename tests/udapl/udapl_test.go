package udapl

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/datconf"
)

var update = flag.Bool("update", false, "rewrite the results table in udapl/README.md")

// env is the built provider and its dat.conf files, shared by the tests.
type env struct {
	dir  string
	lib  string
	conf string // iWARP and RoCEv2 IAs on 127.0.0.1
	// RoCEv2 peers need distinct addresses on the same UDP port
	confA, confB string // 127.0.0.2, 127.0.0.3
}

// netns is the private network namespace the programs run in when the
// tests run as root (CI): dtest's and dapltest's fixed connection
// qualifiers fold to TCP ports inside Linux's ephemeral range (45248;
// dapltest limit_psp's 43414..43513), where sockets of other programs
// (go test ./... runs packages in parallel) would make them
// DAT_CONN_QUAL_IN_USE. Without root the programs share the host's.
var netns string

var (
	setupOnce sync.Once
	shared    *env
	setupSkip string // why the tests cannot run here
	setupErr  error  // a failure to build or configure
	tmpDir    string
	results   table
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	if netns != "" {
		_ = exec.Command("ip", "netns", "del", netns).Run()
	}
	if *update && code == 0 {
		if err := results.writeREADME(filepath.Join("..", "..", "udapl", "README.md")); err != nil {
			fmt.Fprintln(os.Stderr, "udapl: updating the table:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// setup builds the provider once and returns it, or skips (loudly) when the
// machine lacks what the tests need, or fails.
func setup(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("UDAPL SKIPPED: -short (builds a shared library and runs OFA's test programs)")
	}
	if raceEnabled {
		t.Skip("UDAPL SKIPPED under -race: the tests exec C programs that load a provider library built without -race; they run in the plain go test")
	}
	setupOnce.Do(func() { shared, setupSkip, setupErr = build() })
	if setupSkip != "" {
		t.Skip("UDAPL SKIPPED: " + setupSkip)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

// missing reports what of the test prerequisites the machine lacks.
func missing() string {
	var m []string
	for _, p := range []string{"gcc", "dtest", "dapltest"} {
		if _, err := exec.LookPath(p); err != nil {
			m = append(m, p)
		}
	}
	if _, err := os.Stat("/usr/include/dat2/udat.h"); err != nil {
		m = append(m, "/usr/include/dat2/udat.h")
	}
	if len(m) == 0 {
		return ""
	}
	return "missing " + strings.Join(m, ", ") + " (apt-get install gcc libdapl-dev dapl2-utils)"
}

func build() (*env, string, error) {
	if runtime.GOOS != "linux" {
		return nil, "the provider is a Linux (glibc) shared library", nil
	}
	if s := missing(); s != "" {
		return nil, s, nil
	}
	d, err := os.MkdirTemp("", "softrnic-udapl-")
	if err != nil {
		return nil, "", err
	}
	tmpDir = d
	e := &env{dir: d, lib: filepath.Join(d, "libdaplsoftrnic.so")}
	// the documented build command (udapl/README.md)
	cmd := exec.Command("go", "build", "-tags", "udapl", "-buildmode=c-shared", "-o", e.lib, "github.com/softrnic/softrnic/udapl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("building the provider: %v\n%s", err, out)
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("ip"); err == nil {
			ns := fmt.Sprintf("softrnic-udapl-%d", os.Getpid())
			if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
				return nil, "", fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
			}
			netns = ns
			if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
				return nil, "", fmt.Errorf("lo up in %s: %v: %s", ns, err, out)
			}
		}
	}
	for _, c := range []struct {
		path *string
		addr string
	}{{&e.conf, "127.0.0.1"}, {&e.confA, "127.0.0.2"}, {&e.confB, "127.0.0.3"}} {
		var b bytes.Buffer
		if err := datconf.Write(&b, e.lib, c.addr); err != nil {
			return nil, "", err
		}
		*c.path = filepath.Join(d, "dat-"+c.addr+".conf")
		if err := os.WriteFile(*c.path, b.Bytes(), 0o644); err != nil {
			return nil, "", err
		}
	}
	return e, "", nil
}

// proc is a running test program whose output is collected.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	seen chan struct{} // closed when want appears in the output
	want string
	done chan struct{}
	err  error
}

// start runs prog with args under DAT_OVERRIDE=conf, its output collected;
// want (if not empty) is a line fragment waitFor waits for. The process is
// killed when the test ends.
func start(t *testing.T, conf, want string, timeout time.Duration, prog string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &proc{name: prog, want: want, seen: make(chan struct{}), done: make(chan struct{})}
	if netns != "" {
		args = append([]string{"netns", "exec", netns, prog}, args...)
		prog = "ip"
	}
	p.cmd = exec.CommandContext(ctx, prog, args...)
	p.cmd.Env = append(os.Environ(), "DAT_OVERRIDE="+conf)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Cancel = func() error { return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", prog, err)
	}
	pw.Close()
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.Write(sc.Bytes())
			p.out.WriteByte('\n')
			p.mu.Unlock()
			if p.want != "" && strings.Contains(sc.Text(), p.want) {
				once.Do(func() { close(p.seen) })
			}
		}
		pr.Close()
		p.err = p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// waitFor waits until the wanted line appeared; false if the program ended
// or d passed first.
func (p *proc) waitFor(d time.Duration) bool {
	select {
	case <-p.seen:
		return true
	case <-p.done:
		select {
		case <-p.seen:
			return true
		default:
			return false
		}
	case <-time.After(d):
		return false
	}
}

// wait waits for the program to end and returns its error and output.
func (p *proc) wait() (string, error) {
	<-p.done
	return p.output(), p.err
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = append([]string{"…"}, l[len(l)-n:]...)
	}
	return strings.Join(l, "\n")
}

// table collects the results table rows of a run.
type table struct {
	mu   sync.Mutex
	rows []row
}

type row struct {
	program, transport, command, result string
	secs                                float64
}

func (tb *table) add(r row) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.rows = append(tb.rows, r)
}

const (
	tableBegin = "<!-- results table: written by go test ./tests/udapl -args -update -->"
	tableEnd   = "<!-- end of results table -->"
)

func (tb *table) markdown() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nRun %s (%s/%s, %d CPUs), provider built from this tree, both ends in this host on loopback.\n\n",
		tableBegin, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	b.WriteString("| program | transport | command (softrnic IA names; `-s`/`-h` 127.0.0.x) | result | time |\n|---|---|---|---|---|\n")
	for _, r := range tb.rows {
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %.1f s |\n", r.program, r.transport,
			strings.ReplaceAll(r.command, "|", `\|`), r.result, r.secs)
	}
	b.WriteString("\n" + tableEnd)
	return b.String()
}

// writeREADME replaces the table between the markers of the README at path.
func (tb *table) writeREADME(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: table markers not found", path)
	}
	s = s[:i] + tb.markdown() + s[j+len(tableEnd):]
	return os.WriteFile(path, []byte(s), 0o644)
}
