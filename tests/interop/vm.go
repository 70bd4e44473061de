// Package interop runs Linux's soft-iWARP (siw) and Soft-RoCE (rxe) in a QEMU guest so that
// softrnic can be tested against the real kernel peers.
//
// The guest (a Debian bookworm kernel, siw built out of tree, rdma_rxe and rdma-core's tools
// in an initramfs) is built and cached by build-guest.sh. Boot starts it inside a network
// namespace that this package creates, with two tap devices:
//
//	tap0 192.168.77.1/24  ↔  guest eth0 192.168.77.2 (siw0)
//	tap1 192.168.78.1/24  ↔  guest eth1 192.168.78.2 (rxe0, RoCEv2 GID index 1)
//
// Nothing is routed out of the namespace. Host-side programs (softrnic) run inside it through
// Guest.HostCommand. The host drives the guest over a virtio-serial port served by guest/init
// (one script at a time, with a hard timeout), independent of guest networking.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Addresses of the namespace's test network.
const (
	HostSiwAddr  = "192.168.77.1" // tap0, the host end of the siw link
	GuestSiwAddr = "192.168.77.2" // guest eth0, siw0
	HostRxeAddr  = "192.168.78.1" // tap1, the host end of the rxe link
	GuestRxeAddr = "192.168.78.2" // guest eth1, rxe0
)

// Dir returns the directory holding this package's sources (build-guest.sh, guest/init).
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Dir(file)
}

// CacheDir is where downloads and the built guest are cached (SOFTRNIC_INTEROP_CACHE overrides).
func CacheDir() string {
	if d := os.Getenv("SOFTRNIC_INTEROP_CACHE"); d != "" {
		return d
	}
	return filepath.Join(Dir(), ".cache")
}

// Image is a built guest.
type Image struct {
	Kernel, Initrd, Release string
}

// BuildImage runs build-guest.sh (a no-op when its cache is current) and returns the image.
func BuildImage(ctx context.Context, log func(string)) (Image, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(Dir(), "build-guest.sh"), "--print-dir")
	cmd.Env = append(os.Environ(), "SOFTRNIC_INTEROP_CACHE="+CacheDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.Output()
	if log != nil && stderr.Len() > 0 {
		log(strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return Image{}, fmt.Errorf("build-guest.sh: %v\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	rel, err := os.ReadFile(filepath.Join(dir, "kernel-release"))
	if err != nil {
		return Image{}, err
	}
	return Image{
		Kernel:  filepath.Join(dir, "vmlinuz"),
		Initrd:  filepath.Join(dir, "initrd.img"),
		Release: strings.TrimSpace(string(rel)),
	}, nil
}

// Options configures Boot.
type Options struct {
	MemoryMiB int           // guest RAM (default 1536)
	CPUs      int           // guest vCPUs (default 2)
	BootWait  time.Duration // how long to wait for the agent (default 120 s)
	KeepDir   bool          // keep the run directory (console log, qemu log) after Close
	// Files puts extra files into the guest: guest path → host path. Boot appends them, as
	// an uncompressed newc cpio archive, to a copy of the initrd in the run directory (the
	// cached image is not changed); parent directories are created, existing files replaced.
	// Not under /tmp, which guest/init mounts a tmpfs over.
	Files map[string]string
}

// Guest is a running VM and the namespace it lives in.
type Guest struct {
	Netns   string // name of the network namespace (ip netns)
	RunDir  string // console.log, qemu.log, agent socket
	Image   Image
	opts    Options
	qemu    *exec.Cmd
	exited  chan struct{}
	waitErr error

	mu     sync.Mutex // serializes agent round trips
	conn   net.Conn
	rd     *bufio.Reader
	closed bool
	nextID int
}

// run runs a host command with a timeout and returns its combined output.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// CanRun reports why the harness cannot run here ("" when it can): it needs root (for the
// namespace and taps), /dev/net/tun and qemu-system-x86_64.
func CanRun() string {
	if os.Geteuid() != 0 {
		return "not root: the interop harness needs root for network namespaces and tap devices"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "no /dev/net/tun: " + err.Error()
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return "qemu-system-x86_64 not installed (tests/interop/ci.sh installs it with apt-get)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) not installed"
	}
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Boot creates the namespace and taps, starts QEMU in it and waits for the guest agent.
// The caller must Close the guest; Close kills only the QEMU process started here (by pid)
// and deletes only the namespace created here.
func Boot(img Image, opts Options) (g *Guest, err error) {
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 1536
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if opts.BootWait == 0 {
		opts.BootWait = 120 * time.Second
	}
	runDir, err := os.MkdirTemp("", "softrnic-interop-")
	if err != nil {
		return nil, err
	}
	g = &Guest{
		Netns:  "srnic-" + randHex(4),
		RunDir: runDir,
		Image:  img,
		opts:   opts,
		exited: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n--- guest console (tail) ---\n%s", err, g.ConsoleTail(40))
			g.Close()
		}
	}()
	initrd := img.Initrd
	if len(opts.Files) > 0 {
		initrd = filepath.Join(runDir, "initrd.img")
		if err := initrdWithFiles(img.Initrd, initrd, opts.Files); err != nil {
			g.Netns = "" // not created yet
			return g, fmt.Errorf("adding Options.Files to the initrd: %w", err)
		}
	}
	// The namespace and its taps. Nothing in it has a route out.
	if _, err := run(10*time.Second, "ip", "netns", "add", g.Netns); err != nil {
		g.Netns = "" // not ours to delete
		return g, err
	}
	cmds := [][]string{
		{"-n", g.Netns, "link", "set", "lo", "up"},
		{"-n", g.Netns, "tuntap", "add", "tap0", "mode", "tap"},
		{"-n", g.Netns, "tuntap", "add", "tap1", "mode", "tap"},
		{"-n", g.Netns, "addr", "add", HostSiwAddr + "/24", "dev", "tap0"},
		{"-n", g.Netns, "addr", "add", HostRxeAddr + "/24", "dev", "tap1"},
		{"-n", g.Netns, "link", "set", "tap0", "up"},
		{"-n", g.Netns, "link", "set", "tap1", "up"},
	}
	for _, c := range cmds {
		if _, err := run(10*time.Second, "ip", c...); err != nil {
			return g, err
		}
	}
	// virtio-net without offloads, so the taps carry MTU-sized frames with real checksums.
	nic := "csum=off,gso=off,guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off," +
		"guest_ufo=off,host_tso4=off,host_tso6=off,host_ecn=off,host_ufo=off"
	sock := filepath.Join(runDir, "agent.sock")
	args := []string{
		"netns", "exec", g.Netns, "qemu-system-x86_64",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(opts.CPUs), "-m", strconv.Itoa(opts.MemoryMiB),
		"-kernel", img.Kernel, "-initrd", initrd,
		// no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check can
		// fail ("IO-APIC + timer doesn't work!") and panic the boot.
		"-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init mitigations=off no_timer_check " +
			"srnic.ip0=" + GuestSiwAddr + "/24 srnic.ip1=" + GuestRxeAddr + "/24",
		"-serial", "file:" + filepath.Join(runDir, "console.log"),
		"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02,addr=0x4," + nic,
		"-netdev", "tap,id=n1,ifname=tap1,script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n1,mac=52:54:00:78:00:02,addr=0x5," + nic,
		"-device", "virtio-serial-pci,addr=0x6",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=agent",
	}
	qlog, err := os.Create(filepath.Join(runDir, "qemu.log"))
	if err != nil {
		return g, err
	}
	g.qemu = exec.Command("ip", args...) // ip netns exec execs qemu: same pid
	g.qemu.Stdout, g.qemu.Stderr = qlog, qlog
	// If the test binary dies, the kernel kills QEMU too. Pdeathsig fires when the *thread*
	// that forked QEMU exits, and Go ends threads whose goroutine exits while locked to them
	// (see InNetns), so QEMU is started and waited for on a thread of its own that lives as
	// long as QEMU does.
	g.qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := g.qemu.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		g.waitErr = g.qemu.Wait()
		qlog.Close()
		close(g.exited)
	}()
	if err := <-started; err != nil {
		qlog.Close()
		g.qemu = nil
		return g, err
	}
	writePidFile(g.qemu.Process.Pid, g.Netns)
	deadline := time.Now().Add(opts.BootWait)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			g.conn = c
			break
		}
		select {
		case <-g.exited:
			return g, fmt.Errorf("qemu exited during boot: %v: %s", g.waitErr, readFile(filepath.Join(runDir, "qemu.log")))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return g, errors.New("qemu did not create the agent socket")
		}
	}
	g.rd = bufio.NewReader(g.conn)
	// Wait for the agent's banner.
	_ = g.conn.SetReadDeadline(deadline)
	for {
		line, err := g.rd.ReadString('\n')
		if err != nil {
			return g, fmt.Errorf("waiting for the guest agent: %v", err)
		}
		if strings.TrimSpace(line) == "@@READY" {
			break
		}
	}
	_ = g.conn.SetReadDeadline(time.Time{})
	return g, nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// ConsoleTail returns the last n lines of the guest's serial console.
func (g *Guest) ConsoleTail(n int) string {
	if g == nil || g.RunDir == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(readFile(filepath.Join(g.RunDir, "console.log")), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Result is the outcome of a guest command.
type Result struct {
	Output string // combined stdout and stderr
	Code   int    // exit status (137 when the agent's timeout killed it)
}

// ErrGuestDead reports that the guest stopped answering; the guest is unusable after it.
var ErrGuestDead = errors.New("interop: guest agent not answering")

// Run runs a dash script in the guest and waits for it, at most timeout (the guest kills the
// script at the timeout; the host gives up 15 s later and declares the guest dead).
func (g *Guest) Run(script string, timeout time.Duration) (Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.conn == nil {
		return Result{}, ErrGuestDead
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	g.nextID++
	id := strconv.Itoa(g.nextID)
	b64 := base64.StdEncoding.EncodeToString([]byte(script))
	_ = g.conn.SetDeadline(time.Now().Add(time.Duration(secs)*time.Second + 15*time.Second))
	if _, err := fmt.Fprintf(g.conn, "%s %d %s\n", id, secs, b64); err != nil {
		g.conn.Close()
		g.closed = true
		return Result{}, fmt.Errorf("%w: %v", ErrGuestDead, err)
	}
	var out strings.Builder
	end := "@@END " + id + " "
	for {
		line, err := g.rd.ReadString('\n')
		if err != nil {
			g.conn.Close()
			g.closed = true
			return Result{Output: out.String()}, fmt.Errorf("%w: %v (console: %s)", ErrGuestDead, err, g.ConsoleTail(10))
		}
		if strings.HasPrefix(line, end) {
			code, _ := strconv.Atoi(strings.TrimSpace(line[len(end):]))
			s := out.String()
			s = strings.TrimSuffix(s, "\n") // the agent's separator newline
			return Result{Output: s, Code: code}, nil
		}
		out.WriteString(line)
	}
}

// MustRun is Run that turns a non-zero exit status into an error.
func (g *Guest) MustRun(script string, timeout time.Duration) (string, error) {
	r, err := g.Run(script, timeout)
	if err != nil {
		return r.Output, err
	}
	if r.Code != 0 {
		return r.Output, fmt.Errorf("guest: %q exited %d:\n%s", script, r.Code, r.Output)
	}
	return r.Output, nil
}

// Job is a command running in the background in the guest.
type Job struct {
	g   *Guest
	tag string
}

// Start starts script in the background in the guest, in its own session, killed by the guest
// after timeout. Its output and exit status are collected with Wait.
func (g *Guest) Start(script string, timeout time.Duration) (*Job, error) {
	g.mu.Lock()
	g.nextID++
	tag := "/tmp/job" + strconv.Itoa(g.nextID)
	g.mu.Unlock()
	secs := int((timeout + time.Second - 1) / time.Second)
	b64 := base64.StdEncoding.EncodeToString([]byte(script))
	wrapper := fmt.Sprintf("echo %s | base64 -d > %s.sh\n"+
		"setsid dash -c 'timeout -s KILL %d dash %s.sh > %s.out 2>&1 < /dev/null; echo $? > %s.rc.tmp; mv %s.rc.tmp %s.rc' > /dev/null 2>&1 < /dev/null &\n"+
		"echo $! > %s.pid\n", b64, tag, secs, tag, tag, tag, tag, tag, tag)
	if _, err := g.MustRun(wrapper, 10*time.Second); err != nil {
		return nil, err
	}
	return &Job{g: g, tag: tag}, nil
}

// Output returns what the job has printed so far.
func (j *Job) Output() string {
	r, _ := j.g.Run("cat "+j.tag+".out 2>/dev/null", 10*time.Second)
	return r.Output
}

// Wait waits up to timeout for the job to end and returns its output and exit status.
func (j *Job) Wait(timeout time.Duration) (Result, error) {
	deadline := time.Now().Add(timeout)
	for {
		r, err := j.g.Run("if [ -e "+j.tag+".rc ]; then cat "+j.tag+".rc; else echo running; fi", 10*time.Second)
		if err != nil {
			return Result{}, err
		}
		if s := strings.TrimSpace(r.Output); s != "running" {
			code, err := strconv.Atoi(s)
			if err != nil {
				return Result{}, fmt.Errorf("job status %q", s)
			}
			return Result{Output: j.Output(), Code: code}, nil
		}
		if time.Now().After(deadline) {
			return Result{Output: j.Output()}, fmt.Errorf("guest job %s still running after %v", j.tag, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Kill kills the job's process group in the guest: the script and what it started (not
// the watcher of its timeout, which ends by itself once the script is gone). dash's kill
// takes no "--": with one it killed nothing, and a job that hung stayed until its timeout.
func (j *Job) Kill() {
	_, _ = j.g.Run("p=$(cat "+j.tag+".pid 2>/dev/null) && kill -KILL -$p 2>/dev/null; true", 10*time.Second)
}

// HostCommand returns a command that runs on the host inside the guest's namespace.
func (g *Guest) HostCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	a := append([]string{"netns", "exec", g.Netns, name}, args...)
	cmd := exec.CommandContext(ctx, "ip", a...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Close powers the guest off: it kills the QEMU process it started (by pid) and deletes the
// namespace it created (which removes the taps).
func (g *Guest) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.closed = true
	if g.conn != nil {
		g.conn.Close()
	}
	g.mu.Unlock()
	if g.qemu != nil && g.qemu.Process != nil {
		_ = g.qemu.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(5 * time.Second):
			_ = g.qemu.Process.Kill()
			<-g.exited
		}
		removePidFile(g.qemu.Process.Pid)
	}
	if g.Netns != "" {
		_, _ = run(10*time.Second, "ip", "netns", "del", g.Netns)
	}
	if !g.opts.KeepDir && g.RunDir != "" {
		os.RemoveAll(g.RunDir)
	}
}

// pidDir records the QEMU processes and namespaces started by this package, so ci.sh can
// clean up after a test binary that was killed: each file, named by QEMU's pid, holds the
// namespace and the pid of the test process that owns them. ci.sh removes exactly those,
// and only when the owner is gone (another run may be using the same cache concurrently).
func pidDir() string { return filepath.Join(CacheDir(), "run") }

func writePidFile(pid int, netns string) {
	_ = os.MkdirAll(pidDir(), 0o755)
	_ = os.WriteFile(filepath.Join(pidDir(), strconv.Itoa(pid)+".pid"), []byte(fmt.Sprintf("%s %d\n", netns, os.Getpid())), 0o644)
}

func removePidFile(pid int) {
	_ = os.Remove(filepath.Join(pidDir(), strconv.Itoa(pid)+".pid"))
}
