package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrnic/softrnic/internal/tools/tool"
	"github.com/softrnic/softrnic/rnic"
)

// runClient connects to the server and pings o.Count times (forever for 0), then
// disconnects (rping_run_client).
func runClient(ctx context.Context, o Options, out output) error {
	var local netip.Addr
	if o.RoCE {
		var err error
		if local, err = tool.LocalIP("--local", o.Local, o.Addr); err != nil {
			return err
		}
	}
	dev, t, err := open(&o, local)
	if dev != nil {
		defer dev.Close()
	}
	if t != nil {
		defer t.Close() // before the device
	}
	if err != nil {
		return err
	}
	s, err := newSession(dev, &o, out)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	if s.conn, err = dial(ctx, t, s.qp, &o); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer s.report()
	out.debugf("rdma_connect successful")
	start := byte(firstChar)
	for ping := 0; o.Count == 0 || ping < o.Count; ping++ {
		fillSource(s.start, ping, start)
		start++
		if start > lastChar {
			start = firstChar
		}
		if err := s.postSource(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return s.clientErr("wait for RDMA_WRITE_ADV", err)
		}
		if err := s.postSink(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, rnic.WCRecv); err != nil {
			return s.clientErr("wait for RDMA_WRITE_COMPLETE", err)
		}
		if o.Validate && !bytes.Equal(s.start, s.rdma) {
			return errors.New("data mismatch!")
		}
		if o.Verbose {
			fmt.Fprintf(out.stdout, "ping data: %s\n", cstr(s.rdma))
		}
	}
	s.disconnect(10 * time.Second)
	return nil
}

func (s *session) clientErr(where string, err error) error {
	if err == errDisconnected {
		fmt.Fprintln(s.out.stderr, "client DISCONNECT EVENT...")
	}
	return fmt.Errorf("%s: %w", where, err)
}

// disconnect closes the connection gracefully (rdma_disconnect) and waits for the flush,
// at most wait.
func (s *session) disconnect(wait time.Duration) {
	s.qp.Disconnect()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.conn.Done():
	case <-t.C:
	}
}
