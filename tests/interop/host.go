package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/internal/syncbuf"
)

// BuildSoftrnic builds cmd/softrnic into dir and returns the binary's path.
func BuildSoftrnic(dir string) (string, error) { return buildSoftrnic(dir, "softrnic", false) }

// BuildStaticSoftrnic builds cmd/softrnic with CGO_ENABLED=0 (a static binary, which runs in
// the guest: Options.Files) into dir as softrnic-static and returns its path.
func BuildStaticSoftrnic(dir string) (string, error) {
	return buildSoftrnic(dir, "softrnic-static", true)
}

func buildSoftrnic(dir, name string, static bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/softrnic")
	cmd.Dir = filepath.Join(Dir(), "..", "..")
	if static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/softrnic (static %v): %v\n%s", static, err, out)
	}
	return bin, nil
}

// HostProc is a program running on the host inside the guest's namespace.
type HostProc struct {
	cmd    *exec.Cmd
	out    syncbuf.Buffer
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// StartHost starts name with args inside the namespace; it is killed after timeout.
func (g *Guest) StartHost(timeout time.Duration, name string, args ...string) (*HostProc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &HostProc{done: make(chan struct{}), cancel: cancel}
	p.cmd = g.HostCommand(ctx, name, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.WaitDelay = 5 * time.Second
	// Pdeathsig is tied to the forking thread: start and wait on a thread that lives as long
	// as the program (see Boot).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	if err := <-started; err != nil {
		cancel()
		return nil, err
	}
	return p, nil
}

// Output returns what the program printed so far (stdout and stderr).
func (p *HostProc) Output() string { return p.out.String() }

// WaitOutput waits until the output contains s, the program exits, or timeout passes.
func (p *HostProc) WaitOutput(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.Output(), s) {
			return true
		}
		select {
		case <-p.done:
			return strings.Contains(p.Output(), s)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// Wait waits for the program to exit and returns its output and exit status (-1 if it was
// killed or could not be waited for).
func (p *HostProc) Wait(timeout time.Duration) (Result, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		return Result{Output: p.Output(), Code: -1}, fmt.Errorf("host program still running after %v; killed", timeout)
	}
	code := 0
	if p.err != nil {
		if ee, ok := p.err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			return Result{Output: p.Output(), Code: -1}, p.err
		}
	}
	return Result{Output: p.Output(), Code: code}, nil
}

// Kill kills the program (the process this package started, by pid) and waits for it.
func (p *HostProc) Kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(os.Kill)
	}
	p.cancel()
	<-p.done
}
