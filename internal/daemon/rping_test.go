package daemon

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/tools/rping"
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/mpa"
	"github.com/softrnic/softrnic/rnic"
	"github.com/softrnic/softrnic/rnic/iwarp"
)

// TestDaemonRpingConcurrent: the daemon's rping server serves clients as rping -s -P
// does. A connected client that sends nothing does not hold the others up; clients run at
// the same time; one client right after another is never refused (no gap between runs);
// the idle client's session ends after -rping-idle-timeout. The status counts sessions.
func TestDaemonRpingConcurrent(t *testing.T) {
	sock := testSock(t)
	port := strconv.Itoa(freePort(t))
	o, err := ParseArgs([]string{"-foreground", "-sock", sock, "-iwarp", "127.0.0.1:0", "-target-mib", "0",
		"-rping", "127.0.0.1:" + port, "-rping-idle-timeout", "1500ms"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	o.LogOut = testLog{t}
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The idle client: connected, never sends its first rping message.
	dev, err := rnic.Open(rnic.Config{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8)
	qp, err := dev.CreateQP(pd, rnic.QPAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	idle, err := iwarp.Dial(ctx, qp, "127.0.0.1:"+port, &iwarp.Config{MPA: mpa.Config{Rev: 2}}, iwarp.ConnParam{IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	t0 := time.Now()

	client := func() error {
		ro, err := rping.ParseArgs([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "5", "-V", "--timeout", "10s"})
		if err != nil {
			t.Fatal(err)
		}
		return rping.Run(ctx, ro, nil, nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = client() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d while another client idles: %v", i, err)
		}
	}
	for i := 0; i < 5; i++ {
		if err := client(); err != nil {
			t.Fatalf("back-to-back client %d: %v", i, err)
		}
	}
	// Only the idle client's session is left (the others end as their clients leave).
	awaitStatus(t, sock, func(s *uapi.Status) error {
		if time.Since(t0) > 1500*time.Millisecond {
			return nil // past the idle timeout: checked below
		}
		if s.Daemon.RpingSessions != 1 || s.Daemon.RpingIdleClosed != 0 {
			return fmt.Errorf("with the idle client connected: daemon counters %+v", s.Daemon)
		}
		return nil
	})
	select {
	case <-qp.Done():
	case <-ctx.Done():
		t.Fatal("the idle client's session was not ended")
	}
	awaitStatus(t, sock, func(s *uapi.Status) error {
		if s.Daemon.RpingSessions != 0 || s.Daemon.RpingIdleClosed != 1 || s.Daemon.RpingRefused != 0 {
			return fmt.Errorf("daemon counters %+v", s.Daemon)
		}
		return nil
	})
}
