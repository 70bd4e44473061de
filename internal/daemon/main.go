package daemon

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/softrnic/softrnic/internal/hostlink"
	"github.com/softrnic/softrnic/internal/uapi"
)

// Summary is the one-line description "softrnic help" prints.
const Summary = "the host's soft RNIC: devices processes attach to, and a control socket [-rocev2 ip[:port] | -netdev dev] [-device name@addr] [-iwarp addr:port] [-sock path]"

// Main is the "softrnic daemon" command.
func Main(args []string) int {
	o, err := ParseArgs(args, os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 2
	}
	if !o.Foreground && os.Getenv(foregroundEnv) == "" {
		return detach(o, args)
	}
	return hostlink.Main("daemon", o.Link, os.Stderr, func() int { return run(o) }) // -xdp, -pcap
}

// run is the daemon in the foreground, until SIGINT or SIGTERM.
func run(o Options) int {
	if o.LogFile != "" {
		f, err := os.OpenFile(o.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			fmt.Fprintln(os.Stderr, "daemon:", err)
			return 1
		}
		defer f.Close()
		o.LogOut = f
	}
	// Catch the signals before the socket exists, so a stop request that follows its
	// appearance is never lost.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	ds, err := StartAll(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	for _, d := range ds {
		d.log.Info("up", "device", d.o.Name, "sock", d.o.Sock, "pid", os.Getpid())
	}
	s := <-sig
	ds[0].log.Info("shutting down", "signal", s.String())
	ret := 0
	for _, d := range ds {
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "daemon:", err)
			ret = 1
		}
	}
	return ret
}

// StartAll starts the daemon's device (Start) and each of its -device devices, or none.
func StartAll(o Options) ([]*Daemon, error) {
	d, err := Start(o)
	if err != nil {
		return nil, err
	}
	ds := []*Daemon{d}
	for _, spec := range o.Devices {
		do, err := deviceOptions(o, spec)
		if err == nil {
			if d, err = Start(do); err == nil {
				ds = append(ds, d)
				continue
			}
		}
		for _, d := range ds {
			d.Close()
		}
		return nil, err
	}
	return ds, nil
}

// foregroundEnv tells the re-executed daemon that it is the detached one.
const foregroundEnv = "SOFTRNIC_DAEMON_FOREGROUND"

// detach starts the daemon again with the same arguments as a session leader in the
// background (Go cannot fork), waits until its control socket answers, prints its pid and
// returns.
func detach(o Options, args []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	defer null.Close()
	env := append(os.Environ(), foregroundEnv+"=1")
	p, err := os.StartProcess(exe, append([]string{exe, "daemon"}, args...), &os.ProcAttr{
		Env: env, Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { _, err := p.Wait(); exited <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			fmt.Fprintln(os.Stderr, "daemon: exited during startup (run with -foreground to see why)")
			return 1
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := uapi.GetStatus(ctx, o.Sock)
		cancel()
		if err == nil {
			fmt.Println(p.Pid)
			_ = p.Release()
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "daemon: control socket did not come up; killing", p.Pid)
	_ = p.Kill()
	return 1
}
