package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoProcesses runs the example as it is meant to be run: a server process and a
// client process on 127.0.0.1, with no tuning flags.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example as two processes")
	}
	bin := filepath.Join(t.TempDir(), "remotemem")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// RoCEv2: both processes on one IP (a loopback address of the test's own), the server
	// on UDP 4791 as the example defaults, the client on a free port.
	for _, network := range []string{"iwarp", "rocev2"} {
		ip := "127.0.0.1"
		if network == "rocev2" {
			ip = fmt.Sprintf("127.0.%d.%d", 100+rand.IntN(100), 1+rand.IntN(250))
		}
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv := exec.CommandContext(ctx, bin, "-net", network, "-serve", "-port", "0", "-local", ip)
			out, err := srv.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			srv.Stderr = srv.Stdout
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			logged := make(chan struct{})
			defer func() {
				_ = srv.Process.Kill()
				<-logged
				_ = srv.Wait()
			}()
			sc := bufio.NewScanner(out)
			if !sc.Scan() {
				close(logged)
				t.Fatal("server printed nothing")
			}
			line := sc.Text() // serving N bytes over NET on HOST:PORT
			f := strings.Fields(line)
			_, port, err := net.SplitHostPort(f[len(f)-1])
			if len(f) < 6 || f[0] != "serving" || err != nil {
				close(logged)
				t.Fatalf("server: %q", line)
			}
			go func() {
				defer close(logged)
				for sc.Scan() {
					t.Log("server:", sc.Text())
				}
			}()
			cli, err := exec.CommandContext(ctx, bin, "-net", network, "-connect", ip, "-local", ip, "-port", port).CombinedOutput()
			if err != nil {
				t.Fatalf("client: %v\n%s", err, cli)
			}
			if !strings.Contains(string(cli), "verified") {
				t.Fatalf("client: %s", cli)
			}
			t.Log("client:", strings.TrimSpace(string(cli)))
		})
	}
}
